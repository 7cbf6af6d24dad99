"""EasyScale's intra-job and inter-job schedulers (§3.4, §5.2) and the YARN-CS baseline, each rule pinned.

Real scheduling cores over real cluster files and the catalog's step times; the numbers the
assertions expect are worked out from Eq. 1 (corrected) in the comments.
"""

from __future__ import annotations

import pytest
from factories import Servers, job, mixed_toml

from halyard.datamodel import EventKind, JobState, load_cluster, parse_cluster
from halyard.emulator import PerformanceModel
from halyard.policies import Resize, Start, make_policy
from halyard.policies.easyscale import EasyScaleOptions, IntraJob
from halyard.scheduling import SchedulingCore, Simulator


def node_v(gpus: int = 2, nic_gbit_s: float = 200) -> Servers:
    """Node "v": V100s over NVLink (150 GB/s, the default cluster's)."""
    return Servers("v", "V100", gpus, "nvlink", 150, nic_gbit_s, cpus=8, memory_gb=100)


def node_t(gpu_type: str = "T4", nic_gbit_s: float = 200) -> Servers:
    """Node "t": 2 GPUs over PCIe 3.0 x16 (16 GB/s, easyscale-64's T4 servers)."""
    return Servers("t", gpu_type, 2, "pcie", 16, nic_gbit_s, cpus=8, memory_gb=100)


# One 2-GPU V100 node and one 2-GPU T4 node, 200 Gbit/s apart.
MIXED_TOML = mixed_toml(node_v(), node_t())


def elastic(max_p: int, **kw):
    """An EasyScale job: maxP logical workers, 1..maxP GPUs (or as overridden)."""
    shape = {"min_gpus": 1, "max_gpus": max_p, "logical_workers": max_p} | kw
    return job(min(max_p, shape["max_gpus"]), **shape)


def gpus_in(detail: str) -> int:
    return sum(len(part.split(":")[1].split(",")) for part in detail.split(";"))


def log_of(core, kinds=(EventKind.STARTED, EventKind.RESIZED)) -> list[tuple[float, str, str, str]]:
    return [(e.time, e.kind.value, e.job_id, e.detail) for e in core.log if e.kind in kinds]


def test_a_new_job_gets_its_smallest_proposal_then_at_most_doubles_each_round(perf):
    """A job of maxP 8 on an idle easyscale-64: one GPU of the fastest type with all 8 ESTs, then one
    granted proposal per 60 s round, each at most doubling its GPUs (1 -> 2 -> 4 -> 8 V100)."""
    cluster = load_cluster("easyscale-64")
    sim = Simulator(cluster, make_policy("easyscale-heter"), perf, round_s=60.0)
    sim.run([elastic(8, job_id="e", model="bert-large", iterations=3000)])
    events = log_of(sim.core)
    assert [(t, kind, gpus_in(d)) for t, kind, _, d in events] == [
        (0.0, "STARTED", 1), (60.0, "RESIZED", 2), (120.0, "RESIZED", 4), (180.0, "RESIZED", 8)]
    assert all(d.startswith("v100-0:") for *_, d in events)  # V100 is bert's fastest type; one node holds 8
    record = sim.core.records["e"]
    assert record.state is JobState.COMPLETED and record.restarts == 3
    assert [n.workers for n in record.allocation.nodes] == [(1,) * 8]


def test_role_1_maps_ests_by_capability_on_mixed_gpus(perf):
    """The companion database's top plan on 2 V100 + 2 T4 for bert-large (C = 1/0.441 and 1/0.681
    steps/s): every GPU one EST at maxP 4 (f = 0.681 s); at maxP 6 the V100s take two each
    (f = 0.882 s: 2/C_V100 < 2/C_T4) and the T4s one."""
    cluster = parse_cluster(MIXED_TOML)
    core = SchedulingCore(cluster, make_policy("easyscale-heter"), perf, round_s=60.0)
    intra = IntraJob(EasyScaleOptions())
    from halyard.datamodel import Allocation, NodeAllocation

    both = Allocation((NodeAllocation("v", (0, 1), 4, 50_000), NodeAllocation("t", (0, 1), 4, 50_000)))
    view = core.view(0.0)
    four = intra.mapped(view, elastic(4, model="bert-large"), both)
    assert [n.workers for n in four.nodes] == [(1, 1), (1, 1)]
    six = intra.mapped(view, elastic(6, model="bert-large", max_gpus=4), both)
    assert [n.workers for n in six.nodes] == [(2, 2), (1, 1)]
    plan = intra.plan(view, elastic(6, model="bert-large", max_gpus=4), (("T4", 2), ("V100", 2)))
    assert plan.overload == pytest.approx(2 * 0.441) and plan.throughput == pytest.approx(6 / (2 * 0.441))


