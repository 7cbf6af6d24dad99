"""Data stalls: throughput as a function of CPU cores and memory per GPU (Synergy §2.1, §3.1)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from halyard.datamodel import Allocation, JobSpec, NodeAllocation, parse_cluster
from halyard.emulator import PerformanceModel

IMAGE_SPEECH = ("alexnet", "shufflenetv2", "m5", "resnet18", "mobilenetv2", "resnet50", "deepspeech")
LANGUAGE = ("gnmt", "lstm", "transformer-xl", "bert-large")
# REFERENCE-NUMBERS "Synergy CPU/memory sensitivity": best demand (CPUs, GB per GPU) -> speed-up.
BEST = {"alexnet": (12, 125, 2.94), "shufflenetv2": (12, 125, 2.89), "m5": (6, 187.5, 2.5),
        "resnet18": (9, 62.5, 2.4), "mobilenetv2": (6, 62.5, 1.55), "resnet50": (4, 62.5, 1.15),
        "deepspeech": (3, 62.5, 1.0)}


@pytest.fixture(scope="module")
def pm() -> PerformanceModel:
    return PerformanceModel()


def test_factor_is_one_at_the_gpu_proportional_share(pm):
    """Normalised like Synergy's matrices: 1.0 at 3 CPUs and 62.5 GB per GPU, on every GPU type."""
    for model in pm.models():
        for gpu in ("V100", "P100", "A100", "H200"):
            assert pm.throughput_factor(model, 3, 62.5, gpu) == 1.0, (model, gpu)


def test_language_models_are_flat(pm):
    """Synergy: language models are flat from 1 CPU and 20.8 GB."""
    for model in LANGUAGE:
        for cpus, mem in ((1, 20.83), (2, 62.5), (24, 250)):
            assert pm.throughput_factor(model, cpus, mem) == 1.0


def test_best_demand_gives_the_best_speedup(pm):
    for model, (cpus, mem, speedup) in BEST.items():
        assert pm.throughput_factor(model, cpus, mem) == pytest.approx(speedup), model
        # More than the best demand gains nothing more.
        assert pm.throughput_factor(model, 24, 250) == pytest.approx(speedup), model


def test_image_and_speech_models_starve_on_fewer_cpus(pm):
    """Synergy matrices: 2 CPUs per GPU run image models at 0.66-0.74x; 1 CPU far below."""
    for model in IMAGE_SPEECH:
        one, two = pm.throughput_factor(model, 1, 62.5), pm.throughput_factor(model, 2, 62.5)
        assert one < 0.5 and one < two < 1.0, model
    for model in ("alexnet", "resnet18", "mobilenetv2", "shufflenetv2", "resnet50"):
        assert 0.66 <= pm.throughput_factor(model, 2, 62.5) <= 0.8, model
    # The Amdahl curve follows Synergy's resnet18 matrix [code msr-fiddle/synergy simulator/models/res18_1.py]
    # (1.3x at 4 CPUs, 1.53x at 5, 1.75x at 6) within 3%.
    for cpus, synergy in ((4, 1.3), (5, 1.53), (6, 1.75)):
        assert pm.throughput_factor("resnet18", cpus, 62.5) == pytest.approx(synergy, rel=0.03)


def test_cpu_curve_passes_through_synergys_two_points(pm):
    """T_cpu(c) = a + b / c through (3 CPUs, T_prop = s* T_gpu) and (c*, T_gpu) on a V100."""
    for model, (cpus, _, speedup) in BEST.items():
        curve = pm.host_curve(model)
        t_gpu = pm.profile(model).compute_s["V100"]
        assert curve.cpu_s(3) == pytest.approx(speedup * t_gpu), model
        if speedup > 1:
            assert curve.cpu_s(cpus) == pytest.approx(t_gpu), model
    assert pm.host_curve("gnmt") is None


