"""The gpu backend and `halyard calibrate` without a GPU: they refuse clearly, and say why.

The on-GPU paths (NVML on real devices, PyTorch measurements) run only on a
machine with GPUs; here NVML is replaced by a fake module to exercise discovery,
CUDA_VISIBLE_DEVICES and health reporting.
"""

from __future__ import annotations

import sys
import tomllib
import types
from types import SimpleNamespace

import pytest

from halyard.agent.gpu import GpuAgent, GpuUnavailable, gpu_type_of, load_nvml, local_gpus
from halyard.agent.process import ProcessJob
from halyard.cli import main
from halyard.cli.calibrate import to_toml
from halyard.datamodel import Allocation, JobSpec, NodeAllocation
from halyard.emulator.catalog import _GPU_KEYS, _MODEL_KEYS


def test_without_nvidia_ml_py_the_backend_refuses_and_says_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails as if not installed
    with pytest.raises(GpuUnavailable, match=r"needs NVML .*nvidia-ml-py.*not installed"):
        load_nvml()


def test_without_a_driver_the_backend_refuses_and_says_why(monkeypatch):
    fake = types.ModuleType("pynvml")

    def broken_init():
        raise RuntimeError("NVML Shared Library Not Found")

    fake.nvmlInit = broken_init
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    with pytest.raises(GpuUnavailable, match="NVML did not start: NVML Shared Library Not Found"):
        load_nvml()