def test_role_2_proposals_obey_the_artifacts_rules(perf):
    """maxP 8 on 4 V100 of an idle easyscale-64, homogeneous increments only (homo):
    +1 and +3 keep 2 ESTs on some GPU (no faster: refused), +2 wastes 1/3 > 0.30 (refused), +4
    doubles the GPUs at 2x speed -- the only proposal. From 1 GPU, only +1 (at most 2x)."""
    cluster = load_cluster("easyscale-64")
    core = SchedulingCore(cluster, make_policy("easyscale-homo"), perf, round_s=60.0)
    spec = elastic(8, job_id="e", model="bert-large", iterations=10**6)
    core.submit(spec, 0.0)
    core.schedule(0.0)
    intra = IntraJob(EasyScaleOptions(heterogeneous=False))
    record = core.records["e"]
    free = {"V100": 31, "P100": 16, "T4": 16}
    one = intra.proposals(core.view(1.0), record, free)
    assert [(p.gpu_type, p.delta, p.speedup) for p in one] == [("V100", 1, pytest.approx(2.0))]
    core.schedule(60.0)
    core.schedule(120.0)
    assert record.allocation.num_gpus == 4
    proposals = intra.proposals(core.view(200.0), record, {"V100": 28, "P100": 16, "T4": 16})
    assert [(p.gpu_type, p.delta, p.speedup, p.score) for p in proposals] == [
        ("V100", 4, pytest.approx(2.0), pytest.approx(1.25))]
    # Heterogeneous plans may add other types; the top-K are ranked by speed-up per GPU.
    heter = IntraJob(EasyScaleOptions(top_k=5)).proposals(core.view(200.0), record, {"V100": 28, "P100": 16,
                                                                                      "T4": 16})
    assert len(heter) <= 5 and {p.gpu_type for p in heter} > {"V100"}
    assert [p.score for p in heter] == sorted((p.score for p in heter), reverse=True)
    assert all(p.speedup > 1 and p.delta <= 4 for p in heter)
    # A convolution model stays on its type even under heter (D2 would cost it 236%, §3.3).
    conv = elastic(8, job_id="c", model="resnet50", iterations=10**6)
    core.submit(conv, 200.0)
    core.schedule(200.0)
    conv_props = IntraJob(EasyScaleOptions()).proposals(core.view(300.0), core.records["c"],
                                                         {"V100": 20, "P100": 16, "T4": 16})
    assert conv_props and {p.gpu_type for p in conv_props} == {"V100"}


def test_the_inter_job_scheduler_grants_by_speedup_per_gpu_one_per_job_per_round(perf):
    """One 3-GPU node. A (maxP 3) and B (maxP 2) start at once on one GPU each; one GPU is left.
    A's +1 gives 3 -> 2 local steps (speed-up 1.5, waste 0.25), B's +1 gives speed-up 2: B has the
    higher speed-up per GPU and gets it, though A arrived first. Nothing more within the round; a job
    whose GPUs changed less than a round ago proposes nothing."""
    cluster = parse_cluster(mixed_toml(node_v(gpus=3)))
    core = SchedulingCore(cluster, make_policy("easyscale-homo"), perf, round_s=60.0)
    core.submit(elastic(3, job_id="A", model="bert-large", iterations=10**6), 0.0)
    core.submit(elastic(2, job_id="B", model="bert-large", iterations=10**6), 0.0)
    assert [(type(a), a.job_id, a.allocation.num_gpus) for a in core.schedule(0.0)] == [
        (Start, "A", 1), (Start, "B", 1)]
    assert core.schedule(59.0) == []  # not a round since either started
    acts = core.schedule(60.0)
    assert [(type(a), a.job_id, a.allocation.num_gpus) for a in acts] == [(Resize, "B", 2)]
    assert [n.workers for n in acts[0].allocation.nodes] == [(1, 1)]
    assert core.schedule(61.0) == []  # A's proposal no longer fits; B is not due
    core.submit(elastic(2, job_id="C", model="bert-large", iterations=10**6), 62.0)
    assert core.schedule(62.0) == [] and core.records["C"].state is JobState.PENDING
    assert core.wait_of(core.records["C"]) is not None


