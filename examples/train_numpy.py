"""A CPU training script that runs under Halyard: logistic regression on synthetic data, in numpy.

It really computes (mini-batch gradient descent on a fixed synthetic problem),
checkpoints its weights to ``HALYARD_CHECKPOINT_DIR`` and resumes from them
after a preemption. The Halyard-specific lines are marked ``# halyard``;
everything else is an ordinary training loop, and the script runs on its own
too (``python examples/train_numpy.py --iterations 200``).

The job trains as ``worker.logical_workers`` data-parallel workers (EasyScale's
ESTs; one per GPU unless the job declares more): logical worker ``e`` owns data
shard ``e`` and draws its batch at step ``i`` from a generator seeded by
``(seed, e, i)``, and each process runs its logical workers one after another
(time slicing) and averages their gradients. So the weights after ``i`` steps do
not depend on how many GPUs the job held, or when it was resized. Rank 0 saves
the checkpoints (a multi-node job would average gradients across processes with
its collective library here).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from halyard.agent.worker import Worker  # halyard


def synthetic(samples: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A linearly separable problem with label noise, the same for every run of a seed."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((samples, dim))
    w_true = rng.standard_normal(dim)
    y = (x @ w_true + 0.5 * rng.standard_normal(samples) > 0).astype(np.float64)
    return x, y


def loss_and_gradient(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    p = 1.0 / (1.0 + np.exp(-(x @ w)))
    eps = 1e-12
    loss = -float(np.mean(y * np.log(p + eps) + (1 - y) * np.log(1 - p + eps)))
    return loss, x.T @ (p - y) / len(y)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=None, help="default: HALYARD_ITERATIONS_TOTAL")
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint-every", type=int, default=50)
    parser.add_argument("--min-iteration-s", type=float, default=0.0,
                        help="pad each iteration to at least this long (demos and tests that need a steady pace)")
    args = parser.parse_args()

    weights = np.zeros(args.dim)
    state = {"weights": weights}

    def save(done: int) -> None:  # halyard: the checkpoint hook, called with the iterations done
        if worker.is_leader:
            path = worker.checkpoint_dir / "model.npz"
            np.savez(path.with_suffix(".tmp.npz"), weights=state["weights"], iteration=done)
            path.with_suffix(".tmp.npz").replace(path)

    worker = Worker(checkpoint=save, checkpoint_every=args.checkpoint_every)  # halyard
    worker.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    if worker.resuming:  # halyard: load the checkpoint the last attempt left
        saved = np.load(worker.checkpoint_dir / "model.npz")
        state["weights"] = saved["weights"]

    x, y = synthetic(args.samples, args.dim, args.seed)
    ests = worker.logical_workers  # halyard: logical workers, whatever the GPU count
    shards = [(x[e::ests], y[e::ests]) for e in worker.logical_ranks]
    first_loss, loss = None, None
    for step in worker.iterations(args.iterations):  # halyard: was `for step in range(args.iterations):`
        began = time.perf_counter()
        grad = np.zeros_like(state["weights"])
        losses = []
        for e, (xs, ys) in zip(worker.logical_ranks, shards, strict=True):  # time-sliced logical workers
            batch = np.random.default_rng([args.seed, e, step]).integers(0, len(ys), args.batch)
            est_loss, est_grad = loss_and_gradient(state["weights"], xs[batch], ys[batch])
            grad += est_grad
            losses.append(est_loss)
        loss = float(np.mean(losses))
        state["weights"] = state["weights"] - args.lr * grad / len(shards)
        first_loss = loss if first_loss is None else first_loss
        if args.min_iteration_s:
            time.sleep(max(0.0, args.min_iteration_s - (time.perf_counter() - began)))

    full_loss, _ = loss_and_gradient(state["weights"], x, y)
    accuracy = float(np.mean(((x @ state["weights"]) > 0) == (y > 0.5)))
    summary = {"rank": worker.rank, "attempt": worker.attempt, "started_at": worker.start_iteration,
               "num_gpus": worker.num_gpus, "logical_workers": ests, "rank_workers": worker.rank_workers,
               "first_batch_loss": first_loss, "loss": full_loss, "accuracy": accuracy}
    if worker.is_leader:
        Path(worker.checkpoint_dir / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