def test_halyard_agent_gpu_exits_2_with_one_line(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setattr("halyard.cli.agent.configure_logging", lambda **_: None)  # keep pytest's streams
    code = main(["agent", "--control-plane", "127.0.0.1:1", "--node", "r0-n0", "--backend", "gpu", "--insecure"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "nvidia-ml-py" in err


def test_calibrate_without_cuda_exits_2_with_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "torch", None)  # not installed (CI never installs torch)
    assert main(["calibrate", "--out", str(tmp_path / "p.toml")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "torch is not installed" in err
    fake_torch = types.ModuleType("torch")
    fake_torch.__version__ = "2.5.0+cpu"
    fake_torch.version = SimpleNamespace(cuda=None)
    fake_torch.cuda = SimpleNamespace(is_available=lambda: False)
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    assert main(["calibrate", "--out", str(tmp_path / "p.toml")]) == 2
    err = capsys.readouterr().err
    assert "no CUDA device" in err and "CPU-only build" in err
    assert not (tmp_path / "p.toml").exists()


def calibration(**more) -> dict:
    """A profile as `halyard calibrate` measures it (no GPU needed to write one out)."""
    return {"gpu_type": "H200", "where": "host H200, torch 2.5, 2026-01-01",
            "gpus": {"H200": {"memory_gib": (139.8, "props"), "tensor_tflops": (700.0, "matmul"),
                              "memory_gbyte_s": (3900.0, "copy")}},
            "model": {"compute_s": (0.004, "step"), "gradient_bytes": (5.4e8, "params"),
                      "backward_fraction": (0.66, "ratio"), "activation_bytes": (1e8, "peak"),
                      "reference_batch": (256, "batch")},
            "allreduce_skipped": "one GPU", **more}


def test_calibration_profile_uses_the_catalog_schema():
    doc = tomllib.loads(to_toml(calibration()))
    assert set(doc["gpus"]["H200"]) == _GPU_KEYS
    model = doc["models"]["calibration-mlp"]
    assert set(model) <= _MODEL_KEYS and model["compute_s"]["H200"]["value"] == 0.004
    assert "measured by halyard calibrate" in model["gradient_bytes"]["source"]


def test_models_to_time_are_catalog_models_pytorch_can_build():
    from halyard.cli.calibrate import _models_arg

    every = _models_arg("all")
    assert {"resnet50", "vgg19", "swint", "lstm", "bert-large", "gpt2-medium"} <= set(every)
    assert "bert-0.76b" not in every and "gnmt" not in every  # Alpa shapes, NVIDIA's GNMT: not built here
    assert _models_arg("resnet50, vgg11") == ["resnet50", "vgg11"]
    assert "nope not in the catalog" in _models_arg("resnet50,nope")
    assert "gnmt cannot be built here" in _models_arg("gnmt")


def test_a_bad_model_list_is_refused_with_one_line_before_anything_runs(capsys, tmp_path):
    assert main(["calibrate", "--out", str(tmp_path / "p.toml"), "--models", "resnet50,nope"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "nope not in the catalog" in err
    assert not (tmp_path / "p.toml").exists()


def test_each_model_is_compared_in_the_precision_its_catalog_figures_used():
    from halyard.cli.calibrate_models import catalog_precision
    from halyard.emulator.catalog import load_catalog

    models = load_catalog().models
    assert catalog_precision(models["resnet18"].sources["activation_bytes"]) == "amp"  # Synergy's apex AMP
    assert catalog_precision(models["resnet50"].sources["activation_bytes"]) == "fp32"  # Gavel/EasyScale


def test_measured_training_steps_replace_the_scaling_rules_estimate_when_the_profile_is_used():
    """A profile from `calibrate --models` gives catalog models measured figures on its GPU; laid over the
    catalog (--catalog), each replaces the rule's estimate, in the precision the model's figures use."""
    from halyard.cli.calibrate import from_json, to_json
    from halyard.emulator.catalog import extend_catalog, load_catalog

    profile = calibration(training_steps=[
        {"model": "resnet50", "batch": 64, "precision": "fp32", "step_s": 0.032, "optimizer": "SGD"},
        {"model": "resnet50", "batch": 64, "precision": "amp", "step_s": 0.029, "optimizer": "SGD"},
        {"model": "resnet18", "batch": 512, "precision": "amp", "error": "out of memory"}])
    assert from_json(to_json(profile)) == profile
    base = load_catalog()
    merged = extend_catalog(base, to_toml(profile))
    resnet50 = merged.models["resnet50"]
    assert resnet50.compute_s["H200"] == 0.032 and "H200" not in resnet50.derived  # the fp32 step, measured
    assert resnet50.sources["compute_s.H200"].startswith("measured by halyard calibrate on host H200")
    assert resnet50.compute_s["V100"] == base.models["resnet50"].compute_s["V100"]  # the rest kept
    assert "H200" in merged.models["resnet18"].derived  # not measured: still the rule's estimate


def test_the_shipped_h200_profile_is_calibrates_output_of_the_stored_run():
    """emulator/data/profile_h200_measured.toml (--catalog h200-measured) is what `halyard calibrate --out`
    wrote of the run stored in docs/gpu-check.json: no figure typed by hand."""
    import json
    from pathlib import Path

    from halyard.cli.calibrate import from_json
    from halyard.emulator.catalog import load_model_catalog

    root = Path(__file__).resolve().parents[1]
    run = json.loads((root / "docs" / "gpu-check.json").read_text(encoding="utf-8"))
    shipped = (root / "emulator" / "data" / "profile_h200_measured.toml").read_text(encoding="utf-8")
    assert shipped == to_toml(from_json(run))
    catalog = load_model_catalog("h200-measured")
    measured = {r["model"] for r in run["training_steps"] if "step_s" in r}
    assert measured and all("H200" not in catalog.models[m].derived for m in measured)


def test_gpu_type_names():
    assert gpu_type_of("NVIDIA H200") == "H200"
    assert gpu_type_of("Tesla V100-SXM2-32GB") == "V100"
    assert gpu_type_of("NVIDIA A100-SXM4-80GB") == "A100"
    assert gpu_type_of("NVIDIA A10") == "A10"


class FakeNvml:
    """Enough of pynvml for discovery and health: two GPUs, the second with ECC errors."""

    NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, nvmlEventTypeXidCriticalError = 1, 0, 8

    def nvmlInit(self): ...
    def nvmlDeviceGetCount(self): return 2
    def nvmlDeviceGetHandleByIndex(self, i): return i
    def nvmlDeviceGetName(self, h): return b"NVIDIA H200"
    def nvmlDeviceGetMemoryInfo(self, h): return SimpleNamespace(total=141 * 2**30, used=2**30)
    def nvmlDeviceGetUtilizationRates(self, h): return SimpleNamespace(gpu=50 if h == 0 else 100)
    def nvmlDeviceGetTotalEccErrors(self, h, kind, counter): return 0 if h == 0 else 3
    def nvmlEventSetCreate(self): raise RuntimeError("not supported")


def test_discovery_health_and_visible_devices_with_a_fake_nvml(tmp_path):
    agent = GpuAgent("127.0.0.1:1", "gpu-node", work_dir=tmp_path, nvml=FakeNvml())
    spec = agent.node_spec()
    assert (spec.gpus, spec.gpu_type) == (2, "H200")
    assert local_gpus(FakeNvml()) == ("H200", 2)  # what the gpu checks describe this machine with
    util, healthy, detail = agent.gpu_status()
    assert util == pytest.approx(0.75) and not healthy and "gpu1 100%" in detail and "ECC uncorrected 3" in detail
    job = ProcessJob("j", 1, JobSpec(job_id="j", submit_time=0.0, model="resnet50", num_gpus=1, iterations=10),
                     Allocation((NodeAllocation("gpu-node", (1,), 4, 1000),)), True, 10)
    assert agent.extra_environment(job) == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "1"}
