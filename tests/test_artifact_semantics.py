"""The options that take Halyard's simulator to EasyScale's public simulator's semantics (issue 35).

Each is off by default and measured in docs/reproductions/easyscale-public-comparison.md:
``Simulator(rounds_only=True)``
(a pass only at round boundaries, as the artifact's time-stepped ``Cluster.step``),
``PerformanceModel(communication=False)`` (the artifact's step has no all-reduce),
``PerformanceModel(start_cost_s=..., resize_cost_s=...)`` (the artifact's 20 s ``rescale_time`` at the
first start only). Real simulator runs on a real cluster file, no mocks.
"""

from __future__ import annotations

import pytest

from halyard.datamodel import Allocation, JobSpec, NodeAllocation, parse_cluster
from halyard.emulator import PerformanceModel
from halyard.policies import make_policy
from halyard.scheduling import Simulator
from halyard.testing.cluster import small_cluster_toml

CLUSTER = parse_cluster(small_cluster_toml(2, gpus_per_node=4))


def job(job_id: str, submit: float, gpus: int = 4, iterations: int = 100) -> JobSpec:
    return JobSpec(job_id=job_id, submit_time=submit, model="resnet50", num_gpus=gpus, iterations=iterations)


def ends(sim: Simulator) -> dict[str, tuple[float, float]]:
    return {r.spec.job_id: (r.first_start, r.end_time) for r in sim.core.records.values()}


def test_rounds_only_starts_an_arrival_at_the_next_round_boundary() -> None:
    jobs = [job("a", 10.0)]
    default = Simulator(CLUSTER, make_policy("fifo"), PerformanceModel(), round_s=60.0)
    default.run(jobs)
    stepped = Simulator(CLUSTER, make_policy("fifo"), PerformanceModel(), round_s=60.0, rounds_only=True)
    stepped.run(jobs)
    assert ends(default)["a"][0] == 10.0  # event-driven: the arrival is scheduled at once
    assert ends(stepped)["a"][0] == 60.0  # time-stepped: the next 60 s boundary
    run_default = ends(default)["a"][1] - ends(default)["a"][0]
    assert ends(stepped)["a"][1] - ends(stepped)["a"][0] == pytest.approx(run_default)


def test_rounds_only_makes_a_freed_gpu_wait_for_the_round() -> None:
    jobs = [job("a", 0.0, gpus=8, iterations=37), job("b", 1.0, gpus=8)]
    stepped = Simulator(CLUSTER, make_policy("fifo"), PerformanceModel(), round_s=60.0, rounds_only=True)
    stepped.run(jobs)
    a_end = ends(stepped)["a"][1]
    b_start = ends(stepped)["b"][0]
    assert a_end % 60.0 != 0.0
    assert b_start == (a_end // 60.0 + 1) * 60.0


def test_free_communication_leaves_compute_only() -> None:
    spanning = Allocation(tuple(NodeAllocation(f"r0-n{i}", (0, 1, 2, 3), 0, 0) for i in range(2)))
    spec = job("x", 0.0, gpus=8)
    paid = PerformanceModel().iteration_time(spec, spanning, CLUSTER)
    free = PerformanceModel(communication=False).iteration_time(spec, spanning, CLUSTER)
    assert paid.communication_s > 0.0 and paid.total_s > paid.compute_s
    assert free.communication_s == 0.0 and free.total_s == free.compute_s == paid.compute_s


def test_start_cost_is_charged_once_and_resize_cost_replaces_the_checkpoint() -> None:
    jobs = [job("a", 0.0)]
    plain = Simulator(CLUSTER, make_policy("fifo"), PerformanceModel(), round_s=60.0)
    plain.run(jobs)
    charged = Simulator(CLUSTER, make_policy("fifo"), PerformanceModel(start_cost_s=20.0), round_s=60.0)
    charged.run(jobs)
    assert ends(charged)["a"][1] == pytest.approx(ends(plain)["a"][1] + 20.0)
    spec = job("b", 0.0)
    assert PerformanceModel().reconfigure_cost_s(spec) > 0.0
    assert PerformanceModel(resize_cost_s=0.0).reconfigure_cost_s(spec) == 0.0
    with pytest.raises(ValueError):
        PerformanceModel(start_cost_s=-1.0)


def test_first_on_slowest_starts_a_new_elastic_job_on_the_slowest_type() -> None:
    """EasyScaleOptions(first_on_slowest=True): the artifact's new job takes its least-speed-up proposal (one GPU
    of the slowest type, easy_policy.py optimize_v3), not the fastest type with room."""
    from halyard.datamodel import load_cluster
    from halyard.policies.easyscale import EasyScaleOptions, EasyScalePlacement, EasyScaleProposals, SmallestProposal
    from halyard.policies.ordering import Fifo
    from halyard.policies.staged import StagedPolicy

    cluster = load_cluster("easyscale-64")
    elastic = [JobSpec(job_id="e", submit_time=0.0, model="bert-large", num_gpus=8, batch_size=8, iterations=50,
                       min_gpus=1, max_gpus=8, logical_workers=8)]

    def first_type(options: EasyScaleOptions) -> str:
        policy = StagedPolicy("es", Fifo(), sizing=SmallestProposal(), placement=EasyScalePlacement(options),
                              adjusters=(EasyScaleProposals(options),))
        sim = Simulator(cluster, policy, PerformanceModel(), round_s=60.0)
        sim.run(elastic)
        started = next(e for e in sim.core.log if e.kind.name == "STARTED")
        return cluster.node(started.detail.split(":")[0]).gpu_type

    assert first_type(EasyScaleOptions()) == "V100"
    assert first_type(EasyScaleOptions(first_on_slowest=True)) == "T4"
