"""``halyard calibrate``: measure this machine's GPUs and write a profile in the performance model's schema.

On a machine with CUDA GPUs and PyTorch it measures, on GPU 0:

* dense matrix-product throughput (BF16, square products) -> ``gpus.<TYPE>.tensor_tflops``, and the
  same product in FP16, TF32 and plain FP32 (reported, not part of the catalog's schema);
* device memory copy bandwidth -> ``gpus.<TYPE>.memory_gbyte_s``, and the capacity -> ``memory_gib``;
* a small model's training step (an MLP, forward + backward + SGD step) ->
  ``models.calibration-mlp`` with its compute time, gradient bytes, backward
  share and activation memory, as the catalog describes a model;

and, with two or more GPUs, the in-node all-reduce bus bandwidth over NCCL
(``[network] intra_node_gbyte_s``, informational). With ``--models`` it also times a training
step of each catalog model that PyTorch can build locally (:mod:`halyard.cli.calibrate_models`), in
fp32 and AMP, at the model's reference batch; ``--json`` keeps every measurement for the
predicted-vs-measured report (benchmarks/gpu_predicted_vs_measured.py). Every figure's ``source``
says it was measured here, when and how, so the profile can be compared with or
merged into ``emulator/data/models.toml``.

Without PyTorch or without a CUDA device it exits with status 2 and a one-line
reason; it never installs anything.
"""

from __future__ import annotations

import argparse
import datetime
import json
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

EXIT_UNAVAILABLE = 2
MATMUL_N = 8192
COPY_BYTES = 1 << 30
MLP_WIDTH, MLP_DEPTH, MLP_BATCH = 4096, 8, 256
ALLREDUCE_BYTES = 256 << 20
REPEATS = 20
WARMUP_CALLS = 3  # cuDNN's autotuner (benchmark mode) and the caching allocator settle in these


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("calibrate", help="measure this machine's GPUs into a performance-model profile")
    p.add_argument("--out", type=Path, default=Path("calibration.toml"), help="profile to write (TOML)")
    p.add_argument("--gpu-type", default=None, help="name of the GPU type in the profile (default: from the device)")
    p.add_argument("--no-collectives", action="store_true", help="skip the in-node all-reduce measurement")
    p.add_argument("--models", default="", help="catalog models whose training step to time, comma-separated, "
                   "or 'all' for every one PyTorch can build here (default: none)")
    p.add_argument("--json", type=Path, default=None, help="also write every measurement as JSON")
    p.set_defaults(run=run)


def cuda_unavailable() -> str | None:
    """Why calibration cannot run here, or None when PyTorch sees a CUDA device."""
    try:
        import torch
    except ImportError:
        return "needs PyTorch with CUDA, and torch is not installed (pip install torch on a GPU machine)"
    if not torch.cuda.is_available():
        built = getattr(torch.version, "cuda", None)
        return (f"no CUDA device: torch {torch.__version__} "
                f"({'built with CUDA ' + built if built else 'a CPU-only build'}) sees no GPU")
    return None


