"""ElasticFlow-LS (ElasticFlow with loosened deadlines), Crius' elastic baseline (§8.3)."""

from __future__ import annotations

from policy_fakes import FakeJob, on, view_of

from halyard.datamodel import JobSpec, parse_cluster
from halyard.emulator import PerformanceModel
from halyard.policies import PassState
from halyard.policies.elasticflow import ElasticFlow, dp_rate
from halyard.policies.plan import Resize, Start
from halyard.testing.cluster import small_cluster_toml

PM = PerformanceModel()
CLUSTER = parse_cluster(small_cluster_toml(2))  # 16 V100


def elastic(job_id: str, n: int = 8) -> JobSpec:
    return JobSpec(job_id, 0.0, "resnet50", n, iterations=100, min_gpus=n // 2, max_gpus=2 * n)


def test_every_job_gets_its_minimum_share_then_the_leftover_goes_by_marginal_return():
    """Three jobs of min 4 GPUs on 16: 12 GPUs of minimum shares, the last 4 double the first job
    (equal marginal returns: the earlier job)."""
    jobs = [FakeJob(elastic(f"j{i}"), arrival_seq=i) for i in range(3)]
    plan = ElasticFlow().schedule(view_of(CLUSTER, 0.0, [], jobs, perf=PM), PassState())
    sizes = {a.job_id: a.allocation.num_gpus for a in plan.actions if isinstance(a, Start)}
    assert sizes == {"j0": 8, "j1": 4, "j2": 4}
    assert all(a.allocation.stages[0].data == a.allocation.num_gpus for a in plan.actions)


def test_a_running_job_is_scaled_down_to_admit_a_new_one():
    """§8.3: ElasticFlow-LS "scales down small jobs when the workload is high to accommodate more
    jobs"; the shrink comes first so the plan applies in order."""
    big = FakeJob(elastic("big"), allocation=on(CLUSTER, ("r0-n0", 8), ("r0-n1", 8)))
    new = FakeJob(elastic("new"), arrival_seq=1)
    plan = ElasticFlow().schedule(view_of(CLUSTER, 0.0, [big], [new], perf=PM), PassState())
    assert [(type(a), a.job_id, a.allocation.num_gpus) for a in plan.actions] == [(Resize, "big", 8),
                                                                                 (Start, "new", 8)]


def test_a_job_whose_minimum_does_not_fit_waits_and_more_gpus_run_faster():
    hog = FakeJob(JobSpec("hog", 0.0, "resnet50", 16, iterations=10), allocation=on(CLUSTER, ("r0-n0", 8),
                                                                                    ("r0-n1", 8)))
    late = FakeJob(JobSpec("late", 0.0, "resnet50", 8, iterations=10), arrival_seq=1)
    plan = ElasticFlow().schedule(view_of(CLUSTER, 0.0, [hog], [late], perf=PM), PassState())
    assert not plan.actions and plan.unplaced["late"].reason == ("its minimum share of 8 GPUs does not fit beside "
                                                                 "the earlier jobs' (0 left)")
    v = view_of(CLUSTER, 0.0, [], [], perf=PM)
    assert dp_rate(v, elastic("x"), 8) > 1.5 * dp_rate(v, elastic("x"), 4)  # the global batch is kept


def test_elasticflow_gives_the_share_that_meets_the_deadline_and_drops_what_it_cannot_admit():
    """ElasticFlow's admission control: a job's minimum share is the least size that finishes it
    by its deadline; a job no share of which fits beside the admitted ones is dropped."""
    v = view_of(CLUSTER, 0.0, [], [], perf=PM)
    t8 = 1.0 / dp_rate(v, elastic("x"), 8)
    tight = FakeJob(JobSpec("tight", 0.0, "resnet50", 8, iterations=100, min_gpus=4, max_gpus=16,
                            deadline=1000 * t8 * 1.1), arrival_seq=0)  # 1,000 iterations left: 4 GPUs are too slow
    impossible = FakeJob(JobSpec("impossible", 0.0, "resnet50", 8, iterations=100, min_gpus=4, max_gpus=16,
                                 deadline=1.0), arrival_seq=1)
    plan = ElasticFlow(loosened=False).schedule(view_of(CLUSTER, 0.0, [], [tight, impossible], perf=PM), PassState())
    assert (type(plan.actions[0]).__name__, plan.actions[0].job_id) == ("Drop", "impossible")
    assert by_size(plan)["tight"] >= 8
    loose = ElasticFlow().schedule(view_of(CLUSTER, 0.0, [], [tight, impossible], perf=PM), PassState())
    assert set(by_size(loose)) == {"tight", "impossible"}  # loosened: both admitted


def by_size(plan) -> dict[str, int]:
    return {a.job_id: a.allocation.num_gpus for a in plan.actions if isinstance(a, Start)}
