"""``TwoDimensionalLas(running_first=True)``: the reference simulator's order inside a queue, off by default.

SymbioticLab/Tiresias ``simulator/run_sim.py`` ``dlas_sim_jobs`` moves a queue's waiting jobs behind its
running ones after every pass, so a running job keeps its GPUs against an earlier-submitted waiting job
of its queue; Halyard's default (policies/tiresias.py: inside a queue, arrival order) lets the earlier
waiting job preempt it (docs/tiresias-public-comparison.md measures the difference).
"""

from __future__ import annotations

from factories import Servers, mixed_toml

from halyard.controlplane import Simulator
from halyard.datamodel import JobSpec, parse_cluster
from halyard.emulator import PerformanceModel
from halyard.policies.staged import StagedPolicy
from halyard.policies.tiresias import SkewConsolidation, TwoDimensionalLas


def preemptions(running_first: bool) -> dict[str, int]:
    """A and B (1 GPU, 10,000 s each) on one GPU: A runs, is demoted at 3,250 GPU-s and preempted by B
    (queue 0); B is demoted at 3,250 too. Then both are in queue 1, A waiting and submitted first."""
    cluster = parse_cluster(mixed_toml(Servers("{rack}-n{i}", "V100", 1, "nvlink", 150, 100)))
    policy = StagedPolicy("t", TwoDimensionalLas(running_first=running_first), placement=SkewConsolidation())
    sim = Simulator(cluster, policy, PerformanceModel(communication=False))
    sim.run([JobSpec(job_id=name, submit_time=t, model="resnet50", num_gpus=1, duration_s=10_000.0)
             for name, t in (("A", 0.0), ("B", 10.0))])
    return {r.spec.job_id: r.preemptions for r in sim.core.records.values()}


def test_arrival_order_by_default_lets_the_earlier_waiting_job_preempt() -> None:
    assert preemptions(running_first=False)["B"] >= 1


def test_running_first_keeps_the_running_job_of_the_queue() -> None:
    counts = preemptions(running_first=True)
    assert counts["B"] == 0 and counts["A"] == 1
