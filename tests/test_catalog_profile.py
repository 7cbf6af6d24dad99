"""`--catalog FILE`: the profile `halyard calibrate --out` writes, laid over the built-in catalog.

The profile is made by calibrate's own writer (`to_toml`) from the figures a measurement
returns, so the test reads exactly what the command writes on a GPU machine.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from halyard.cli.calibrate import to_toml
from halyard.datamodel import JobSpec, ValidationError
from halyard.emulator import PerformanceModel, load_model_catalog
from halyard.emulator.catalog import extend_catalog, load_catalog
from halyard.testing.cluster import small_cluster_toml
from halyard.traces import write_trace

HALYARD = [sys.executable, "-m", "halyard.cli"]
ITERATIONS = 1000


def calibration(step_s: float, tflops: float = 400.0) -> str:
    """A profile as `halyard calibrate --gpu-type H100` writes it, with these measured figures."""
    return to_toml({
        "gpu_type": "H100", "where": "test-host NVIDIA H100 80GB HBM3, torch 2.5, 2026-11-23",
        "gpus": {"H100": {"memory_gib": (79.1, "total_memory"), "tensor_tflops": (tflops, "BF16 matmul"),
                          "memory_gbyte_s": (2900.0, "device copy")}},
        "model": {"compute_s": (step_s, "MLP step"), "gradient_bytes": (134_250_496 * 4.0, "parameters"),
                  "backward_fraction": (0.66, "1 - forward / step"), "activation_bytes": (2.2e8, "peak"),
                  "reference_batch": (256, "the batch of the measurement")},
        "allreduce_skipped": "one GPU",
    })


def halyard(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*HALYARD, *args], cwd=cwd, env=os.environ | {"COLUMNS": "120"}, capture_output=True,
                          text=True, timeout=120)


def run_s(tmp: Path, name: str, *extra: str) -> dict[str, float]:
    """`halyard simulate` of the test trace; each job's run time from its jobs.csv (empty for a rejected job)."""
    out = tmp / name
    proc = halyard("simulate", "--trace", str(tmp / "trace.csv"), "--cluster", str(tmp / "h100.toml"),
                   "--no-progress", "--contention", "off", "--out-dir", str(out), "--table-format", "csv", *extra,
                   cwd=tmp)
    assert proc.returncode == 0, proc.stderr
    with (out / "jobs.csv").open() as f:
        return {row["job_id"]: float(row["run_s"]) for row in csv.DictReader(f) if row["run_s"]}


def test_a_calibrate_profile_sets_the_simulated_iteration_time(tmp_path):
    (tmp_path / "h100.toml").write_text(small_cluster_toml(1).replace('"V100"', '"H100"'))
    write_trace([JobSpec(job_id="mlp", submit_time=0.0, model="calibration-mlp", num_gpus=1, iterations=ITERATIONS),
                 JobSpec(job_id="resnet", submit_time=0.0, model="resnet50", num_gpus=1, iterations=ITERATIONS)],
                tmp_path / "trace.csv")
    (tmp_path / "fast.toml").write_text(calibration(0.02))
    (tmp_path / "slow.toml").write_text(calibration(0.05, tflops=100.0))

    builtin = run_s(tmp_path, "builtin")
    fast = run_s(tmp_path, "fast", "--catalog", str(tmp_path / "fast.toml"))
    slow = run_s(tmp_path, "slow", "--catalog", str(tmp_path / "slow.toml"))

    assert "mlp" not in builtin  # the built-in catalog has no such model: rejected, never ran
    # One GPU, no communication: the run is the measured step time x iterations.
    assert fast["mlp"] == pytest.approx(0.02 * ITERATIONS, rel=1e-6)
    assert slow["mlp"] == pytest.approx(0.05 * ITERATIONS, rel=1e-6)
    # resnet50 has no H100 figure of its own: the scaling rule derives it from the H100 spec
    # (time ~ 1 / sqrt(TFLOPS x GB/s)), so a measured H100 changes the built-in model too:
    # a quarter of the TFLOPS, twice the time.
    assert fast["resnet"] != pytest.approx(builtin["resnet"], rel=0.05)
    assert slow["resnet"] == pytest.approx(2 * fast["resnet"], rel=1e-6)


