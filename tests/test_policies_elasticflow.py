"""ElasticFlow-LS (ElasticFlow with loosened deadlines), Crius' elastic baseline (§8.3)."""

from __future__ import annotations

from factories import two_type_toml
from policy_fakes import FakeJob, on, view_of

from halyard.datamodel import EventKind, JobSpec, JobState, parse_cluster
from halyard.emulator import PerformanceModel
from halyard.policies import PassState
from halyard.policies.elasticflow import ElasticFlow, dp_rate, placeable_types
from halyard.policies.plan import Resize, Start
from halyard.scheduling import Simulator
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


def test_an_elastic_model_without_layer_figures_is_scaled_data_parallel():
    """vgg16 has no layer figures (it can run data parallel only): ElasticFlow-LS still rates it at every
    size from the data-parallel model (global batch kept) and grows it into idle GPUs; before, the rate
    raised UnsupportedParallelismError in the first pass."""
    v = view_of(CLUSTER, 0.0, [], [], perf=PM)
    spec = JobSpec("v", 0.0, "vgg16", 4, iterations=2000, min_gpus=2, max_gpus=8)
    assert dp_rate(v, spec, 8) > 1.5 * dp_rate(v, spec, 4) > 2.25 * dp_rate(v, spec, 2)
    sim = Simulator(CLUSTER, ElasticFlow(), PM)
    sim.run([spec, JobSpec("w", 50.0, "vgg16", 8, iterations=2000, min_gpus=8, max_gpus=16),
             JobSpec("x", 60.0, "vgg16", 8, iterations=200, min_gpus=4, max_gpus=16)])
    sizes = [(e.kind, e.detail.count(",") + 1) for e in sim.core.log if e.job_id == "v" and e.detail]
    # Doubled to max_gpus by the leftover, shrunk to admit x, grown back when x completes.
    assert sizes == [(EventKind.STARTED, 8), (EventKind.RESIZED, 4), (EventKind.RESIZED, 8)]
    assert all(r.state is JobState.COMPLETED for r in sim.core.records.values())


def test_a_shrunk_job_goes_only_where_its_share_of_the_global_batch_fits():
    """vgg16 at 192 per GPU on 4 GPUs fits an A10's 24 GB, but shrunk to 2 GPUs (384 samples each) only
    an A40: ElasticFlow places the 2-GPU share on A40s alone, and with only A10s free the job keeps its
    size and the newcomer waits, instead of a plan the core refuses for memory (which stopped the run)."""
    cluster = parse_cluster(two_type_toml(1, 4))
    v = view_of(cluster, 0.0, [], [], perf=PM)
    spec = JobSpec("a", 0.0, "vgg16", 4, iterations=1000, min_gpus=2, max_gpus=8, batch_size=192)
    assert PM.fits_memory(spec, "A10")
    assert placeable_types(v, spec, 2) == frozenset({"A40"}) and placeable_types(v, spec, 4) is None
    jobs = [JobSpec("hog", 0.0, "resnet50", 4, iterations=100000), spec,
            JobSpec("b", 2.0, "vgg16", 4, iterations=1000, min_gpus=2, max_gpus=8, batch_size=192)]
    sim = Simulator(cluster, ElasticFlow(), PM)
    sim.run(jobs)  # raised PlanError ("needs 33.8 GB on a GPU of 25.8 GB") before
    assert not any(e.kind is EventKind.RESIZED for e in sim.core.log)
    b_start = next(e for e in sim.core.log if e.kind is EventKind.STARTED and e.job_id == "b")
    a_done = next(e for e in sim.core.log if e.kind is EventKind.COMPLETED and e.job_id == "a")
    assert b_start.time == a_done.time
    assert all(r.state is JobState.COMPLETED for r in sim.core.records.values())
