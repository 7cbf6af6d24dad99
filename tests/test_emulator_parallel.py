"""The parallelism-aware performance model: one answer for iteration time and per-link phases.

Tensor parallelism (Megatron-LM with sequence parallelism: 4 collectives per layer and
pass, Korthikanti et al. §4.2.2), pipelines (Crius §5.1: first micro-batch through all
stages + (B - 1) x the slowest stage, B = 4 x stages after GPipe), per-stage data-parallel
all-reduce, heterogeneous stages, and memory per GPU under the plan.
"""

from __future__ import annotations

import pytest
from factories import Servers, job, mixed_toml

from halyard.datamodel import Allocation, NodeAllocation, Parallelism, StagePlan, Tier, parse_cluster
from halyard.emulator import PerformanceModel
from halyard.emulator.collectives import GBYTE
from halyard.emulator.contention import profile_from_iteration
from halyard.emulator.fabric import Fabric, link_gbytes
from halyard.emulator.parallel import MICRO_BATCHES_PER_STAGE, UnsupportedParallelismError
from halyard.policies import make_policy
from halyard.scheduling import Simulator

MODEL = "bert-large"  # 24 layers, 786,432 B of layer output per sequence, reference batch 8

# One V100 and one A100 server in one rack (links as the small cluster's: NVLink 150 GB/s,
# 200 Gbit/s NICs; the bundled default cluster's sourced figures).
MIXED = mixed_toml(*(Servers(gpu.lower(), gpu, 4, "nvlink", 150, 200, cpus=24, memory_gb=500)
                     for gpu in ("V100", "A100")))


def alloc(*parts: tuple[str, tuple[int, ...]], stages: tuple[StagePlan, ...] = ()) -> Allocation:
    return Allocation(tuple(NodeAllocation(node, gpus, 0, 0) for node, gpus in parts), stages=stages)


def spec(gpus: int, par: Parallelism | None, model: str = MODEL):
    return job(gpus, model=model, iterations=100, parallelism=par)


def opt_s(perf, gpu: str = "V100") -> float:
    return perf.optimizer_step_s(MODEL, gpu)


def test_data_parallel_jobs_keep_the_data_parallel_model(perf, small_cluster):
    """parallelism None or data-only: job_timing is iteration_time and its all-reduce profile, bit for bit."""
    a = alloc(("r0-n0", (0, 1)), ("r1-n0", (0, 1)))
    for par in (None, Parallelism(data=4)):
        s = spec(4, par)
        jt = perf.job_timing(s, a, small_cluster)
        assert jt.iteration == perf.iteration_time(spec(4, None), a, small_cluster)
        expected = profile_from_iteration(jt.iteration, link_gbytes(perf.profile(MODEL).gradient_bytes, 2))
        assert [(load.kind, load.name) for load in jt.links] == [("nic", "r0-n0"), ("nic", "r1-n0"),
                                                                 ("uplink", "r0"), ("uplink", "r1")]
        assert all(load.profile == expected for load in jt.links)
        assert jt.micro_batches == 1 and jt.stages == ()


def test_pipeline_latency_is_crius_formula(perf, small_cluster):
    """Crius §5.1 (Fig. 10): T1 + T2 + (B - 1) x (T_slowest - T_comm,slowest), with B = 4 x stages
    (GPipe). Two stages on one node: stage 2 receives the activation and sends its gradient back
    over NVLink; the data-parallel degree is 1, so only the optimizer step follows the flush."""
    s = spec(2, Parallelism(1, 1, 2))
    jt = perf.job_timing(s, alloc(("r0-n0", (0, 1))), small_cluster)
    assert jt.micro_batches == 4 * 2 == MICRO_BATCHES_PER_STAGE * 2
    opt = opt_s(perf)
    half = (perf.profile(MODEL).compute_s["V100"] - opt) / 2  # each stage: half the layers, one micro-batch
    send = 786_432 * 8 / (150 * GBYTE) + perf.tier_latency_s(Tier.NODE)  # one layer output x 8 sequences
    t1, t2 = half, half + 2 * send  # T_i = compute + comm with the previous stage (both directions)
    expected = t1 + t2 + (8 - 1) * (t2 - 2 * send) + opt / 2
    assert jt.iteration.total_s == pytest.approx(expected, rel=1e-12)
    assert jt.iteration.tier is Tier.NODE and jt.links == ()  # nothing leaves the node
    assert [st.recv_s for st in jt.stages] == [0.0, pytest.approx(2 * send)]