@pytest.mark.slow
def test_replay_agents_take_the_control_planes_catalog(tmp_path):
    """`halyard agent` processes learn the profile at registration and run the model as simulate does."""
    (tmp_path / "h100.toml").write_text(small_cluster_toml(1).replace('"V100"', '"H100"'))
    write_trace([JobSpec(job_id=f"m{i}", submit_time=30.0 * i, model="calibration-mlp", num_gpus=4,
                         iterations=ITERATIONS) for i in range(3)], tmp_path / "trace.csv")
    (tmp_path / "cal.toml").write_text(calibration(0.03))
    common = ["--trace", str(tmp_path / "trace.csv"), "--cluster", str(tmp_path / "h100.toml"), "--no-progress",
              "--catalog", str(tmp_path / "cal.toml")]
    proc = halyard("replay", *common, "--speedup", "500", "--agent-processes", "--out", str(tmp_path / "r.json"),
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert halyard("simulate", *common, "--out", str(tmp_path / "s.json"), cwd=tmp_path).returncode == 0
    replayed, simulated = (json.loads((tmp_path / f).read_text()) for f in ("r.json", "s.json"))
    assert replayed["completed"] == simulated["completed"] == 3
    assert replayed["avg_jct_s"] == pytest.approx(simulated["avg_jct_s"], rel=0.02)


def test_profile_errors_name_the_file_and_field(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(calibration(0.02).replace("compute_s.H100", "compute_s.Z9"))  # a GPU type with no [gpus] spec
    with pytest.raises(ValidationError) as err:
        load_model_catalog(bad)
    assert str(bad) in str(err.value) and "models.calibration-mlp.compute_s" in str(err.value)
    bad.write_text("schema_version = 2\n")
    with pytest.raises(ValidationError, match="holds nothing"):
        load_model_catalog(bad)
    proc = halyard("simulate", "--catalog", str(tmp_path / "missing.toml"), "--no-progress", cwd=tmp_path)
    assert proc.returncode == 2 and "--catalog" in proc.stderr and "Traceback" not in proc.stderr


def test_a_profile_keeps_measured_figures_and_rederives_the_rest(tmp_path):
    path = tmp_path / "cal.toml"
    path.write_text(calibration(0.02, tflops=100.0))
    builtin, extended = PerformanceModel(), PerformanceModel(load_model_catalog(path))
    resnet, resnet2 = builtin.profile("resnet50"), extended.profile("resnet50")
    assert resnet2.compute_s["A100"] == resnet.compute_s["A100"]  # measured (ElasticFlow): kept
    assert "H100" in resnet.derived and resnet2.compute_s["H100"] > resnet.compute_s["H100"]
    mlp = extended.profile("calibration-mlp")
    assert mlp.compute_s["H100"] == 0.02 and "measured by halyard calibrate" in mlp.sources["compute_s.H100"]
    assert {"V100", "P100", "A100"} <= mlp.derived  # the scaling rule fills in the other GPU types
    assert not builtin.has_model("calibration-mlp")


def test_a_profile_model_table_of_compute_figures_alone_adds_them_to_the_base_model():
    """What `halyard calibrate --models` writes: `[models.M]` with only `compute_s.<GPU>` for a catalog model
    adds that figure (measured, not derived) and keeps the model's other figures; a bad figure is named."""
    base = load_catalog()
    text = 'schema_version = 2\n[models.vgg16]\ncompute_s.H100 = { value = 0.05, source = "measured: here" }\n'
    vgg16 = extend_catalog(base, text).models["vgg16"]
    assert vgg16.compute_s["H100"] == 0.05 and "H100" not in vgg16.derived
    assert vgg16.gradient_bytes == base.models["vgg16"].gradient_bytes and "H200" in vgg16.derived
    bad = 'schema_version = 2\n[models.vgg16]\ncompute_s.H100 = { value = -1.0, source = "x" }\n'
    with pytest.raises(ValidationError, match=r"models\.vgg16\.compute_s\.H100"):
        extend_catalog(base, bad)