def test_heter_uses_other_gpu_types_where_homo_waits(perf):
    """bert-large, maxP 4, on 2 V100 + 2 T4: homo stays on the V100s; heter adds both T4s, because
    with one EST per GPU a step takes 0.681 s instead of 2 x 0.441 s (waste 0.21 <= 0.30)."""
    cluster = parse_cluster(MIXED_TOML)
    ends = {}
    for name in ("easyscale-homo", "easyscale-heter"):
        sim = Simulator(cluster, make_policy(name), perf, round_s=60.0)
        sim.run([elastic(4, job_id="e", model="bert-large", iterations=5000)])
        final = [d for *_, d in log_of(sim.core)][-1]
        ends[name] = (sim.core.records["e"].end_time, final)
    assert ends["easyscale-homo"][1] == "v:0,1"
    assert ends["easyscale-heter"][1] == "v:0,1;t:0,1"
    assert ends["easyscale-heter"][0] < ends["easyscale-homo"][0]


def test_role_3_falls_back_when_a_scale_out_slowed_the_job():
    """VGG19 (575 MB of gradients) with maxP 2 on a 1 Gbit/s network: Eq. 1 (compute only) promises 2x
    from a second GPU on another node, but the all-reduce over the slow link makes the step slower, so
    the intra-job scheduler gives the new GPU back and does not propose that GPU set again for a while."""
    cluster = parse_cluster(mixed_toml(node_v(nic_gbit_s=1), node_t("V100", nic_gbit_s=1)))
    perf = PerformanceModel()
    sim = Simulator(cluster, make_policy("easyscale-homo"), perf, round_s=60.0)
    hog = job(1, job_id="hog", model="vgg19", iterations=10_000, submit=0.0)  # keeps node v's other GPU
    sim.run([hog, elastic(2, job_id="e", model="vgg19", iterations=3000, submit=1.0)])
    events = [(t, kind, d) for t, kind, jid, d in log_of(sim.core) if jid == "e"]
    # Started on one GPU of node v (hog holds the other), grew onto t at its first round, fell back at
    # the next pass; that GPU set is retried only after retry_after_rounds (10) rounds.
    assert events[:3] == [(1.0, "STARTED", "v:1"), (120.0, "RESIZED", "v:1;t:0"), (180.0, "RESIZED", "v:1")]
    assert events[3] == (180.0 + 10 * 60.0, "RESIZED", "v:1;t:0")
    assert sim.core.records["e"].state is JobState.COMPLETED


def test_yarn_cs_gang_schedules_one_gpu_type_per_job(perf):
    """YARN-CS (§5.2): 2 GPUs of one type or nothing -- a free V100 and a free T4 do not make a start --
    while easyscale-heter starts the same job at once on its smallest proposal."""
    cluster = parse_cluster(MIXED_TOML)
    jobs = [job(1, job_id="a", model="bert-large", iterations=2000, gpu_type="V100"),
            job(1, job_id="b", model="bert-large", iterations=2000, gpu_type="T4"),
            job(2, job_id="w", model="bert-large", iterations=500, submit=1.0)]
    sim = Simulator(cluster, make_policy("yarn-cs"), perf, round_s=60.0)
    sim.run(jobs)
    w = sim.core.records["w"]
    first_end = min(sim.core.records[j].end_time for j in ("a", "b"))
    started = [e.time for e in sim.core.log if e.job_id == "w" and e.kind is EventKind.STARTED]
    assert started[0] >= first_end  # it could not use the 2 GPUs left free meanwhile
    assert w.state is JobState.COMPLETED
    assert w.wait is None
    heter = Simulator(cluster, make_policy("easyscale-heter"), perf, round_s=60.0)
    heter.run([jobs[0], jobs[1], elastic(2, job_id="w", model="bert-large", iterations=500, submit=1.0)])
    assert [e.time for e in heter.core.log if e.job_id == "w" and e.kind is EventKind.STARTED] == [1.0]


