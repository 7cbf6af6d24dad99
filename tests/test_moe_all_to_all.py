"""GShard MoE's expert-parallel all-to-all in the one performance model (Crius Table 2's MoE models;
GShard, Lepikhin et al., ICLR'21, §2.1-2.2; the pairwise-exchange all-to-all of Thakur et al., IJHPCA 2005).

Each MoE layer (every other layer) dispatches its tokens to the experts' devices and combines the results
back -- two all-to-alls forward, two backward -- over the devices that split the batch; each GPU's
buffer is 2 token slots (top-2, capacity 2S/E) x hidden x 2 B per token. The figures below are worked by
hand from those rules and crius-64's NICs (100 Gbit/s = 12.5 GB/s, PCIe 32 GB/s, rack latency 3 us)."""

from __future__ import annotations

import pytest
from factories import two_type_toml

from halyard.datamodel import Allocation, JobSpec, NodeAllocation, StagePlan, StageProfile, parse_cluster
from halyard.emulator import PerformanceModel
from halyard.emulator.collectives import all_to_all_s
from halyard.emulator.parallel import (
    MOE_ALL_TO_ALLS_PER_LAYER,
    MOE_SLOTS_PER_TOKEN,
    data_parallel_expert_s,
    link_gbytes,
)
from halyard.wire import stage_profile_from_pb, stage_profile_to_pb

TOML = two_type_toml(2, 4)  # r0-a40-0, r0-a40-1 (4 x A40 each, 12.5 GB/s NIC), then two A10 nodes
LAYER_OUT = 1024 * 768 * 2  # moe-1.3b: one layer's output per sequence, s x h x 2 B
GPU_BYTES = 2 * LAYER_OUT * 32  # 32 sequences per GPU in 2 slots per token: 100,663,296 B
# 8 GPUs, 4 per node: the NIC part 4 x 4/8 x S / 12.5 GB/s dominates the PCIe part 3/8 x S / 32 GB/s;
# 7 steps of 3 us; 4 all-to-alls x 8 MoE layers.
A2A_8 = 4 * 4 / 8 * GPU_BYTES / 12.5e9 + 7 * 3e-6
EXPECTED_8 = 4 * 8 * A2A_8
# Gradients a data-parallel group of up to 16 (its experts) all-reduces: the dense part only, 1 - 0.8976 of
# moe-1.3b's 5.2e9 B (models.toml expert_fraction: 8 MoE layers x 16 experts x 16 h^2 of the shapes' weights).
DENSE_GRADS_1_3B = 5.2e9 * (1 - 0.8976)


def _alloc(nodes: int, per_node: int, stages: tuple[StagePlan, ...] = ()) -> Allocation:
    return Allocation(tuple(NodeAllocation(f"r0-a40-{i}", tuple(range(per_node)), 0, 0) for i in range(nodes)),
                      stages=stages)


def test_all_to_all_is_the_pairwise_exchange_formula():
    """(n-1)/n of each rank's bytes leave it in n-1 steps; a node's k ranks share its NIC for the n-k others."""
    assert all_to_all_s(8e9, 4, 2, 32.0, 12.5, 3e-6) == pytest.approx(2 * 2 / 4 * 8e9 / 12.5e9 + 3 * 3e-6)
    assert all_to_all_s(8e9, 4, 4, 32.0, 12.5, 3e-7) == pytest.approx(3 / 4 * 8e9 / 32e9 + 3 * 3e-7)
    assert all_to_all_s(8e9, 1, 1, 32.0, 12.5, 3e-6) == 0.0
    assert (MOE_SLOTS_PER_TOKEN, MOE_ALL_TO_ALLS_PER_LAYER) == (2, 4)