def test_cache_model_has_a_fixed_hit_rate_per_memory(pm):
    """Optimistic profiling's cache model (Synergy §3.1, MinIO): a fixed per-epoch hit rate
    h(m) = min(1, m / m*), misses read at the proportional storage share (T_miss = T_prop)."""
    assert pm.cache_hit_rate("alexnet", 62.5) == pytest.approx(0.5)
    assert pm.cache_hit_rate("alexnet", 125) == 1.0 and pm.cache_hit_rate("alexnet", 500) == 1.0
    assert pm.cache_hit_rate("m5", 62.5) == pytest.approx(1 / 3)
    assert pm.cache_hit_rate("gnmt", 1.0) == 1.0
    curve = pm.host_curve("alexnet")
    assert curve.fetch_s(62.5) == pytest.approx(0.5 * 2.94 * pm.profile("alexnet").compute_s["V100"])
    # With plenty of CPUs, memory caps the speed-up where Synergy's matrices do at 62.5 GB:
    # alexnet 2.0x [alexnet_1.py], m5 1.5x [m5_1.py].
    assert pm.throughput_factor("alexnet", 24, 62.5) == pytest.approx(2.0, rel=0.01)
    assert pm.throughput_factor("m5", 24, 62.5) == pytest.approx(1.5, rel=0.01)


def test_faster_gpus_stall_more(pm):
    """Host times do not shrink with the GPU: the same share of cores leaves an A100 idler."""
    for model in ("alexnet", "resnet18", "resnet50"):
        v100 = pm.stalled_compute_s(model, "V100", 3, 62.5) / pm.profile(model).compute_s["V100"]
        a100 = pm.stalled_compute_s(model, "A100", 3, 62.5) / pm.profile(model).compute_s["A100"]
        assert a100 > v100 >= 1.0, model


@settings(max_examples=60, deadline=None)
@given(model=st.sampled_from(IMAGE_SPEECH + LANGUAGE), cpus=st.floats(0.5, 30), more=st.floats(0, 10),
       mem=st.floats(1, 300), extra=st.floats(0, 200), gpu=st.sampled_from(("V100", "T4", "A100", "H100")))
def test_more_cpus_or_memory_never_slower(model, cpus, more, mem, extra, gpu):
    pm = PerformanceModel()
    base = pm.throughput_factor(model, cpus, mem, gpu)
    assert pm.throughput_factor(model, cpus + more, mem, gpu) >= base - 1e-12
    assert pm.throughput_factor(model, cpus, mem + extra, gpu) >= base - 1e-12


SYNERGY_SERVER = """
name = "synergy"
[[racks]]
uplink_gbit_s = 400
[[racks.nodes]]
name = "n0"
gpu_type = "V100"
gpus = 8
cpus = 24
memory_gb = 500
fabric = "nvlink"
fabric_gbyte_s = 150
nic_gbit_s = 200
"""


def test_iteration_time_applies_stalls_only_when_asked():
    """Off by default: the catalog's compute is stall-free GPU time, so applying stalls at the
    proportional share would make CPU-sensitive models slower than v0 (docs: Data stalls)."""
    cluster = parse_cluster(SYNERGY_SERVER)
    spec = JobSpec(job_id="j", submit_time=0.0, model="alexnet", num_gpus=1, iterations=1)
    plain, stalled = PerformanceModel(), PerformanceModel(data_stalls=True)
    proportional = Allocation((NodeAllocation("n0", (0,), 3, 62_500),))
    unspecified = Allocation((NodeAllocation("n0", (0,), 0, 0),))
    best = Allocation((NodeAllocation("n0", (0,), 12, 125_000),))
    t_gpu = plain.profile("alexnet").compute_s["V100"]
    for a in (proportional, unspecified, best):
        assert plain.iteration_time(spec, a, cluster).total_s == pytest.approx(t_gpu)
    assert stalled.iteration_time(spec, proportional, cluster).total_s == pytest.approx(2.94 * t_gpu)
    assert stalled.iteration_time(spec, unspecified, cluster).total_s == pytest.approx(2.94 * t_gpu)
    assert stalled.iteration_time(spec, best, cluster).total_s == pytest.approx(t_gpu)
    assert stalled.consolidated_iteration_time(spec, cluster) == pytest.approx(2.94 * t_gpu)
    lang = JobSpec(job_id="l", submit_time=0.0, model="gnmt", num_gpus=1, iterations=1)
    assert stalled.iteration_time(lang, proportional, cluster) == plain.iteration_time(lang, proportional, cluster)
    # Multi-GPU: the slowest node's share decides, and the all-reduce can hide in the stall.
    spec8 = JobSpec(job_id="k", submit_time=0.0, model="resnet18", num_gpus=8, iterations=1)
    eight = Allocation((NodeAllocation("n0", tuple(range(8)), 24, 500_000),))
    t = stalled.iteration_time(spec8, eight, cluster)
    assert t.compute_s == pytest.approx(2.4 * plain.profile("resnet18").compute_s["V100"])
    assert t.total_s == pytest.approx(t.compute_s)  # 47 MB over NVLink hides in the stall
