"""Elastic and pipeline costs: checkpoints, EasyScale time slicing and Eq. 1, Crius' pipeline latency."""

from __future__ import annotations

import pytest

from halyard.datamodel import JobSpec
from halyard.emulator import PerformanceModel
from halyard.emulator.elastic import (
    DETERMINISM_D1_OVERHEAD,
    DETERMINISM_D2_OVERHEAD,
    determinism_factor,
    est_step_s,
    pipeline_latency_s,
    stage_latency_s,
)
from halyard.parallelism import best_est_mapping, easyscale_plan_throughput, needs_homogeneous, spread_ests


@pytest.fixture(scope="module")
def pm() -> PerformanceModel:
    return PerformanceModel()


def spec(model: str = "resnet50", gpus: int = 4) -> JobSpec:
    return JobSpec(job_id="j", submit_time=0.0, model=model, num_gpus=gpus, iterations=1)


# ---------------------------------------------------------------- checkpoints
def test_checkpoint_restore_and_restart_grow_with_model_size(pm):
    c = pm.catalog.constants
    for model in ("m5", "resnet50", "bert-large"):
        s = spec(model)
        state = pm.profile(model).gradient_bytes * c.checkpoint_state_factor
        assert pm.checkpoint_bytes(model) == pytest.approx(state)
        assert pm.checkpoint_s(s) == pytest.approx(state / (c.checkpoint_gbyte_s * 1e9))
        assert pm.restore_s(s) == pytest.approx(state / (c.checkpoint_gbyte_s * 1e9))
        assert pm.restart_cost_s(s) == pytest.approx(c.restart_fixed_s + pm.restore_s(s))
        assert pm.reconfigure_cost_s(s) == pytest.approx(pm.checkpoint_s(s) + pm.restart_cost_s(s))
    sizes = [pm.reconfigure_cost_s(spec(m)) for m in ("m5", "resnet50", "vgg11", "bert-large")]
    assert sizes == sorted(sizes)
    assert pm.checkpoint_s(spec("bert-large")) == pytest.approx(1.34e9 * 3 / 0.5e9)  # 8 s for 4 GB


# ---------------------------------------------------------------- EasyScale
def test_easyscale_eq_1_balanced_plan_wastes_nothing():
    """EasyScale Eq. 1a-1d: 2 V100 (4 mini-batch/s) with 2 ESTs each and 1 T4 (2/s) with 1 EST, maxP 5."""
    plan = easyscale_plan_throughput({"V100": 2, "T4": 1}, {"V100": 4.0, "T4": 2.0}, {"V100": 2, "T4": 1}, 5)
    assert plan.ests == 5 and plan.overload == pytest.approx(0.5)
    assert plan.waste == pytest.approx(0.0) and plan.throughput == pytest.approx(10.0)


def test_easyscale_eq_1_imbalance_and_overprovisioning_waste():
    # Overloaded T4: f = max(1/4, 3/2) = 1.5; waste = (4 - 1/1.5) + (2 - 3/1.5) = 3.33 (Eq. 1b-1c).
    plan = easyscale_plan_throughput({"V100": 2, "T4": 1}, {"V100": 4.0, "T4": 2.0}, {"V100": 1, "T4": 3}, 5)
    assert plan.overload == pytest.approx(1.5)
    assert plan.waste == pytest.approx(4 - 1 / 1.5)
    assert plan.throughput == pytest.approx(10 - (4 - 1 / 1.5))
    # Two ESTs more than maxP: (nEST - maxP) / f_overload joins the waste (Eq. 1c).
    over = easyscale_plan_throughput({"V100": 2, "T4": 1}, {"V100": 4.0, "T4": 2.0}, {"V100": 3, "T4": 1}, 5)
    assert over.ests == 7 and over.overload == pytest.approx(0.75)
    assert over.waste == pytest.approx((4 - 3 / 0.75) + (2 - 1 / 0.75) + 2 / 0.75)
    with pytest.raises(ValueError, match="maxP"):
        easyscale_plan_throughput({"V100": 1}, {"V100": 4.0}, {"V100": 2}, 4)  # Eq. 1a