def test_a_moe_cells_data_parallel_stage_pays_its_all_to_alls_on_the_critical_path():
    """A one-stage, 8-way data-parallel Cell of moe-1.3b over two nodes: 8 MoE layers x 4 all-to-alls of
    GPU_BYTES each, NIC-bound; the stage's micro-batch holds the GPUs for compute + all-to-alls."""
    pm, cluster = PerformanceModel(), parse_cluster(TOML)
    spec = JobSpec("m", 0.0, "moe-1.3b", 8, iterations=10)
    assert pm.profile("moe-1.3b").moe_layers == 8
    jt = pm.job_timing(spec, _alloc(2, 4, (StagePlan(8, data=8, tensor=1),)), cluster)
    (stage,) = jt.stages
    assert stage.expert_comm_s == pytest.approx(EXPECTED_8, rel=1e-9)
    assert stage.critical_s == stage.compute_s + stage.tensor_comm_s + stage.expert_comm_s
    # The all-to-alls' bytes load each NIC: 4 x 4/8 x GPU_BYTES per all-to-all, 32 of them.
    nic = next(load for load in jt.links if load.name == "r0-a40-0")
    grads = 2 * 7 / 8 * DENSE_GRADS_1_3B / 1e9  # the ring all-reduce's edge bytes
    assert nic.gbytes == pytest.approx(grads + 32 * 4 * 4 / 8 * GPU_BYTES / 1e9, rel=1e-9)
    # Tensor parallelism alone has no expert-parallel group; a dense model has no MoE layers.
    tp = pm.job_timing(spec, _alloc(2, 4, (StagePlan(8, data=1, tensor=8),)), cluster)
    assert tp.stages[0].expert_comm_s == 0.0
    dense = pm.job_timing(JobSpec("b", 0.0, "bert-1.3b", 8, iterations=10),
                          _alloc(2, 4, (StagePlan(8, data=8, tensor=1),)), cluster)
    assert dense.stages[0].expert_comm_s == 0.0


def test_a_two_stage_cell_splits_the_moe_layers_and_the_micro_batch():
    """Two stages of 4 GPUs (one node each): each stage holds 4 of the 8 MoE layers, and each of the
    B = 8 micro-batches carries 1/8 of the global batch, so a GPU's buffer is GPU_BYTES / 8 and the
    all-to-all stays inside the node (PCIe)."""
    pm, cluster = PerformanceModel(), parse_cluster(TOML)
    spec = JobSpec("m", 0.0, "moe-1.3b", 8, iterations=10)
    plan = (StagePlan(4, data=4, tensor=1), StagePlan(4, data=4, tensor=1))
    jt = pm.job_timing(spec, _alloc(2, 4, plan), cluster)
    one = 3 / 4 * (GPU_BYTES / 8 * 8 / 4) / 32e9 + 3 * 3e-7  # 8 x 32 samples / 8 micro-batches / 4 GPUs
    for stage in jt.stages:
        assert stage.expert_comm_s == pytest.approx(4 * 4 * one, rel=1e-9)


def test_a_data_parallel_moe_job_pays_the_same_all_to_alls():
    """The baselines' data-parallel path (PerformanceModel.iteration_time) costs the same all-to-alls,
    exposed, and puts their bytes on the NIC profile the fabric charges."""
    pm, cluster = PerformanceModel(), parse_cluster(TOML)
    spec = JobSpec("m", 0.0, "moe-1.3b", 8, iterations=10)
    assert data_parallel_expert_s(pm, "moe-1.3b", 0, 8, 4, 32.0, 12.5, 3e-6) == pytest.approx(EXPECTED_8, rel=1e-9)
    alloc = _alloc(2, 4)
    timing = pm.iteration_time(spec, alloc, cluster)
    dense = pm.iteration_time(JobSpec("b", 0.0, "moe-1.3b", 8, iterations=10, batch_size=32), alloc, cluster)
    assert timing == dense  # the reference batch, said or not
    assert timing.exposed_s >= EXPECTED_8 and timing.total_s == pytest.approx(timing.compute_s + timing.exposed_s)
    jt = pm.job_timing(spec, alloc, cluster)
    expected_gb = link_gbytes(DENSE_GRADS_1_3B, 2) + 32 * 4 * 4 / 8 * GPU_BYTES / 1e9
    assert all(load.gbytes == pytest.approx(expected_gb, rel=1e-9) for load in jt.links if load.kind == "nic")
    one_node = pm.iteration_time(JobSpec("m", 0.0, "moe-1.3b", 4, iterations=10), _alloc(1, 4), cluster)
    intra = 32 * (3 / 4 * GPU_BYTES / 32e9 + 3 * 3e-7)
    assert one_node.exposed_s >= intra
    assert pm.iteration_time(JobSpec("m", 0.0, "moe-1.3b", 1, iterations=10), _alloc(1, 1), cluster).exposed_s == 0.0


