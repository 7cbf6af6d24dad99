"""The Cassini thesis' dynamic trace as benchmarks/cassini_dynamic.py builds it (§4.5.1 (ii), §4.5.3-4.5.6).

§4.5.1: "dynamic trace where a set of DNN training jobs are present in the cluster, and a new set of jobs
arrive"; §4.5.4: "all jobs in the trace use model parallelism"; §4.5.6: "Impact of Multiple GPUs per
Server" (its set-up is not in our text: the script's ``MULTI_GPUS_PER_SERVER`` is a named choice, and the
testbed's switches and links are kept). These pin the traces the page's figures come from.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from halyard.datamodel import load_cluster
from halyard.emulator import PerformanceModel

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def dyn() -> ModuleType:
    """benchmarks/cassini_dynamic.py as a module (the folder is not a package)."""
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("_cassini_dynamic", BENCH / "cassini_dynamic.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_a_busy_set_at_zero_then_a_set_arriving_together(dyn: ModuleType) -> None:
    """§4.5.1 (ii): jobs present, then a new set arrives; the busy set holds BUSY_FRACTION of the GPUs
    (the job that crosses it included), the arriving set fills what is left, never more than the cluster."""
    cluster, pm = load_cluster(dyn.CLUSTER), PerformanceModel()
    for seed in (1, 2, 3):
        jobs, arriving = dyn.dynamic_trace(seed, pm, cluster, "table-4.3-matched")
        busy = [j for j in jobs if j.job_id not in arriving]
        assert arriving and busy
        assert all(j.submit_time == 0.0 for j in busy)
        assert all(j.submit_time == dyn.ARRIVAL_S for j in jobs if j.job_id in arriving)
        held = sum(j.num_gpus for j in busy)
        assert held >= round(dyn.BUSY_FRACTION * cluster.total_gpus) > held - busy[-1].num_gpus
        assert sum(j.num_gpus for j in jobs) <= cluster.total_gpus


def test_model_parallel_variant_runs_only_model_parallel_jobs(dyn: ModuleType) -> None:
    """§4.5.4: "all jobs in the trace use model parallelism" -- here Table 4.2's GPT rows as pipelines of
    one stage per GPU (DLRM is not modelled)."""
    cluster, pm = load_cluster(dyn.CLUSTER), PerformanceModel()
    assert dyn.VARIANTS["model-parallel"].section == "§4.5.4"
    for seed in (1, 2):
        jobs, _ = dyn.dynamic_trace(seed, pm, cluster, dyn.VARIANTS["model-parallel"].mix)
        assert jobs
        for j in jobs:
            assert j.model in dyn.MODEL_PARALLEL
            assert j.parallelism is not None and j.parallelism.pipeline == j.num_gpus >= 2


def test_multi_gpu_testbed_keeps_the_fabric_and_adds_gpus_per_server(dyn: ModuleType) -> None:
    """§4.5.6's servers hold several GPUs; Fig. 4.10's 13 switches and 48 links stay as they are."""
    one = load_cluster(dyn.CLUSTER)
    two = dyn.multi_gpu_testbed(dyn.MULTI_GPUS_PER_SERVER)
    assert dyn.VARIANTS["multi-gpu"].gpus_per_server == dyn.MULTI_GPUS_PER_SERVER > 1
    assert [n.gpus for n in two.nodes] == [dyn.MULTI_GPUS_PER_SERVER] * len(one.nodes)
    assert [n.nic_gbyte_s for n in two.nodes] == [n.nic_gbyte_s for n in one.nodes]
    assert two.switches == one.switches and two.links == one.links
    assert len(one.racks) + len(one.switches) == 13
    assert len(one.nodes) + len(one.links) == 48
    jobs, arriving = dyn.dynamic_trace(1, PerformanceModel(), two, "table-4.3-matched")
    assert sum(j.num_gpus for j in jobs) <= two.total_gpus
    assert sum(j.num_gpus for j in jobs if j.job_id not in arriving) >= round(dyn.BUSY_FRACTION * two.total_gpus)


def test_thesis_traffic_is_fig_4_1c_25_gbps_on_every_gpt_job(dyn: ModuleType) -> None:
    """§4.1.1, Fig. 4.1(c): a tensor-parallel GPT-3 across two servers: "both forward and backpropagation
    phases introduce roughly 25 Gbps traffic followed by a short period of near-zero network demand during
    data loading". ``--mix model-parallel-thesis-traffic`` puts that level (25 Gbit/s = 3.125 GB/s) on the
    Up phases of every GPT job; ``model-parallel-line-rate-traffic`` the testbed NIC's 50 Gbit/s (§4.5.1:
    "one 50 Gbps Mellanox ConnectX5 NIC"), the bound."""
    rc = importlib.import_module("reproduce_cassini")  # where the constants live (the fixture put it on the path)
    assert rc.THESIS_GPT_UP_GBIT_S == 25.0
    assert dyn.MEASURED_UP_DEMAND["model-parallel-thesis-traffic"] == {m: 3.125 for m in dyn.MODEL_PARALLEL}
    assert set(dyn.MODEL_PARALLEL) == {"gpt1", "gpt2-medium", "gpt3-xl"}  # Table 4.2's GPT rows
    cluster = load_cluster(dyn.CLUSTER)
    line = cluster.link_gbyte_s(cluster.route(0, 1)[0])
    assert rc.TESTBED_NIC_GBIT_S == 50.0 and line == 50.0 / 8
    assert dyn.MEASURED_UP_DEMAND["model-parallel-line-rate-traffic"] == {m: line for m in dyn.MODEL_PARALLEL}
    assert "model-parallel" not in dyn.MEASURED_UP_DEMAND  # the plain mix keeps the performance model's traffic
    thesis = dyn.uplink_demands("model-parallel-thesis-traffic")
    plain = dyn.uplink_demands("model-parallel")
    for model, d in thesis.items():
        assert d["peak_gbyte_s"] == 3.125 and d["capacity_gbyte_s"] == line
        # Fig. 4.1(c)'s shape: Up through forward and backward, then a short Down; the timing is the model's
        assert 0.5 < d["up_share"] < 1.0
        assert d["up_share"] == plain[model]["up_share"] and d["iteration_s"] == plain[model]["iteration_s"]
        assert plain[model]["peak_gbyte_s"] < d["peak_gbyte_s"]


def test_traffic_mixes_run_the_model_parallel_mix_jobs(dyn: ModuleType) -> None:
    """The traffic options change the traffic only: per seed the same jobs as ``--mix model-parallel``, so
    their rows are paired with its row."""
    cluster, pm = load_cluster(dyn.CLUSTER), PerformanceModel()
    for seed in (1, 2):
        base = dyn.dynamic_trace(seed, pm, cluster, "model-parallel")
        for mix in ("model-parallel-thesis-traffic", "model-parallel-line-rate-traffic"):
            assert dyn.dynamic_trace(seed, pm, cluster, mix) == base


def test_census_counts_each_seeds_jobs_apart(dyn: ModuleType) -> None:
    """The census' "jobs ever contended" over several traces counts a job of each trace, though every trace
    names its jobs j000, j001, ...: the same trace twice has twice the contended jobs. Seed 2 at the line
    rate has GPT jobs on a contended link under Themis."""
    census = importlib.import_module("cassini_census")
    cluster, pm = load_cluster(dyn.CLUSTER), PerformanceModel()
    demand = dyn.MEASURED_UP_DEMAND["model-parallel-line-rate-traffic"]
    jobs, _ = dyn.dynamic_trace(2, pm, cluster, "model-parallel-line-rate-traffic")
    once = census.figures(*census.run([jobs], cluster, "themis", demand))
    twice = census.figures(*census.run([jobs, jobs], cluster, "themis", demand))
    assert once["jobs_contended"] > 0
    assert twice["jobs_contended"] == 2 * once["jobs_contended"] and twice["jobs"] == 2 * once["jobs"]
