"""``TwoDimensionalLas(reference_lists=..., late_demotion=...)``: the reference simulator's queues, off by default.

SymbioticLab/Tiresias ``simulator/run_sim.py`` ``dlas_sim_jobs`` keeps each queue as a list and moves its
waiting jobs behind its running ones after every pass, so a running job keeps its GPUs against an
earlier-submitted waiting job of its queue; Halyard's default (policies/tiresias.py: inside a queue,
arrival order) lets the earlier waiting job preempt it. It also demotes only at its events, its queue
jump computed as ``ceil((limit - executed seconds) / GPUs)``. docs/reproductions/tiresias-public-comparison.md
measures both.
"""

from __future__ import annotations

from factories import Servers, mixed_toml

from halyard.datamodel import JobSpec, parse_cluster
from halyard.emulator import PerformanceModel
from halyard.policies.staged import StagedPolicy
from halyard.policies.tiresias import SkewConsolidation, TwoDimensionalLas
from halyard.scheduling import Simulator


def run(ordering: TwoDimensionalLas, jobs: list[tuple[str, float, int, float]], gpus: int = 1) -> Simulator:
    cluster = parse_cluster(mixed_toml(Servers("{rack}-n{i}", "V100", gpus, "nvlink", 150, 100)))
    sim = Simulator(cluster, StagedPolicy("t", ordering, placement=SkewConsolidation()),
                    PerformanceModel(communication=False), round_s=1.0)
    sim.run([JobSpec(job_id=name, submit_time=t, model="resnet50", num_gpus=n, duration_s=d)
             for name, t, n, d in jobs])
    return sim


def first_preempted(**options: bool) -> str:
    """3 GPUs. A (1 GPU, t=0) reaches queue 1 at 3,250 s; B (2 GPUs, t=10) at 1,635 s, first. At 4,000 s C
    (1 GPU, queue 0) arrives and 2 GPUs are left for queue 1: in arrival order A then B, so B no longer
    fits; in the reference's list B (appended first) then A, so A is the one stopped."""
    sim = run(TwoDimensionalLas(**options), [("A", 0.0, 1, 20_000.0), ("B", 10.0, 2, 20_000.0),
                                             ("C", 4_000.0, 1, 100.0)], gpus=3)
    return next(e.job_id for e in sim.core.log if e.kind.value == "PREEMPTED")


def test_arrival_order_by_default() -> None:
    assert first_preempted() == "B"


def test_reference_lists_keep_the_order_jobs_entered_the_queue() -> None:
    assert first_preempted(reference_lists=True) == "A"


def demoted_at(late: bool) -> float:
    """A (2 GPUs, long) alone; B (1 GPU) waits for a GPU from t=10. A reaches 3,250 GPU-s at 1,625 s and is
    demoted then, and B (queue 0) preempts it. The reference computes A's jump as ceil(3,250 / 2) at t=0
    (1,625 s: right), but at B's arrival (t=10, A executed 10 s) as 10 + ceil((3,250 - 10) / 2) = 1,630 s."""
    sim = run(TwoDimensionalLas(reference_lists=True, late_demotion=late),
              [("A", 0.0, 2, 20_000.0), ("B", 10.0, 1, 100.0)], gpus=2)
    return next(e.time for e in sim.core.log if e.job_id == "A" and e.kind.value == "PREEMPTED")


def test_demotion_at_the_crossing_by_default() -> None:
    assert demoted_at(late=False) == 1625.0


def test_late_demotion_takes_the_reference_jump_time() -> None:
    assert demoted_at(late=True) == 1630.0