def test_time_slicing_on_fewer_gpus(pm):
    """EasyScale §3.2: ESTs on one GPU run one after another; each finished EST's gradient copy
    hides behind the next EST's compute (Fig. 13), so 4 ESTs on 1 GPU take 4 local steps."""
    s = spec("resnet50")
    t = pm.ideal_iteration_time(s, "V100")
    assert pm.est_step_s(s, [("V100", 4)]) == pytest.approx(4 * t)
    assert pm.est_step_s(s, [("V100", 2), ("V100", 2)]) == pytest.approx(2 * t)
    # Heterogeneous: the slowest GPU's ESTs set the pace.
    assert pm.est_step_s(s, [("V100", 2), ("T4", 2)]) == pytest.approx(2 * pm.ideal_iteration_time(s, "T4"))
    # Fewer GPUs never make a step shorter.
    steps = [pm.est_step_s(s, [("V100", 8 // g)] * g) for g in (1, 2, 4, 8)]
    assert steps == sorted(steps, reverse=True)
    # A copy slower than the next EST's compute shows: 3 ESTs, compute 1, copy 1.5 -> 3 + 2 x 0.5.
    assert est_step_s([1.0], [3], [1.5]) == pytest.approx(4.0)
    assert est_step_s([1.0, 2.0], [3, 1], [0.5, 0.5], allreduce_exposed_s=0.25) == pytest.approx(3.25)
    assert pm.est_capability(s, "V100") == pytest.approx(1 / t)


# ---------------------------------------------------------------- Crius
def test_crius_pipeline_latency_formula():
    """Crius §5 (Fig. 10): first micro-batch through all stages (T1 + T2 + T3 + T4) plus (B - 1) x
    (T_slowest - T_comm of that stage)."""
    compute, comm = [1.0, 2.0, 3.0, 1.0], [0.0, 0.5, 0.5, 0.5]
    # T = 1, 2.5, 3.5, 1.5 -> 8.5; slowest T3 = 3.5 with 0.5 communication: + 3 x 3.0.
    assert pipeline_latency_s(compute, comm, 4) == pytest.approx(8.5 + 3 * 3.0)
    assert pipeline_latency_s(compute, comm, 1) == pytest.approx(8.5)
    # Equal stages without communication: (S + B - 1) x t, the classic pipeline bubble.
    assert pipeline_latency_s([2.0] * 4, [0.0] * 4, 8) == pytest.approx((4 + 8 - 1) * 2.0)
    with pytest.raises(ValueError):
        pipeline_latency_s([1.0], [0.0, 0.0], 2)


def test_stage_plan_dp_and_tp():
    """Per-stage DP/TP choice: DP splits the micro-batch, TP splits the layers and adds its all-reduces."""
    assert stage_latency_s(8.0, 1, 1) == (8.0, 0.0)
    assert stage_latency_s(8.0, 4, 1, tensor_comm_s=1.0, recv_s=0.2) == (2.0, 0.2)
    assert stage_latency_s(8.0, 1, 4, tensor_comm_s=1.0, recv_s=0.2) == (3.0, 0.2)
    # A Cell of two stages, DP on the first and TP on the second, 6 micro-batches.
    s1, s2 = stage_latency_s(8.0, 2, 1), stage_latency_s(8.0, 1, 2, tensor_comm_s=0.5, recv_s=0.3)
    total = pipeline_latency_s([s1[0], s2[0]], [s1[1], s2[1]], 6)
    assert total == pytest.approx((4.0 + 4.8) + 5 * 4.5)


# ---------------------------------------------------------------- EasyScale: the Eq. 1c erratum, plans, determinism
def test_eq_1c_as_printed_overestimates_and_the_corrected_form_is_maxp_over_f():
    """The issue's erratum: 2 V100 (C=4) and 2 T4 (C=2), A=(3, 1), maxP=8. Printed Eq. 1c counts the
    idle T4 capability once per type: 12 - 0.667 = 11.33/s. Each of the two T4s idles it, so the real
    rate is maxP / f_overload = 8 / 0.75 = 10.67/s (one global step every 0.75 s)."""
    gpus, cap, a = {"V100": 2, "T4": 2}, {"V100": 4.0, "T4": 2.0}, {"V100": 3, "T4": 1}
    printed = easyscale_plan_throughput(gpus, cap, a, 8)
    corrected = easyscale_plan_throughput(gpus, cap, a, 8, per_gpu=True)
    assert printed.throughput == pytest.approx(11.33, abs=0.005)
    assert corrected.throughput == pytest.approx(10.67, abs=0.005)
    assert corrected.throughput == pytest.approx(8 / corrected.overload)
    assert corrected.steps_per_s == pytest.approx(4 / 3)
    # The two forms agree when every used type has one GPU (the case the printed form got right).
    one_each = {"V100": 1, "T4": 1}
    assert easyscale_plan_throughput(one_each, cap, {"V100": 2, "T4": 1}, 3).throughput == pytest.approx(
        easyscale_plan_throughput(one_each, cap, {"V100": 2, "T4": 1}, 3, per_gpu=True).throughput)


def test_best_mapping_balances_ests_by_capability():
    """The companion module (§3.4) picks A_i minimising f_overload under Eq. 1a."""
    cap = {"V100": 4.0, "T4": 2.0}
    plan = best_est_mapping({"V100": 2, "T4": 2}, cap, 8)
    assert plan.ests_per_gpu == {"V100": 3, "T4": 1} and plan.overload == pytest.approx(0.75)
    assert plan.throughput == pytest.approx(8 / 0.75)
    # Exactly maxP ESTs are handed out; the surplus (Eq. 1a's nEST - maxP) comes off the slowest GPUs.
    plan = best_est_mapping({"V100": 1, "T4": 2}, cap, 5)
    assert plan.ests_per_gpu == {"V100": 3, "T4": 1} and plan.ests == 5
    assert spread_ests(["V100", "T4", "T4"], plan.ests_per_gpu, cap, 5) == [3, 1, 1]
    assert spread_ests(["V100", "V100"], {"V100": 3}, {"V100": 4.0}, 5) == [3, 2]
    # A homogeneous set: ceil(maxP / N) ESTs per GPU; 6 GPUs for 8 ESTs waste a third of their capability.
    homo = best_est_mapping({"V100": 6}, {"V100": 4.0}, 8)
    assert homo.ests_per_gpu == {"V100": 2} and homo.waste_fraction({"V100": 6}, {"V100": 4.0}) == pytest.approx(1 / 3)
    # Every GPU must run one EST: a T4 joins even when it is the bottleneck, never with zero ESTs.
    slow = best_est_mapping({"V100": 1, "T4": 1}, {"V100": 10.0, "T4": 1.0}, 2)
    assert slow.overload == pytest.approx(1.0) and slow.throughput == pytest.approx(2.0)
    assert spread_ests(["V100", "T4"], slow.ests_per_gpu, {"V100": 10.0, "T4": 1.0}, 2) == [1, 1]
    with pytest.raises(ValueError, match="maxP"):
        best_est_mapping({"V100": 3}, cap, 2)


def test_determinism_overhead_is_small_for_d1_and_large_for_d2_on_convolutions(pm):
    """§5.1.3: D1 (and D1+D2 for transformer-like models) under 1%; D1+D2 on heterogeneous GPUs
    236% on average for convolution models, which EasyScale therefore keeps on one GPU type."""
    assert determinism_factor("resnet50", heterogeneous=False) == pytest.approx(1 + DETERMINISM_D1_OVERHEAD)
    assert DETERMINISM_D1_OVERHEAD <= 0.01 < 2 < DETERMINISM_D2_OVERHEAD
    assert determinism_factor("bert-large", heterogeneous=True) == pytest.approx(1 + DETERMINISM_D1_OVERHEAD)
    assert determinism_factor("resnet50", heterogeneous=True) == pytest.approx(1 + DETERMINISM_D2_OVERHEAD)
    assert needs_homogeneous("vgg19") and not needs_homogeneous("bert-large")


def test_mixed_gpus_step_is_gated_by_the_slowest_and_pays_d2(pm):
    """A global step on mixed GPUs (the same iteration_time the simulator and emulated agents use):
    the slowest GPU type gates the step; a D2-costly model pays the D2 factor there."""
    from halyard.datamodel import Allocation, NodeAllocation, load_cluster

    cluster = load_cluster("easyscale-64")
    v100 = next(n.name for n in cluster.nodes if n.gpu_type == "V100")
    t4 = next(n.name for n in cluster.nodes if n.gpu_type == "T4")
    bert = JobSpec(job_id="b", submit_time=0.0, model="bert-large", num_gpus=2, iterations=1, min_gpus=1,
                   max_gpus=2, logical_workers=2)
    mixed = Allocation((NodeAllocation(v100, (0,), 1, 1, (1,)), NodeAllocation(t4, (0,), 1, 1, (1,))))
    only_v = Allocation((NodeAllocation(v100, (0, 1), 1, 1, (1, 1)),))
    t_mixed = pm.iteration_time(bert, mixed, cluster)
    assert t_mixed.compute_s == pytest.approx(pm.ideal_iteration_time(bert, "T4") * (1 + DETERMINISM_D1_OVERHEAD))
    assert t_mixed.total_s > pm.iteration_time(bert, only_v, cluster).total_s
    resnet = JobSpec(job_id="r", submit_time=0.0, model="resnet50", num_gpus=2, iterations=1, min_gpus=1,
                     max_gpus=2, logical_workers=2)
    assert pm.iteration_time(resnet, mixed, cluster).compute_s == pytest.approx(
        pm.ideal_iteration_time(resnet, "T4") * (1 + DETERMINISM_D2_OVERHEAD))