def run(args: argparse.Namespace) -> int:
    models = _models_arg(args.models)  # a bad list is refused before anything is measured, GPU or not
    if isinstance(models, str):
        print(f"halyard calibrate: {models}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    reason = cuda_unavailable()
    if reason is not None:
        print(f"halyard calibrate: {reason}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    profile = measure(gpu_type=args.gpu_type, collectives=not args.no_collectives)
    if models:
        from halyard.cli.calibrate_models import measure_models
        from halyard.emulator.catalog import load_catalog

        batches = {m: int(p.reference_batch) for m, p in load_catalog().models.items()}
        profile["training_steps"] = measure_models(models, batches, log=lambda line: print(line, flush=True))
    args.out.write_text(to_toml(profile), encoding="utf-8")
    if args.json is not None:
        args.json.write_text(json.dumps(to_json(profile), indent=1) + "\n", encoding="utf-8")
    print(summary(profile))
    print(f"profile written to {args.out}")
    return 0


def _models_arg(text: str) -> list[str] | str:
    """The catalog models ``--models`` names (``all``: every buildable one), or why the list is refused."""
    from halyard.cli.calibrate_models import buildable
    from halyard.emulator.catalog import load_catalog

    catalog = list(load_catalog().models)
    if text.strip() == "all":
        return buildable(catalog)
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in catalog]
    if unknown:
        return f"--models: {', '.join(unknown)} not in the catalog (halyard profiles list)"
    cannot = [n for n in names if n not in buildable([n])]
    if cannot:
        return (f"--models: {', '.join(cannot)} cannot be built here (buildable: "
                f"{', '.join(buildable(catalog))})")
    return names


# --- measurements (GPU only) --------------------------------------------------------


def timed(torch, fn, repeats: int = REPEATS) -> float:
    """Seconds per call of ``fn`` on the current CUDA stream (after ``WARMUP_CALLS`` calls)."""
    for _ in range(WARMUP_CALLS):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1000.0 / repeats


def measure(*, gpu_type: str | None = None, collectives: bool = True) -> dict[str, Any]:
    import torch

    from halyard.agent.gpu import gpu_type_of

    device = torch.device("cuda:0")
    props = torch.cuda.get_device_properties(device)
    gpu = gpu_type or gpu_type_of(props.name)
    where = f"{socket.gethostname()} {props.name}, torch {torch.__version__}, " \
            f"{datetime.datetime.now(datetime.UTC).date().isoformat()}"

    matmul = {label: matmul_tflops(torch, device, dtype, tf32) for label, (dtype, tf32) in {
        "bf16": (torch.bfloat16, False), "fp16": (torch.float16, False), "tf32": (torch.float32, True),
        "fp32": (torch.float32, False)}.items()}
    matmul_s = 2 * MATMUL_N**3 / (matmul["bf16"] * 1e12)
    tflops = matmul["bf16"]

    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    copy_s = timed(torch, lambda: dst.copy_(src))
    memory_gbyte_s = 2 * COPY_BYTES / copy_s / 1e9  # read + write

    layers = []
    for _ in range(MLP_DEPTH):
        layers += [torch.nn.Linear(MLP_WIDTH, MLP_WIDTH), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(MLP_BATCH, MLP_WIDTH, device=device)

    def forward() -> None:
        with torch.no_grad():
            model(x)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        optimizer.step()

    forward_s = timed(torch, forward)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    step_s = timed(torch, step)
    activation_bytes = max(0, torch.cuda.max_memory_allocated(device) - base)
    parameters = sum(p.numel() for p in model.parameters())

    profile: dict[str, Any] = {
        "gpu_type": gpu,
        "device_name": props.name,
        "where": where,
        "matmul_tflops": matmul,
        "gpus": {gpu: {
            "memory_gib": (props.total_memory / 2**30, "torch.cuda.get_device_properties(0).total_memory"),
            "tensor_tflops": (tflops, f"BF16 {MATMUL_N}x{MATMUL_N} matrix product, {matmul_s * 1e3:.3f} ms each"),
            "memory_gbyte_s": (memory_gbyte_s, f"{COPY_BYTES >> 20} MiB device-to-device copy (read + write)"),
        }},
        "model": {
            "compute_s": (step_s, f"MLP {MLP_DEPTH}x{MLP_WIDTH}, batch {MLP_BATCH}, fp32: forward, backward, SGD step"),
            "gradient_bytes": (parameters * 4.0, f"{parameters:,} fp32 parameters"),
            "backward_fraction": (max(0.0, min(1.0, 1 - forward_s / step_s)),
                                  f"1 - forward {forward_s * 1e3:.3f} ms / step {step_s * 1e3:.3f} ms"),
            "activation_bytes": (float(activation_bytes), "peak allocated during a step minus the model's own"),
            "reference_batch": (MLP_BATCH, "the batch of the measurement"),
        },
    }
    count = torch.cuda.device_count()
    if collectives and count >= 2:
        profile["allreduce"] = (allreduce_bus_gbyte_s(count), f"NCCL all-reduce of {ALLREDUCE_BYTES >> 20} MiB "
                                f"over {count} GPUs, bus bandwidth 2(n-1)/n x size / time")
    else:
        profile["allreduce_skipped"] = "one GPU" if count < 2 else "--no-collectives"
    return profile


def matmul_tflops(torch, device, dtype, tf32: bool) -> float:
    """Dense TFLOP/s of a square ``MATMUL_N`` product in ``dtype`` (fp32 through TF32 tensor cores if ``tf32``)."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        a = torch.randn(MATMUL_N, MATMUL_N, device=device, dtype=dtype)
        b = torch.randn(MATMUL_N, MATMUL_N, device=device, dtype=dtype)
        return 2 * MATMUL_N**3 / timed(torch, lambda: a @ b) / 1e12
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def allreduce_bus_gbyte_s(count: int) -> float:
    """In-node all-reduce bus bandwidth (GB/s) over ``count`` GPUs with NCCL, one process per GPU."""
    import torch.multiprocessing as mp

    result = mp.get_context("spawn").SimpleQueue()
    mp.spawn(_allreduce_worker, args=(count, result), nprocs=count, join=True)
    return result.get()


def _allreduce_worker(rank: int, count: int, result) -> None:
    import os

    import torch
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=count)
    tensor = torch.ones(ALLREDUCE_BYTES // 4, device=f"cuda:{rank}")
    seconds = timed(torch, lambda: dist.all_reduce(tensor), repeats=10)
    if rank == 0:
        result.put(2 * (count - 1) / count * ALLREDUCE_BYTES / seconds / 1e9)
    dist.destroy_process_group()


# --- output -------------------------------------------------------------------------


def _entry(value: float, source: str, where: str) -> str:
    text = repr(round(value, 6)) if isinstance(value, float) else str(value)
    return f'{{ value = {text}, source = "measured by halyard calibrate on {where}: {source}" }}'


def to_toml(profile: dict[str, Any]) -> str:
    """The profile in models.toml's schema (``schema_version``, ``[gpus.T]``, ``[models.M]``)."""
    from halyard.emulator.catalog import SCHEMA_VERSION

    where, gpu = profile["where"], profile["gpu_type"]
    lines = [
        "# Written by `halyard calibrate`: figures measured on this machine, in the schema of",
        "# emulator/data/models.toml (merge the sections you trust into the catalog).",
        "",
        f"schema_version = {SCHEMA_VERSION}",
        "",
        f"[gpus.{gpu}]",
    ]
    lines += [f"{k} = {_entry(v, s, where)}" for k, (v, s) in profile["gpus"][gpu].items()]
    lines += ["", "[models.calibration-mlp]", 'task = "language"',
              'description = "the MLP halyard calibrate trains (a compute-bound reference step)"']
    model = dict(profile["model"])
    step_value, step_source = model.pop("compute_s")
    lines += [f"{k} = {_entry(v, s, where)}" for k, (v, s) in model.items()]
    lines.append(f"compute_s.{gpu} = {_entry(step_value, step_source, where)}")
    steps = [r for r in profile.get("training_steps", ()) if "step_s" in r]
    if steps:
        from halyard.cli.calibrate_models import catalog_precision
        from halyard.emulator.catalog import load_catalog

        models = load_catalog().models
        lines += ["", "# Training steps of catalog models measured here, in the precision the catalog's figures of",
                  "# each were measured in: with this profile (--catalog), each replaces the scaling rule's estimate."]
        for r in steps:
            if r["precision"] == catalog_precision(models[r["model"]].sources.get("activation_bytes", "")):
                source = (f"{r['optimizer']} step of random weights on random inputs, batch {r['batch']}, "
                          f"{r['precision']}")
                entry = _entry(r["step_s"], source, where)
                lines += [f"[models.{_quote_key(r['model'])}]", f"compute_s.{gpu} = {entry}"]
    if "allreduce" in profile:
        value, source = profile["allreduce"]
        lines += ["", "# In-node collective bandwidth (informational: compare with the cluster file's fabric_gbyte_s).",
                  f"# intra_node_allreduce_gbyte_s = {value:.1f}  ({source})"]
    else:
        lines += ["", f"# In-node all-reduce not measured ({profile['allreduce_skipped']})."]
    return "\n".join(lines) + "\n"


def _figures_mapped(x: Any, figure: Callable[[Any], Any | None]) -> Any:
    """``x`` (dicts and lists of measurements) with each figure replaced by ``figure(part)``: the parts for
    which it returns something else than None."""
    if (mapped := figure(x)) is not None:
        return mapped
    if isinstance(x, dict):
        return {k: _figures_mapped(v, figure) for k, v in x.items()}
    if isinstance(x, list):
        return [_figures_mapped(v, figure) for v in x]
    return x


def from_json(doc: dict[str, Any]) -> dict[str, Any]:
    """The profile :func:`to_json` wrote, as :func:`measure` returns it (``{value, source}`` become tuples)."""
    return _figures_mapped(doc, lambda x: (x["value"], x["source"])
                           if isinstance(x, dict) and set(x) == {"value", "source"} else None)


def to_json(profile: dict[str, Any]) -> dict[str, Any]:
    """Every measurement with its source, for reports (``(value, source)`` tuples become ``{value, source}``)."""
    return _figures_mapped(profile, lambda x: {"value": x[0], "source": x[1]}
                           if isinstance(x, tuple) and len(x) == 2 and isinstance(x[1], str) else None)


def _quote_key(name: str) -> str:
    return f'"{name}"' if "." in name else name  # TOML bare keys take letters, digits, - and _


def summary(profile: dict[str, Any]) -> str:
    gpu = profile["gpu_type"]
    g = profile["gpus"][gpu]
    others = ", ".join(f"{k} {v:.1f}" for k, v in profile["matmul_tflops"].items() if k != "bf16")
    parts = [f"{gpu}: {g['tensor_tflops'][0]:.1f} TFLOP/s BF16 matmul ({others})",
             f"{g['memory_gbyte_s'][0]:.0f} GB/s copy",
             f"MLP step {profile['model']['compute_s'][0] * 1e3:.2f} ms"]
    if "allreduce" in profile:
        parts.append(f"all-reduce {profile['allreduce'][0]:.0f} GB/s bus")
    return ", ".join(parts)
