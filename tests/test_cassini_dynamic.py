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