def test_tensor_parallel_inside_nvlink_beats_across_racks(perf, small_cluster):
    """Per layer 8 all-gather/reduce-scatter rings of (t-1)/t x one layer's output, on the critical
    path, over the tier the group spans: NVLink (150 GB/s) inside a node, NICs and uplinks across racks."""
    s = spec(4, Parallelism(1, 4, 1))
    inside = perf.job_timing(s, alloc(("r0-n0", (0, 1, 2, 3))), small_cluster)
    across = perf.job_timing(s, alloc(("r0-n0", (0, 1)), ("r1-n0", (0, 1))), small_cluster)
    opt = opt_s(perf)
    message = 786_432 * 8
    ring = 0.75 * message / (150 * GBYTE) + 3 * perf.tier_latency_s(Tier.NODE)
    compute = (perf.profile(MODEL).compute_s["V100"] - opt) / 4 + opt / 4
    assert inside.iteration.total_s == pytest.approx(compute + 24 * 8 * ring, rel=1e-12)
    assert inside.iteration.compute_s == pytest.approx(compute, rel=1e-12)
    assert inside.links == ()
    # Across racks the ring is bound by the 25 GB/s NICs: same compute, six times the collective time.
    assert across.iteration.compute_s == pytest.approx(inside.iteration.compute_s)
    assert across.iteration.tier is Tier.SPINE
    assert across.iteration.exposed_s > 5 * inside.iteration.exposed_s
    assert across.iteration.total_s > inside.iteration.total_s
    assert {(load.kind, load.name) for load in across.links} == {("nic", "r0-n0"), ("nic", "r1-n0"),
                                                                 ("uplink", "r0"), ("uplink", "r1")}
    nic = next(load for load in across.links if load.name == "r0-n0")
    assert nic.gbytes == pytest.approx(24 * 8 * 0.75 * message / GBYTE)  # every collective's ring edge
    up = [p for p in nic.profile.phases if p.up]
    assert len(up) == 2  # Cassini Fig. 4.1c: busy in forward and in backward, then a quiet tail
    assert nic.profile.iteration_s == pytest.approx(across.iteration.total_s)


def test_tensor_pipeline_and_data_parallel_differ_on_the_same_nodes(perf, small_cluster):
    """The same model on the same two nodes: one all-reduce phase (DP), collectives in forward and
    backward (TP across the nodes), small activation sends (PP cut between the nodes)."""
    a = alloc(("r0-n0", (0, 1, 2, 3)), ("r0-n1", (0, 1, 2, 3)))
    dp = perf.job_timing(spec(8, None), a, small_cluster)
    tp = perf.job_timing(spec(8, Parallelism(1, 8, 1)), a, small_cluster)
    pp = perf.job_timing(spec(8, Parallelism(1, 4, 2)), a, small_cluster)
    times = {dp.iteration.total_s, tp.iteration.total_s, pp.iteration.total_s}
    assert len(times) == 3

    def nic(jt):
        return next(load for load in jt.links if load.name == "r0-n0")

    assert [p.up for p in nic(dp).profile.phases] == [False, True]  # Fig. 4.1a: the all-reduce ends it
    assert nic(tp).profile.phases[0].up and nic(tp).profile.phases[1].up
    # The pipeline cuts between the nodes: each NIC carries one layer output per micro-batch each way.
    micro = pp.micro_batches
    assert micro == 8
    assert nic(pp).gbytes == pytest.approx(2 * micro * 786_432 * 8 / GBYTE)
    assert nic(pp).gbytes < nic(dp).gbytes and nic(pp).gbytes < nic(tp).gbytes
    assert pp.stages[1].recv_s > 0.0 and pp.stages[0].recv_s == 0.0
    assert pp.iteration.tier is Tier.RACK and tp.iteration.tier is Tier.RACK


def test_hybrid_stage_all_reduce_over_the_data_parallel_groups(perf, small_cluster):
    """DP 2 x TP 2 on two nodes: TP pairs stay in each node, the data-parallel groups cross the NICs
    with the stage's gradients divided over the tensor shards."""
    a = alloc(("r0-n0", (0, 1)), ("r0-n1", (0, 1)))
    jt = perf.job_timing(spec(4, Parallelism(2, 2, 1)), a, small_cluster)
    nic = next(load for load in jt.links if load.name == "r0-n0")
    grads = perf.profile(MODEL).gradient_bytes
    # Two rings (one per tensor rank), each 2 (d-1)/d x S/2 over the NIC.
    assert nic.gbytes == pytest.approx(2 * (2 * 0.5 * grads / 2) / GBYTE)
    assert jt.stages[0].allreduce_s > 0.0 and jt.stages[0].tensor_comm_s > 0.0


