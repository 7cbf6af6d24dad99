"""The worker library: what a training script imports to run under a Halyard agent.

A script wraps its iteration loop and names a checkpoint function::

    from halyard.agent.worker import Worker

    worker = Worker(checkpoint=lambda done: save(state, done))   # done = iterations finished
    state = load() if worker.resuming else fresh()
    for step in worker.iterations():                              # total from the agent
        train_one_step(state, step)

and that is all (docs/worker.md has a complete example). The worker

* reads who it is from the environment the agent sets (``HALYARD_*``, below);
* reports every iteration (its index, its duration and, optionally, the bytes it
  communicated: :meth:`Worker.add_bytes`) to the agent over the local Unix
  socket named by ``HALYARD_AGENT_SOCKET``;
* delays the start of the next iteration to honour the time-shift the agent
  passes on (Cassini): iteration starts are kept on a grid
  ``epoch + shift + k x period`` of the *cluster* clock (:mod:`halyard.timeshift`),
  shared by every worker on every node -- a shift of 0 is a real shift -- and
  when a start drifts off the grid by more than :data:`DRIFT_TOLERANCE` of a
  period it waits for the next grid point (drift correction, as Cassini's
  agents re-apply their shift); each iteration report carries the measured
  drift of its start, which the agent passes on in ``Progress``;
* on preemption (SIGTERM from the agent, or a ``preempt`` message) finishes the
  iteration under way, calls the checkpoint function and exits with status 0,
  well inside the agent's grace period;
* also checkpoints every ``checkpoint_every`` iterations (if given) and after the
  last one, and records the iteration of its last completed checkpoint in
  ``HALYARD_CHECKPOINT_DIR/halyard-checkpoint.json``, so a resumed attempt starts
  exactly where the checkpoint it loads ends.

Outside Halyard (no ``HALYARD_AGENT_SOCKET``) the same script runs on its own:
nothing is reported and nothing is delayed.

Environment (set by the process and gpu backends of ``halyard agent``):

==========================  =======================================================
HALYARD_JOB_ID              the job's id
HALYARD_ATTEMPT             launch number of this run (1, 2, ... after preemptions)
HALYARD_NODE                this node's name
HALYARD_RANK                this process's rank (the node's index in the allocation)
HALYARD_WORLD_SIZE          processes in the job (one per allocated node)
HALYARD_MASTER_ADDR/PORT    rendezvous address: the leader (rank 0) node's host
HALYARD_CHECKPOINT_DIR      where to save and load checkpoints (same for every attempt)
HALYARD_START_ITERATION     the control plane's last checkpointed iteration
HALYARD_ITERATIONS_TOTAL    iterations the whole job runs
HALYARD_AGENT_SOCKET        Unix socket of the local agent
HALYARD_TIME_SHIFT          the time-shift at launch, if any: ``seconds,period_s,epoch_s``
HALYARD_TIME_SHIFT_S        the shift's seconds alone (older agents; 0 there means none)
HALYARD_CLOCK               cluster clock: ``wall_origin_unix_s,cluster_origin_s,speedup``
HALYARD_CPUS, HALYARD_MEMORY_MB  the CPU cores and memory this node's share has
HALYARD_GPUS                GPU indices of this node's share (also CUDA_VISIBLE_DEVICES on gpu)
HALYARD_NUM_GPUS            GPUs the whole job holds now (changes when it is resized)
HALYARD_LOGICAL_WORKERS     the job's logical workers (EasyScale ESTs; else one per GPU)
HALYARD_RANK_WORKERS        logical workers this process runs, time-sliced on its GPUs
HALYARD_GPU_WORKERS         logical workers per GPU of this share, aligned with HALYARD_GPUS
HALYARD_WORKER_OFFSET       global index of this process's first logical worker
==========================  =======================================================

``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` are set too, so
``torch.distributed.init_process_group("env://")`` works unchanged.

Wire format (one JSON object per line). Worker to agent: ``hello`` (job_id,
attempt, rank, pid), ``iteration`` (index, duration_s, bytes, and drift_s --
the start's signed offset from its grid point, cluster seconds -- when a shift
is set), ``checkpoint`` (iteration), ``done`` (iterations), ``preempted``
(checkpoint). Agent to worker: ``time_shift`` (seconds, optional period_s and
epoch_s), ``preempt`` (grace_s), ``resources`` (cpus, memory_mb).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from halyard.timeshift import DRIFT_TOLERANCE, drift_s, grid_wait_s

log = logging.getLogger("halyard.worker")

EWMA_WEIGHT = 0.2  # weight of the newest iteration in the measured period
MARKER = "halyard-checkpoint.json"
CLOSE_WAIT_S = 1.0  # wall seconds to wait for the agent to finish reading before the socket closes


class ClusterClock:
    """Cluster time from ``HALYARD_CLOCK`` (the control plane's clock parameters); wall time without it."""

    def __init__(self, spec: str | None = None) -> None:
        self.wall_origin, self.cluster_origin, self.speedup = 0.0, 0.0, 1.0
        if spec:
            wall, cluster, speedup = (float(x) for x in spec.split(","))
            self.wall_origin, self.cluster_origin, self.speedup = wall, cluster, speedup or 1.0

    def now(self) -> float:
        return self.cluster_origin + (time.time() - self.wall_origin) * self.speedup

    def to_wall(self, cluster_s: float) -> float:
        return cluster_s / self.speedup


class Pacer:
    """Keeps iteration starts on the grid ``epoch + shift + k x period`` of the cluster clock.

    ``wait_s(now)`` says how long (cluster seconds) to wait before starting the
    next iteration: right after a new shift, until the next grid point; after
    that nothing while the start is within ``DRIFT_TOLERANCE`` of a period of
    its grid point, until the grid point when it is early, and until the next
    grid point when it has drifted late (:func:`halyard.timeshift.grid_wait_s`).
    ``shift`` is None without a shift; 0.0 is a shift.
    """

    def __init__(self) -> None:
        self.shift: float | None = None
        self.epoch = 0.0
        self.period: float | None = None  # cluster seconds; from the agent, else measured
        self.fixed_period = False
        self._realign = False

    def set_shift(self, seconds: float, period_s: float | None = None, epoch_s: float = 0.0) -> None:
        self.shift = seconds
        self.epoch = epoch_s
        if period_s:
            self.period, self.fixed_period = period_s, True
        self._realign = True

    @property
    def anchor(self) -> float | None:
        """The grid's origin, ``epoch + shift`` (None without a shift)."""
        return None if self.shift is None else self.epoch + self.shift

    def drift_s(self, start: float) -> float | None:
        """Signed offset of an iteration that started at ``start`` from its grid point (None without one)."""
        if self.shift is None or not self.period:
            return None
        return drift_s(start, self.epoch + self.shift, self.period)

    def observe(self, iteration_s: float) -> None:
        if self.fixed_period or iteration_s <= 0:
            return
        self.period = iteration_s if self.period is None else (
            EWMA_WEIGHT * iteration_s + (1 - EWMA_WEIGHT) * self.period)

    def wait_s(self, now: float) -> float:
        if self.shift is None or not self.period:
            return 0.0
        anchor = self.epoch + self.shift
        if self._realign:  # a new shift: the next grid point, however close
            self._realign = False
            return (self.period - (now - anchor) % self.period) % self.period
        return grid_wait_s(now, anchor, self.period, DRIFT_TOLERANCE)


class Worker:
    """The script's side of an agent; see the module docstring."""

    def __init__(self, checkpoint: Callable[[int], None] | None = None, *, checkpoint_every: int = 0,
                 env: Mapping[str, str] | None = None, handle_sigterm: bool = True) -> None:
        env = os.environ if env is None else env
        self.checkpoint_fn = checkpoint
        self.checkpoint_every = checkpoint_every
        self.job_id = env.get("HALYARD_JOB_ID", "local")
        self.attempt = int(env.get("HALYARD_ATTEMPT", "1"))
        self.rank = int(env.get("HALYARD_RANK", "0"))
        self.world_size = int(env.get("HALYARD_WORLD_SIZE", "1"))
        self.master_addr = env.get("HALYARD_MASTER_ADDR", "127.0.0.1")
        self.master_port = int(env.get("HALYARD_MASTER_PORT", "29500"))
        self.checkpoint_dir = Path(env.get("HALYARD_CHECKPOINT_DIR", "checkpoints"))
        total = env.get("HALYARD_ITERATIONS_TOTAL")
        self.total = int(total) if total else None
        self.cpus = int(env.get("HALYARD_CPUS", "0")) or None
        self.memory_mb = int(env.get("HALYARD_MEMORY_MB", "0")) or None
        # Elastic jobs (EasyScale §3.2): the job's size now and the logical workers this process
        # runs; a resize restarts the script with new values, the logical workers' total stays.
        self.num_gpus = int(env.get("HALYARD_NUM_GPUS", "1"))
        self.logical_workers = int(env.get("HALYARD_LOGICAL_WORKERS", "0")) or self.num_gpus
        self.rank_workers = int(env.get("HALYARD_RANK_WORKERS", "0")) or self.logical_workers // self.world_size
        counts = env.get("HALYARD_GPU_WORKERS", "")
        self.gpu_workers = tuple(int(c) for c in counts.split(",")) if counts else (self.rank_workers,)
        self.worker_offset = int(env.get("HALYARD_WORKER_OFFSET", "0"))
        self.clock = ClusterClock(env.get("HALYARD_CLOCK"))
        self.pacer = Pacer()
        if env.get("HALYARD_TIME_SHIFT"):  # present = a shift, 0 s included
            seconds, period, epoch = (float(x) for x in env["HALYARD_TIME_SHIFT"].split(","))
            self.pacer.set_shift(seconds, period or None, epoch)
        elif env.get("HALYARD_TIME_SHIFT_S") and float(env["HALYARD_TIME_SHIFT_S"]):
            self.pacer.set_shift(float(env["HALYARD_TIME_SHIFT_S"]))  # an older agent: 0 meant none
        self.start_iteration = self._start_iteration(env)
        self.last_checkpoint = self.start_iteration
        self.preempt_requested = threading.Event()
        self._bytes = 0
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._listener: threading.Thread | None = None
        path = env.get("HALYARD_AGENT_SOCKET")
        if path:
            self._connect(path)
        if handle_sigterm and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, lambda *_: self.preempt_requested.set())

    @property
    def resuming(self) -> bool:
        """Whether an earlier attempt left a checkpoint to load."""
        return self.start_iteration > 0

    @property
    def is_leader(self) -> bool:
        return self.rank == 0

    @property
    def logical_ranks(self) -> range:
        """Global indices of the logical workers this process runs (each one's data shard and seed)."""
        return range(self.worker_offset, self.worker_offset + self.rank_workers)

    def _start_iteration(self, env: Mapping[str, str]) -> int:
        """The iteration the last completed checkpoint ends at: the marker file, else the control plane's figure."""
        marker = self.checkpoint_dir / MARKER
        try:
            return int(json.loads(marker.read_text(encoding="utf-8"))["iteration"])
        except (OSError, ValueError, KeyError, TypeError):
            return int(float(env.get("HALYARD_START_ITERATION", "0")))

    # --- the loop -------------------------------------------------------------

    def iterations(self, total: int | None = None, *, start: int | None = None) -> Iterator[int]:
        """Yield iteration indices from the resume point to ``total``; report, pace and stop on preemption."""
        total = total if total is not None else self.total
        if total is None:
            raise ValueError("iterations(): no total given and HALYARD_ITERATIONS_TOTAL is not set")
        i = self.start_iteration if start is None else start
        while i < total:
            if self.preempt_requested.is_set():
                self._stop(i)
            wait = self.pacer.wait_s(self.clock.now())
            if wait > 0 and self.preempt_requested.wait(self.clock.to_wall(wait)):
                self._stop(i)
            drift = self.pacer.drift_s(self.clock.now())
            began = time.perf_counter()
            yield i
            i += 1
            took = time.perf_counter() - began
            self.pacer.observe(took * self.clock.speedup)
            with self._lock:
                sent, self._bytes = self._bytes, 0
            report = {"type": "iteration", "index": i, "duration_s": took, "bytes": sent}
            if drift is not None:
                report["drift_s"] = drift
            self._send(report)
            if self.checkpoint_every and i % self.checkpoint_every == 0 and i < total:
                self.checkpoint(i)
        if i > self.last_checkpoint:
            self.checkpoint(i)
        self._send({"type": "done", "iterations": i})
        self.close()  # nothing more to report; close cleanly rather than at exit

    def add_bytes(self, n: int) -> None:
        """Bytes this iteration communicated (reported with the iteration)."""
        with self._lock:
            self._bytes += n

    def checkpoint(self, done: int) -> None:
        """Call the script's checkpoint function for ``done`` finished iterations and record it."""
        if self.checkpoint_fn is not None:
            self.checkpoint_fn(done)
        if self.is_leader:
            self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
            tmp = self.checkpoint_dir / (MARKER + ".tmp")
            tmp.write_text(json.dumps({"iteration": done, "job_id": self.job_id, "attempt": self.attempt}),
                           encoding="utf-8")
            tmp.replace(self.checkpoint_dir / MARKER)  # atomic: a kill never leaves half a marker
        self.last_checkpoint = done
        self._send({"type": "checkpoint", "iteration": done})

    def _stop(self, done: int) -> None:
        """Preempted: checkpoint what is finished and leave (status 0)."""
        if done > self.last_checkpoint:
            self.checkpoint(done)
        self._send({"type": "preempted", "checkpoint": self.last_checkpoint})
        self.close()
        sys.exit(0)

    # --- the socket -------------------------------------------------------------

    def _connect(self, path: str) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
        except OSError as exc:
            log.warning("halyard worker: cannot reach the agent at %s (%s); running unreported", path, exc)
            sock.close()
            return
        self._sock = sock
        self._send({"type": "hello", "job_id": self.job_id, "attempt": self.attempt, "rank": self.rank,
                    "pid": os.getpid()})
        self._listener = threading.Thread(target=self._listen, args=(sock,), name="halyard-worker", daemon=True)
        self._listener.start()

    def _send(self, message: dict) -> None:
        if self._sock is None:
            return
        data = (json.dumps(message, separators=(",", ":")) + "\n").encode()
        with self._lock:
            try:
                self._sock.sendall(data)
            except OSError:
                self._sock = None  # the agent went away; keep training, stop reporting

    def _listen(self, sock: socket.socket) -> None:
        with sock.makefile("r", encoding="utf-8") as lines:
            try:
                for line in lines:
                    self._on_message(json.loads(line))
            except (OSError, ValueError):
                return

    def _on_message(self, message: dict) -> None:
        kind = message.get("type")
        if kind == "time_shift":
            self.pacer.set_shift(float(message["seconds"]), message.get("period_s"),
                                 float(message.get("epoch_s") or 0.0))
        elif kind == "preempt":
            self.preempt_requested.set()
        elif kind == "resources":
            self.cpus = message.get("cpus") or self.cpus
            self.memory_mb = message.get("memory_mb") or self.memory_mb

    def close(self) -> None:
        with self._lock:
            sock, self._sock = self._sock, None
        if sock is not None:
            # Half-close and let the listener read to the end before closing: closing a Unix socket
            # with unread data (a `preempt` the agent sent as it signalled us) resets the connection,
            # and the agent could lose our last messages (the checkpoint).
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_WR)
            if self._listener is not None and self._listener is not threading.current_thread():
                self._listener.join(CLOSE_WAIT_S)
            sock.close()


def clock_env(wall_origin_unix_s: float, cluster_origin_s: float, speedup: float) -> str:
    """The value of ``HALYARD_CLOCK`` for these clock parameters."""
    return f"{wall_origin_unix_s!r},{cluster_origin_s!r},{speedup!r}"


def time_shift_env(seconds: float, period_s: float, epoch_s: float) -> str:
    """The value of ``HALYARD_TIME_SHIFT`` for this shift."""
    return f"{seconds!r},{period_s!r},{epoch_s!r}"


__all__ = ["DRIFT_TOLERANCE", "ClusterClock", "Pacer", "Worker", "clock_env", "time_shift_env"]