def test_a_stage_profile_carries_the_all_to_alls_over_the_wire():
    """The Profile answer's StageProfile is the model's StageTiming plus memory (one conversion), and the
    expert_comm_s field survives the protobuf round trip, so agents and the simulator assemble the same."""
    pm, cluster = PerformanceModel(), parse_cluster(TOML)
    spec = JobSpec("m", 0.0, "moe-1.3b", 8, iterations=10)
    alloc = _alloc(2, 4, (StagePlan(8, data=8, tensor=1),))
    (profile,) = pm.profile_stages(spec, alloc, cluster)
    (timing,) = pm.job_timing(spec, alloc, cluster).stages
    assert isinstance(profile, StageProfile) and profile.expert_comm_s == timing.expert_comm_s > 0.0
    assert stage_profile_from_pb(stage_profile_to_pb(profile)) == profile
    assert pm.assembled_iteration_s(spec, [profile]) == pm.job_timing(spec, alloc, cluster).iteration.total_s


async def test_emulated_agents_answer_moe_profilings_with_the_all_to_alls():
    """Over real gRPC, an emulated agent's ProfileResult for an MoE Cell carries the model's
    expert_comm_s (the one performance model on both sides): the data-parallel-only profilings of
    Cells of 2+ GPUs have all-to-alls, the tensor-parallel-only ones none."""
    from halyard.policies.crius_profiles import ModelProfiles
    from halyard.testing.cluster import TestCluster

    spec = JobSpec("m", 0.0, "moe-0.69b", 2, iterations=10, min_gpus=1, max_gpus=4)
    async with TestCluster(policy="crius", cluster_toml=TOML) as tc:
        cp = tc.control_plane
        requests = cp.core.policy.profile_requests(spec, cp.core.facts)
        await cp.profiles.fetch(requests)
        assert cp.profiles.exchanged == len(requests) and not cp.profiles.errors
        model = ModelProfiles(cp.perf, cp.cluster)
        answers = {r.key: cp.profiles.cached(r) for r in requests}
        assert all(answers[r.key] == model.stage_profiles(r) for r in requests)
        stages = [s for a in answers.values() for s in a]
        assert any(s.expert_comm_s > 0.0 for s in stages if s.data > 1)
        assert all(s.expert_comm_s == 0.0 for s in stages if s.data == 1)


def test_the_experts_are_sharded_over_the_data_parallel_group():
    """GShard §2.2: the devices that split the batch hold the experts between them, so a GPU of a
    data-parallel group of d keeps 1/min(d, experts) of them and all-reduces only the replicated
    parameters (an expert too, once d outnumbers the experts). moe-2.4b: 2.4e9 parameters, 16 experts
    holding 0.9017 of them."""
    pm = PerformanceModel()
    p = pm.profile("moe-2.4b")
    dense, expert = 2.4e9 * (1 - 0.9017), 2.4e9 * 0.9017
    assert p.held_parameters(1) == pytest.approx(2.4e9)
    assert p.held_parameters(4) == pytest.approx(dense + expert / 4)
    assert p.held_parameters(64) == pytest.approx(dense + expert / 16)
    assert p.reduced_gradient_bytes(16) == pytest.approx(4 * dense)
    assert p.reduced_gradient_bytes(32) == pytest.approx(4 * (dense + expert / 16))
    assert pm.profile("bert-2.6b").held_parameters(8) == pm.profile("bert-2.6b").parameters
    # Memory: 16 B of state per held parameter. One V100 (32 GB) cannot hold moe-2.4b's 38 GB of state;
    # two hold 16 x (dense + expert / 2) = 21.1 GB each, and the job fits.
    one, two = JobSpec("m", 0.0, "moe-2.4b", 1, iterations=10), JobSpec("m", 0.0, "moe-2.4b", 2, iterations=10)
    assert pm.memory_footprint(two, "V100").state_bytes == pytest.approx(16 * (dense + expert / 2))
    assert not pm.fits_memory(one, "V100") and pm.fits_memory(two, "V100")
    assert not pm.fits_memory(two, "V100", gpus=1)  # the same job shrunk to one GPU
    # A Cell's data-parallel stage holds what the data-parallel worker does (one memory rule).
    (stage,) = pm.plan_memory(JobSpec("m", 0.0, "moe-2.4b", 4, iterations=10),
                              Allocation((NodeAllocation("r0-a40-0", (0, 1, 2, 3), 0, 0),),
                                         stages=(StagePlan(4, data=4, tensor=1),)), parse_cluster(TOML))
    assert stage.state_bytes == pytest.approx(16 * (dense + expert / 4))