def test_heterogeneous_pipeline_waits_for_the_slowest_stage(perf):
    """A Cell over a V100 and an A100 server: the slowest stage sets the (B - 1) term."""
    cluster = parse_cluster(MIXED, source="mixed.toml")
    s = spec(2, Parallelism(1, 1, 2))
    mixed = perf.job_timing(s, alloc(("v100", (0,)), ("a100", (0,))), cluster)
    v100 = perf.job_timing(s, alloc(("v100", (0, 1))), cluster)
    a100 = perf.job_timing(s, alloc(("a100", (0, 1))), cluster)
    assert [st.gpu_type for st in mixed.stages] == ["V100", "A100"]
    assert a100.iteration.total_s < mixed.iteration.total_s < v100.iteration.total_s
    st = mixed.stages
    slowest = max(range(2), key=lambda i: st[i].compute_s + st[i].recv_s)
    assert slowest == 0
    tail = max(opt_s(perf, "V100"), opt_s(perf, "A100")) / 2
    expected = sum(x.compute_s + x.recv_s for x in st) + (8 - 1) * st[0].compute_s + tail
    assert mixed.iteration.total_s == pytest.approx(expected, rel=1e-12)
    # A stage mixing both types waits for its V100.
    both = perf.job_timing(spec(2, Parallelism(2, 1, 1)), alloc(("v100", (0,)), ("a100", (0,))), cluster)
    assert both.iteration.compute_s == pytest.approx(perf.ideal_iteration_time(s, "V100"))


def test_stage_plans_from_the_allocation_and_their_errors(perf, small_cluster):
    """Allocation.stages (a Crius Cell's per-stage DP x TP plan) overrides the spec's uniform plan."""
    a = alloc(("r0-n0", (0, 1, 2, 3)), stages=(StagePlan(2, data=2), StagePlan(2, tensor=2)))
    jt = perf.job_timing(spec(4, None), a, small_cluster)
    assert [(st.data, st.tensor) for st in jt.stages] == [(2, 1), (1, 2)]
    assert jt.micro_batches == 8
    with pytest.raises(UnsupportedParallelismError, match="need 8 GPUs"):
        perf.job_timing(spec(4, None), alloc(("r0-n0", (0, 1, 2, 3)), stages=(StagePlan(4, 2, 2),) * 2),
                        small_cluster)


def test_a_model_without_layer_figures_runs_one_data_parallel_stage_at_any_size(perf, small_cluster):
    """vgg16 has no layer figures: one data-parallel stage keeping the global batch (an elastic resize,
    ElasticFlow's) needs none, and costs on its N_G GPUs exactly the data-parallel iteration; on twice
    the GPUs each holds half the samples. Stages or tensor shards still need the layers and say so."""
    s = job(4, model="vgg16", iterations=100)
    four = alloc(("r0-n0", (0, 1, 2, 3)))
    plain = perf.job_timing(s, four, small_cluster).iteration.total_s
    one_stage = perf.job_timing(s, alloc(("r0-n0", (0, 1, 2, 3)), stages=(StagePlan(4, data=4),)), small_cluster)
    assert one_stage.iteration.total_s == pytest.approx(plain, rel=1e-9)
    eight = perf.job_timing(s, alloc(("r0-n0", tuple(range(8))), stages=(StagePlan(8, data=8),)), small_cluster)
    assert 0.4 * plain < eight.iteration.total_s < 0.6 * plain
    with pytest.raises(UnsupportedParallelismError, match=r"data parallel only .* not stages"):
        perf.job_timing(s, alloc(("r0-n0", (0, 1, 2, 3)), stages=(StagePlan(2, data=2),) * 2), small_cluster)
    with pytest.raises(UnsupportedParallelismError, match="tensor degree 1"):
        perf.job_timing(s, alloc(("r0-n0", (0, 1, 2, 3)), stages=(StagePlan(4, tensor=4),)), small_cluster)


