"""A PyTorch training script that runs under Halyard: a torchvision classifier on synthetic images.

It really trains (SGD with momentum on a fixed pool of random images whose labels
it memorises, so the loss falls), on the GPU that ``CUDA_VISIBLE_DEVICES`` leaves
it (the gpu backend sets it to the job's share), checkpoints the model and the
optimizer to ``HALYARD_CHECKPOINT_DIR`` and resumes from them after a
preemption. The Halyard-specific lines are marked ``# halyard``; the script also
runs on its own (``python examples/train_torch.py --iterations 50``), on the CPU
where there is no GPU.

When the agent changes the job's CPU share (Synergy's set_resources), the worker
learns the new count and the script sets PyTorch's intra-op threads to it; the
agent has already re-pinned the process. The summary it writes at the end
(``summary.json`` beside the checkpoint) records what the process saw: its
device, ``CUDA_VISIBLE_DEVICES``, the CPU affinities and counts it ran with, its
attempt and where it started, and its losses and iteration times, so a test or
an operator can check each of those on real hardware.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from halyard.agent.worker import Worker  # halyard

CHECKPOINT = "model.pt"


def build_model(name: str, classes: int) -> torch.nn.Module:
    """A torchvision classifier by name, randomly initialised (no weights downloaded); a small CNN without
    torchvision."""
    try:
        import torchvision
    except ImportError:
        return torch.nn.Sequential(
            torch.nn.Conv2d(3, 32, 3, stride=2, padding=1), torch.nn.ReLU(),
            torch.nn.Conv2d(32, 64, 3, stride=2, padding=1), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, classes))
    return torchvision.models.get_model(name, weights=None, num_classes=classes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=None, help="default: HALYARD_ITERATIONS_TOTAL")
    parser.add_argument("--model", default="resnet18", help="a torchvision classification model")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--image", type=int, default=64, help="image side in pixels")
    parser.add_argument("--pool", type=int, default=256, help="synthetic images in the training set")
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint-every", type=int, default=20)
    parser.add_argument("--min-iteration-s", type=float, default=0.0,
                        help="pad each iteration to at least this long (tests that need a steady pace)")
    args = parser.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(args.seed)
    model = build_model(args.model, args.classes).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    def save(done: int) -> None:  # halyard: the checkpoint hook, called with the iterations done
        if worker.is_leader:
            path = worker.checkpoint_dir / CHECKPOINT
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "iteration": done},
                       path.with_suffix(".tmp"))
            path.with_suffix(".tmp").replace(path)  # atomic: a kill never leaves half a checkpoint

    worker = Worker(checkpoint=save, checkpoint_every=args.checkpoint_every)  # halyard
    worker.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    if worker.resuming:  # halyard: load the checkpoint the last attempt left
        saved = torch.load(worker.checkpoint_dir / CHECKPOINT, map_location=device)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])

    generator = torch.Generator().manual_seed(args.seed)
    images = torch.randn(args.pool, 3, args.image, args.image, generator=generator).to(device)
    labels = torch.randint(0, args.classes, (args.pool,), generator=generator).to(device)

    cpus_seen: list[int] = []
    affinity_seen: list[int] = []
    losses: list[tuple[int, float]] = []
    iteration_ms: list[float] = []
    model.train()
    for step in worker.iterations(args.iterations):  # halyard: was `for step in range(args.iterations):`
        began = time.perf_counter()
        if worker.cpus and (not cpus_seen or cpus_seen[-1] != worker.cpus):  # halyard: a new CPU share
            torch.set_num_threads(worker.cpus)
            cpus_seen.append(worker.cpus)
            print(json.dumps({"step": step, "cpus": worker.cpus, "threads": torch.get_num_threads()}), flush=True)
        affinity = len(os.sched_getaffinity(0))
        if not affinity_seen or affinity_seen[-1] != affinity:
            affinity_seen.append(affinity)
            print(json.dumps({"step": step, "affinity": affinity}), flush=True)
        pick = torch.randint(0, args.pool, (args.batch,), generator=torch.Generator().manual_seed(args.seed + step))
        pick = pick.to(device)
        loss = F.cross_entropy(model(images[pick]), labels[pick])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % 10 == 0 or step == worker.start_iteration:
            losses.append((step, float(loss.detach())))  # a sync point: read the loss now and then, not every step
        if device.type == "cuda":
            torch.cuda.synchronize()
        if args.min_iteration_s:
            time.sleep(max(0.0, args.min_iteration_s - (time.perf_counter() - began)))
        iteration_ms.append((time.perf_counter() - began) * 1e3)

    with torch.no_grad():  # the fit on one fixed batch (batch statistics, as in training)
        final = float(F.cross_entropy(model(images[: args.batch]), labels[: args.batch]))
    summary = {
        "rank": worker.rank, "attempt": worker.attempt, "started_at": worker.start_iteration,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "cpus_seen": cpus_seen, "affinity_seen": affinity_seen, "losses": losses, "final_loss": final,
        "iterations_run": len(iteration_ms),
        "median_iteration_ms": sorted(iteration_ms)[len(iteration_ms) // 2] if iteration_ms else None,
    }
    if worker.is_leader:
        Path(worker.checkpoint_dir / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