def test_elastic_jobs_give_gpus_back_to_serving_at_once_and_refill_after(perf):
    """Co-location (§3.4, §5.3): a higher-priority serving job arriving on a cluster that an elastic
    job fills starts at its arrival instant -- the elastic job scales in by Resize in the same pass --
    and once the serving job leaves the elastic job grows back by its proposals. YARN-CS's gang job
    holds its GPUs and the serving job waits for it to finish."""
    cluster = parse_cluster(mixed_toml(node_v(gpus=4)))
    serving = job(2, job_id="serve", model="neumf", iterations=20_000, submit=500.0, priority=1)
    sim = Simulator(cluster, make_policy("easyscale-heter"), perf, round_s=60.0)
    sim.run([elastic(4, job_id="train", model="bert-large", iterations=20_000), serving])
    events = log_of(sim.core, (EventKind.STARTED, EventKind.RESIZED, EventKind.COMPLETED))
    at_500 = [(kind, jid, gpus_in(d) if d else 0) for t, kind, jid, d in events if t == 500.0]
    assert at_500 == [("RESIZED", "train", 2), ("STARTED", "serve", 2)]
    serve_end = sim.core.records["serve"].end_time
    regrown = [(t, gpus_in(d)) for t, kind, jid, d in events if jid == "train" and kind == "RESIZED" and t >= serve_end]
    assert regrown and regrown[0][1] == 4 and regrown[0][0] - serve_end <= 60.0
    assert sim.core.records["serve"].queued_s == 0.0
    yarn = Simulator(cluster, make_policy("yarn-cs"), perf, round_s=60.0)
    yarn.run([job(4, job_id="train", model="bert-large", iterations=20_000), serving])
    assert yarn.core.records["serve"].queued_s == pytest.approx(yarn.core.records["train"].end_time - 500.0)


def _start_time(core, job_id: str) -> float:
    return next(e.time for e in core.log if e.job_id == job_id and e.kind is EventKind.STARTED)


def test_yarn_cs_is_strict_fifo_and_backfill_is_an_option(perf):
    """§5.2: "YARN-CS enforces FIFO mode". A job that cannot start holds back the jobs behind it, even one
    whose T4s are free; ``backfill=True`` (not in the paper, off by default) lets that one through."""
    from halyard.policies.yarn import yarn_cs

    cluster = parse_cluster(MIXED_TOML)
    jobs = [job(1, job_id="a", model="bert-large", iterations=2000, gpu_type="V100"),
            job(2, job_id="head", model="bert-large", iterations=500, gpu_type="V100", submit=1.0),
            job(2, job_id="t4", model="bert-large", iterations=500, gpu_type="T4", submit=2.0)]
    strict = Simulator(cluster, make_policy("yarn-cs"), perf, round_s=60.0)
    strict.run(jobs)
    a_end = strict.core.records["a"].end_time
    assert _start_time(strict.core, "head") == pytest.approx(a_end)
    assert _start_time(strict.core, "t4") == pytest.approx(a_end)  # waited behind the head with 2 T4s free
    loose = Simulator(cluster, yarn_cs(backfill=True), perf, round_s=60.0)
    loose.run(jobs)
    assert _start_time(loose.core, "t4") == 2.0
    assert _start_time(loose.core, "head") == pytest.approx(loose.core.records["a"].end_time)


def test_yarn_cs_one_job_at_a_time_is_the_artifacts_fifo(perf):
    """The artifact's FifoPolicy allocates only the head job: two 1-GPU jobs on a 4-GPU cluster run one
    after the other (an option, off by default: by default both start at once)."""
    from halyard.policies.yarn import yarn_cs

    cluster = parse_cluster(MIXED_TOML)
    jobs = [job(1, job_id="x", model="bert-large", iterations=500, gpu_type="V100"),
            job(1, job_id="y", model="bert-large", iterations=500, gpu_type="V100", submit=1.0)]
    serial = Simulator(cluster, yarn_cs(one_job_at_a_time=True), perf, round_s=60.0)
    serial.run(jobs)
    assert _start_time(serial.core, "y") == pytest.approx(serial.core.records["x"].end_time)
    plain = Simulator(cluster, make_policy("yarn-cs"), perf, round_s=60.0)
    plain.run(jobs)
    assert _start_time(plain.core, "y") == 1.0


def test_strict_fifo_is_refused_where_the_pass_ranks_running_jobs():
    """``backfill=False`` stops a walk in order; a preemptive ordering has no such walk, so it is refused
    by name rather than ignored."""
    from halyard.policies.ordering import Las
    from halyard.policies.staged import StagedPolicy

    with pytest.raises(ValueError, match="backfill=False"):
        StagedPolicy("las-strict", Las(), backfill=False)