def test_a_resized_plan_keeps_tensor_and_pipeline_and_grows_data(perf, small_cluster):
    """An elastic resize of a (1, 2, 2) job to 8 GPUs runs two replicas of the same pipeline: the
    same work per GPU, plus each stage's gradient all-reduce between the replicas."""
    s = spec(4, Parallelism(1, 2, 2))
    four = perf.job_timing(s, alloc(("r0-n0", (0, 1, 2, 3))), small_cluster)
    eight = perf.job_timing(s, alloc(("r0-n0", (0, 1, 2, 3)), ("r0-n1", (0, 1, 2, 3))), small_cluster)
    assert [(st.data, st.tensor) for st in eight.stages] == [(2, 2), (2, 2)]
    assert eight.stages[0].compute_s == pytest.approx(four.stages[0].compute_s)
    assert eight.stages[0].allreduce_s > 0.0 == four.stages[0].allreduce_s
    assert eight.iteration.total_s > four.iteration.total_s


def test_memory_per_gpu_under_the_plan(perf, small_cluster):
    """State sharded over stages x tensor; activations of the micro-batches in flight (1F1B:
    stages - i for stage i), so stage 0 of a uniform plan needs what memory_footprint says."""
    s = spec(8, Parallelism(1, 2, 4))
    a = alloc(("r0-n0", (0, 1, 2, 3)), ("r0-n1", (0, 1, 2, 3)))
    stages = perf.plan_memory(s, a, small_cluster)
    assert len(stages) == 4
    flat = perf.memory_footprint(s, "V100")
    assert stages[0].state_bytes == pytest.approx(flat.state_bytes)
    assert stages[0].activation_bytes == pytest.approx(flat.activation_bytes)
    assert [round(f.activation_bytes / stages[-1].activation_bytes) for f in stages] == [4, 3, 2, 1]
    assert perf.fits_plan(s, a, small_cluster)
    big = job(2, model=MODEL, iterations=10, batch_size=256, parallelism=Parallelism(1, 1, 2))
    assert not perf.fits_plan(big, alloc(("r0-n0", (0, 1))), small_cluster)  # 154 GB of activations


def test_simulator_and_fabric_charge_the_plan(perf, small_cluster):
    """The pacer runs a tensor-parallel job at job_timing's time, and the fabric puts the job's own
    per-link phases on the NICs it crosses."""
    s = spec(4, Parallelism(1, 4, 1))
    sim = Simulator(small_cluster, make_policy("fifo"), perf, round_s=300.0)
    sim.run([s])
    record = sim.core.records[s.job_id]
    step = perf.job_timing(s, record.allocation, small_cluster).iteration.total_s
    assert step < perf.iteration_time(spec(4, None), record.allocation, small_cluster).total_s
    assert record.end_time == pytest.approx(100 * step)

    # The same bert-large job on the same GPUs of two nodes beside a vgg11 data-parallel job: its
    # tensor collectives (Up in forward and backward) slow the all-reduce of vgg11; cut as a
    # pipeline between the nodes, its small activation sends leave vgg11 at dedicated speed.
    across = alloc(("r0-n0", (0, 1)), ("r0-n1", (0, 1)))
    slowed = {}
    for name, par in (("tp", Parallelism(1, 4, 1)), ("pp", Parallelism(1, 2, 2))):
        fabric = Fabric(perf, small_cluster)
        fabric.place(name, spec(4, par), across, 0.0)
        fabric.place("dp", spec(4, None, model="vgg11"), alloc(("r0-n0", (2, 3)), ("r0-n1", (2, 3))), 0.0)
        fabric.settle()
        slowed[name] = fabric.slowdown("dp")
    assert slowed["tp"] > 1.01 and slowed["pp"] == 1.0


async def test_replay_runs_plans_as_the_simulator_does():
    """DESIGN.md's invariant for parallel plans: a tensor-parallel job split over two nodes, a
    data-parallel co-runner on one of its NICs and a pipeline, through the control plane and the
    emulated agents (which time iterations with job_timing too), finish when the simulator says."""
    from halyard.experiments.replay import replay
    from halyard.testing.cluster import small_cluster_toml

    toml = small_cluster_toml(3, gpus_per_node=4)
    cluster = parse_cluster(toml, source="three.toml")
    jobs = [job(6, job_id="tp", model=MODEL, iterations=1500, parallelism=Parallelism(1, 6, 1)),
            job(6, job_id="dp", model="vgg11", iterations=1500),
            job(4, job_id="pp", model=MODEL, iterations=60, parallelism=Parallelism(1, 2, 2), submit=20.0)]
    sim = Simulator(cluster, make_policy("fifo"), PerformanceModel())
    sim.run(jobs)
    tp, dp = sim.core.records["tp"], sim.core.records["dp"]
    assert len(tp.allocation.node_names) == 2  # it crosses NICs, one of them with dp
    dedicated = sim.perf.job_timing(dp.spec, dp.allocation, cluster).iteration.total_s
    assert dp.end_time > 1.03 * 1500 * dedicated  # the tensor collectives slow its all-reduce
    run = await replay(jobs, cluster, toml, policy="fifo", speedup=500.0)
    assert run.summary["completed"] == len(jobs)
    for j in jobs:
        ran, simulated = run.core.records[j.job_id], sim.core.records[j.job_id]
        assert ran.end_time - ran.spec.submit_time == pytest.approx(simulated.end_time - j.submit_time, rel=0.02)


