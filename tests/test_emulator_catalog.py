"""Throughput matrix over GPU types and memory footprints (docs/performance-model.md)."""

from __future__ import annotations

import math

import pytest

from halyard.datamodel import JobSpec, Parallelism
from halyard.emulator import PerformanceModel, UnsupportedGPUError
from halyard.emulator.catalog import GIB

MATRIX_GPUS = ("V100", "P100", "T4", "A10", "A40", "A100", "H100", "H200")


@pytest.fixture(scope="module")
def pm() -> PerformanceModel:
    return PerformanceModel()


def spec(model: str, batch: int = 0, parallelism: Parallelism | None = None, gpus: int = 1) -> JobSpec:
    return JobSpec(job_id="j", submit_time=0.0, model=model, num_gpus=gpus, iterations=1,
                   batch_size=batch, parallelism=parallelism)


def test_every_model_has_a_time_on_every_gpu_type(pm):
    assert set(MATRIX_GPUS) <= set(pm.gpu_types())
    matrix = pm.throughput_matrix()
    for name in pm.models():
        p = pm.profile(name)
        for gpu in MATRIX_GPUS:
            assert matrix[name][gpu] > 0 and pm.supports_gpu(name, gpu), (name, gpu)
            assert matrix[name][gpu] == pm.ideal_iteration_time(spec(name), gpu)
        # Everything the loader filled in is marked as an estimate; measured figures are kept.
        for gpu in p.derived:
            assert p.estimated(f"compute_s.{gpu}") and "GPU scaling rule" in p.sources[f"compute_s.{gpu}"]
        # A10/A40 are derived, except Wide-ResNet's fp32 figures: the FP16-tensor scaling rule would
        # anchor an A40 on V100's fp32 time (8x too slow), so they are listed at TF32 peaks.
        listed = {"A10", "A40"} if name.startswith("wresnet-") else set()
        assert {"A10", "A40", "H100", "H200"} - listed <= p.derived and not listed & p.derived, name
        assert not {"V100", "P100", "A100"} & p.derived


def test_gpu_scaling_rule_reproduces_its_validation_pairs(pm):
    """time ~ 1 / sqrt(dense FP16 tensor TFLOPS x memory GB/s) (docs: Throughput matrix).

    Validation (REFERENCE-NUMBERS): ResNet-50 AMP A100/V100 = 1200/2470 = 0.486;
    EasyScale ResNet-50 T4/V100 = 0.610/0.250 = 2.44.
    """
    score = {g: pm.gpu(g).speed_score for g in MATRIX_GPUS}
    assert score["V100"] / score["A100"] == pytest.approx(1200 / 2470, rel=0.02)
    assert score["V100"] / score["T4"] == pytest.approx(0.610 / 0.250, rel=0.06)
    # Derived figures follow the rule from the nearest measured anchor.
    r50 = pm.profile("resnet50")  # measured on V100, P100, T4 and A100
    for target in ("H100", "H200"):  # nearest in speed: A100
        assert r50.compute_s[target] == pytest.approx(r50.compute_s["A100"] * score["A100"] / score[target])
    for target in ("A10", "A40"):  # nearest in speed: V100
        assert r50.compute_s[target] == pytest.approx(r50.compute_s["V100"] * score["V100"] / score[target])
    alex = pm.profile("alexnet")  # measured on V100 only
    assert alex.compute_s["H200"] == pytest.approx(alex.compute_s["V100"] * score["V100"] / score["H200"])


def test_newer_gpus_are_faster_for_every_model(pm):
    for name in pm.models():
        t = pm.profile(name).compute_s
        assert t["H200"] < t["H100"] < t["A100"] < t["A40"] < t["A10"], name
        assert t["A100"] < t["V100"] < t["P100"], name


def test_memory_footprint_formula(pm):
    """state = 16 B/param (ZeRO section 3.1) / (tensor x pipeline); activations scale with the
    per-GPU batch / tensor; plus the framework reserve."""
    c = pm.catalog.constants
    p = pm.profile("bert-large")
    f = pm.memory_footprint(spec("bert-large"), "V100")
    assert f.state_bytes == pytest.approx(16 * 1.34e9 / 4)
    assert f.activation_bytes == pytest.approx(p.activation_bytes)
    assert f.reserve_bytes == c.framework_reserve_bytes
    assert f.capacity_bytes == 32 * GIB
    assert f.total_bytes == pytest.approx(f.state_bytes + f.activation_bytes + f.reserve_bytes)
    double = pm.memory_footprint(spec("bert-large", batch=16), "V100")
    assert double.activation_bytes == pytest.approx(2 * p.activation_bytes)
    sharded = pm.memory_footprint(spec("bert-large", parallelism=Parallelism(1, 2, 2), gpus=4), "V100")
    assert sharded.state_bytes == pytest.approx(f.state_bytes / 4)
    assert sharded.activation_bytes == pytest.approx(f.activation_bytes / 2)


def test_every_measured_profile_fits_the_gpu_it_was_measured_on(pm):
    """A figure measured at the reference batch proves that batch fits that GPU."""
    for name in pm.models():
        p = pm.profile(name)
        for gpu in p.compute_s:
            if not p.estimated(f"compute_s.{gpu}"):
                assert pm.fits_memory(spec(name), gpu), (name, gpu, pm.memory_footprint(spec(name), gpu))


def test_placements_that_do_not_fit_are_refused(pm):
    big = spec("bert-large", batch=64)  # 5.4 GB of state + 38 GB of activations
    assert not pm.fits_memory(big, "T4") and not pm.fits_memory(big, "A100")
    assert pm.fits_memory(big, "H100") and pm.fits_memory(big, "H200")
    # Splitting the model over tensor-parallel GPUs makes it fit where it did not.
    assert pm.fits_memory(spec("bert-large", batch=64, parallelism=Parallelism(1, 4, 1), gpus=4), "A100")
    # More memory never fits less.
    for name in pm.models():
        fits = [pm.fits_memory(spec(name, batch=8 * pm.profile(name).reference_batch), g)
                for g in sorted(MATRIX_GPUS, key=lambda g: pm.gpu_memory_bytes(g))]
        assert fits == sorted(fits), name
    with pytest.raises(UnsupportedGPUError, match="K80"):
        pm.fits_memory(spec("resnet50"), "K80")


def test_gpu_memory_capacities_are_the_datasheet_ones(pm):
    gib = {g: pm.gpu_memory_bytes(g) / GIB for g in MATRIX_GPUS}
    assert gib["A100"] == 40 and gib["A40"] == 48 and gib["A10"] == 24 and gib["V100"] == 32  # Crius Table 1
    assert gib["H100"] == 80 and math.isclose(gib["H200"] * GIB, 141e9, rel_tol=1e-3)
