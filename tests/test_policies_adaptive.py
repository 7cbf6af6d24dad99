"""Large models under the baselines (Crius §8.1): "we enable Alpa's adaptive parallelism in the
baselines' job training process but only allow them to schedule jobs with data profiled from data
parallelism". A model that fits no single GPU is admitted where some plan fits (Fig. 3), runs the
fastest plan that fits the GPUs a baseline gives it, and a job that fits keeps data parallelism."""

from __future__ import annotations

import pytest

from halyard.datamodel import JobSpec, ValidationError, load_cluster
from halyard.emulator import PerformanceModel
from halyard.policies import make_policy
from halyard.scheduling import SchedulingCore, Simulator

PM = PerformanceModel()
CRIUS_64 = load_cluster("crius-64")  # 16 x 2 A40 + 16 x 2 A10 (§8.1)
CRIUS_1280 = load_cluster("crius-1280")  # A100, A40, A10, V100 (Table 1)


def job(job_id: str, model: str, n: int, submit: float = 0.0, **kw) -> JobSpec:
    return JobSpec(job_id, submit, model, n, iterations=50, **kw)


def test_a_model_that_fits_no_gpu_is_admitted_where_a_plan_fits_and_refused_by_name_otherwise():
    core = SchedulingCore(CRIUS_64, make_policy("fcfs"), PM)
    assert not any(PM.fits_memory(job("a", "bert-6.7b", 4), t) for t in ("A40", "A10"))
    core.submit(job("a", "bert-6.7b", 4), 0.0)  # 4 A40s hold it with 4 tensor shards
    with pytest.raises(ValidationError, match=r"no tensor/pipeline plan of up to 8 GPUs of one type fits"):
        core.submit(job("b", "moe-27b", 8), 0.0)  # 432 GB of state: no 8 GPUs of one type hold it


@pytest.mark.parametrize("policy", ["fcfs", "gandiva", "gavel", "elasticflow-ls"])
def test_baselines_run_a_large_model_with_the_fastest_plan_that_fits(policy):
    """The baseline picks the GPUs (4, or what ElasticFlow sizes); the job runs a tensor/pipeline plan
    on them, every shard fits its GPU, it is the fastest uniform plan that does, and the job completes.
    A model that fits one GPU next to it keeps data parallelism (no stages) under the staged baselines."""
    from halyard.parallelism import uniform_plans
    from halyard.policies.plan import Start

    core = SchedulingCore(CRIUS_64, make_policy(policy), PM)
    core.submit(job("big", "bert-6.7b", 4, min_gpus=4, max_gpus=8), 0.0)
    core.submit(job("small", "resnet50", 2), 0.0)
    starts = {a.job_id: a.allocation for a in core.schedule(0.0) if isinstance(a, Start)}
    big = starts["big"]
    assert big.stages and (len(big.stages) > 1 or big.stages[0].tensor > 1)  # not data parallel
    assert PM.fits_plan(core.records["big"].spec, big, CRIUS_64)
    spec = core.records["big"].spec
    times = {}
    for plan in uniform_plans(big.num_gpus, PM.layers("bert-6.7b")):
        trial = type(big)(big.nodes, stages=plan)
        if PM.fits_plan(spec, trial, CRIUS_64):
            times[plan] = PM.job_timing(spec, trial, CRIUS_64).iteration.total_s
    assert times[big.stages] == min(times.values())
    if policy in ("fcfs", "gandiva"):
        assert starts["small"].stages == ()
    sim = Simulator(CRIUS_64, make_policy(policy), PM)
    sim.run([job("big", "bert-6.7b", 4, min_gpus=4, max_gpus=8), job("small", "resnet50", 2)])
    assert {r.state.value for r in sim.core.records.values()} == {"COMPLETED"}


@pytest.mark.parametrize("model", ["bert-0.76b", "bert-1.3b", "bert-2.6b", "moe-1.3b", "wresnet-2b", "resnet50",
                                   "mobilenetv2"])
@pytest.mark.parametrize("gpu_type", ["V100", "A10", "A40", "A100"])
def test_one_memory_rule_for_a_data_parallel_worker(model, gpu_type):
    """fits_memory (micro-batch fallback) and fits_plan of one data-parallel stage agree, and the first
    plan fitting_plan picks is data parallel exactly when they say it fits (review finding: bert-0.76b
    on 4 P100s ran data parallel under FCFS and data 2 x tensor 2 under ElasticFlow)."""
    from halyard.datamodel import Allocation, NodeAllocation, StagePlan

    node = next(n for n in CRIUS_1280.nodes if n.gpu_type == gpu_type)
    spec = job("j", model, node.gpus)
    dp = Allocation((NodeAllocation(node.name, tuple(range(node.gpus)), 1, 1),))
    as_dp = PM.fits_memory(spec, gpu_type)
    assert PM.fits_plan(spec, dp, CRIUS_1280) == as_dp
    cell = Allocation(dp.nodes, stages=(StagePlan(node.gpus, data=node.gpus),))
    assert PM.fits_plan(spec, cell, CRIUS_1280) == as_dp
    first = PM.fitting_plan(spec, gpu_type, node.gpus)
    assert (first is not None and len(first) == 1 and first[0].tensor == 1) == as_dp