def test_consolidated_time_of_a_plan_is_its_tightest_allocation(perf, small_cluster):
    """Trace durations become iterations with the job's own plan on its tightest placement."""
    tp = spec(4, Parallelism(1, 4, 1))
    one_node = alloc(("r0-n0", (0, 1, 2, 3)))
    assert perf.consolidated_iteration_time(tp, small_cluster) == perf.job_timing(tp, one_node,
                                                                                  small_cluster).iteration.total_s
    pp = spec(8, Parallelism(1, 4, 2))
    one_rack = alloc(("r0-n0", (0, 1, 2, 3)), ("r0-n1", (0, 1, 2, 3)))
    assert perf.consolidated_iteration_time(pp, small_cluster) == perf.job_timing(pp, one_rack,
                                                                                  small_cluster).iteration.total_s
    assert perf.consolidated_iteration_time(pp, small_cluster) != perf.consolidated_iteration_time(
        spec(8, None), small_cluster)


def test_a_cell_plan_splits_the_global_batch_into_b_micro_batches(perf, small_cluster):
    """GPipe, which Crius §5.1 follows: a Cell's plan splits the job's global batch (num_gpus x batch)
    into B = 4 x stages micro-batches, so every Cell trains the same samples per iteration. Two
    one-GPU stages: each micro-batch is 1/B of the 2-GPU global batch through half the layers."""
    s = spec(2, None)
    cell = perf.job_timing(s, alloc(("r0-n0", (0, 1)), stages=(StagePlan(1), StagePlan(1))), small_cluster)
    b = cell.micro_batches
    assert b == 8
    per_micro = (perf.profile(MODEL).compute_s["V100"] - opt_s(perf)) * 2 / 2 / b  # 2 replicas, half, 1/B
    assert [st.compute_s for st in cell.stages] == [pytest.approx(per_micro)] * 2
    # (B + S - 1) x per micro-batch: the bubble is all a pipeline adds over one GPU's compute.
    assert cell.iteration.compute_s == pytest.approx((b + 1) * per_micro + opt_s(perf) / 2, rel=1e-9)
    # Memory: stage 0 keeps min(B, S) = 2 micro-batches of 2 x 8 / 8 = 2 sequences in flight.
    mem = perf.plan_memory(s, alloc(("r0-n0", (0, 1)), stages=(StagePlan(1), StagePlan(1))), small_cluster)
    p = perf.profile(MODEL)
    assert mem[0].activation_bytes == pytest.approx(2 * 2 * p.activation_bytes / p.reference_batch / 2)


@pytest.mark.parametrize(("model", "gpu", "gpus", "plan"), [
    ("bert-1.3b", "A40", 1, ((1, 1),)),        # 20.8 GB of state fits 48 GiB data parallel
    ("bert-1.3b", "A10", 2, ((2, 1),)),        # state fits 24 GiB; 32 sequences do not: 3 accumulation steps
    ("bert-2.6b", "A10", 2, ((1, 2),)),        # 41.6 GB of state: two tensor shards
    ("bert-6.7b", "A40", 2, None),             # 107 GB of state: no 2-GPU plan fits
    ("bert-6.7b", "A40", 4, ((1, 4),)),
    ("bert-6.7b", "A10", 8, ((1, 8),)),        # 8 tensor shards, the batch accumulated in micro-batches
    ("moe-27b", "A40", 8, None),               # 432 GB of state
])
def test_a_plan_fits_where_its_shards_fit_memory(perf, model, gpu, gpus, plan):
    """Crius Fig. 3: a plan that runs out of memory is infeasible; the fewest stages, then the least
    tensor degree, of those that fit."""
    got = perf.fitting_plan(spec(gpus, None, model=model), gpu, gpus)
    assert (None if got is None else tuple((st.data, st.tensor) for st in got)) == plan
    assert perf.runs_on(spec(gpus, None, model=model), gpu, gpus) is (plan is not None)
