"""When will my job start? The live state run forward by the simulator's machinery.

The control plane's :class:`SchedulingCore` -- jobs with their progress, the resource ledger
(which nodes are up: an agent connected and not drained), the event log and the policy object
with all its state (Dally's delay timers, Tiresias' queues and attained service, Synergy's
leases, Crius' cells, EasyScale's mappings) -- is the core the simulator drives on a virtual
clock. So a copy of it, taken between two passes, can be run forward with no new arrivals
until every job present has ended; each job's simulated start and finish is its forecast.

How the copy is taken: ``os.fork``. The event loop forks between passes (a pass is synchronous
code, so the child's memory is a consistent snapshot of everything, policy state included) and
goes on at once; the child runs the forward simulation on its copy-on-write memory and sends
back only the per-job times through a pipe. So neither the snapshot nor the forward run blocks
the scheduling loop beyond the fork itself (milliseconds), and nothing has to be picklable:
policies keep sorted structures keyed by closures over their own state, which a pickle or a
``deepcopy`` could not copy faithfully. Each further run of the same snapshot (a sampled
arrival run, a what-if's two sides) is a fork of the child, so each starts from the same state.

What the forward run assumes (documented in docs/forecast.md):

* no new arrivals by default; with ``samples`` K > 0, K more runs each draw Poisson arrivals at
  the recent arrival rate (jobs submitted in the last ``arrival_window_s``) with specs drawn from
  those recent jobs, and the p10/p90 of each job's start and finish over them is its band. A run
  draws arrivals only until every present job has started in it (later ones move no start) and none
  after :func:`arrival_limit`, so a burst rate above what the cluster serves cannot grow its queue
  without end;
* running jobs keep the rate the control plane has for them (the performance model's, or what a
  real agent last measured) and the model's rates after every change, as in ``simulate``;
* no node fails, drains or comes back during the run;
* stage profilings (Crius) come from the performance model, not from agents (the forward run
  cannot ask them).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import math
import os
import pickle
import random
import signal
import struct
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import structlog

from halyard.controlplane.errors import FailedPrecondition
from halyard.datamodel import Cluster, EventKind, Fabric, JobEvent, JobSpec, JobState, Node, ValidationError
from halyard.datamodel import limits as lim
from halyard.policies import make_policy
from halyard.scheduling.core import SchedulingCore
from halyard.scheduling.simulator import SimulatedPool
from halyard.scheduling.state import StoredState
from halyard.scheduling.timing import Pacer, performance_model_for

if TYPE_CHECKING:
    from halyard.controlplane.service import ControlPlane

log = structlog.get_logger("halyard.forecast")

T = TypeVar("T")

# How far past the snapshot a forward run goes, cluster seconds, before it gives up on the jobs
# not yet ended (a job that never fits, a policy that never starts it). A choice of ours: longer
# than the longest Philly job (about 60 days).
DEFAULT_HORIZON_S = 90 * 86400.0
# Sampled arrivals: the jobs submitted this long before the snapshot give the rate and the mix
# (a choice of ours: a day covers the diurnal cycle of Philly's and Helios' submissions), and at
# least this many of the latest submissions are used when the window holds fewer.
DEFAULT_ARRIVAL_WINDOW_S = 86400.0
MIN_ARRIVAL_SAMPLE = 20
# The rate is measured over at least this span, cluster seconds (a choice of ours): a burst of submissions
# at one instant says little about the rate, and would otherwise make an unbounded one.
MIN_RATE_SPAN_S = 3600.0
MAX_SAMPLED_ARRIVALS = 20_000  # per sampled run: bounds its cost whatever the rate
ON_DEMAND_GAP_S = 1.0  # wall seconds between two on-demand refreshes at most (a choice of ours)
DEFAULT_PERIOD_S = 60.0  # --forecast-period-s: a forecast refreshed once a minute (0: only on demand)
SAMPLED_PREFIX = "forecast-sample-"  # ids of sampled arrivals (never shown: only present jobs are reported)
BAND = (10.0, 50.0, 90.0)  # percentiles of the band over sampled runs: its low end, middle, high end
TOP_MOVES = 5  # what-if: the jobs whose start moves most, this many
MAX_ADDED_NODES = 1000  # what-if: nodes one change may add (a choice of ours: about three philly clusters' worth)
MAX_NODE_GPUS = 64  # GPUs of an added node (a choice of ours: the largest servers sold hold 8 to 16)
MAX_NODE_CPUS = 4096  # CPU cores of an added node (a choice of ours, far above any server)
MAX_NODE_MEMORY_MB = 64 * 1000 * 1000  # 64 TB: above any server's memory (a choice of ours)
MAX_NODE_GBYTE_S = 10_000.0  # fabric and NIC bandwidth of an added node, GB/s (a choice of ours)

# Event kinds of the simulator's heap, in the order it handles them at one instant (simulator.py).
_COMPLETION, _ARRIVAL, _ROUND = 0, 1, 2
_ENDED = (EventKind.COMPLETED, EventKind.FAILED, EventKind.CANCELLED)


class ForecastError(FailedPrecondition):
    """A forward run could not be made (the fork failed, or the child died)."""


# --- running a function on a copy of this process -------------------------------------------------


def _child(fn: Callable[[], T], write_fd: int) -> None:
    """In the forked child: run ``fn``, pickle ``(ok, result)`` to the pipe, exit without cleanup."""
    code = 0
    _die_with_parent()
    try:
        try:
            payload = pickle.dumps((True, fn()), protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException as exc:  # reported to the parent, which raises it
            payload = pickle.dumps((False, f"{type(exc).__name__}: {exc}"))
            code = 1
        with os.fdopen(write_fd, "wb") as out:
            out.write(struct.pack("<Q", len(payload)))
            out.write(payload)
    finally:
        os._exit(code)  # never return into the parent's code (its event loop, its atexit handlers)


def _die_with_parent() -> None:
    """Linux: the kernel kills this child when its parent dies, so no forecast outlives its control plane."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def _start_fork(fn: Callable[[], T]) -> tuple[int, int]:
    """Fork; the child runs ``fn`` on its copy of this process's memory. Returns (pid, read fd)."""
    if not hasattr(os, "fork"):
        raise ForecastError("forecasts need os.fork (a POSIX system)")
    read_fd, write_fd = os.pipe()
    try:
        pid = os.fork()
    except OSError as exc:
        os.close(read_fd)
        os.close(write_fd)
        raise ForecastError(f"cannot fork for a forecast: {exc}") from None
    if pid == 0:  # pragma: no cover - the child's coverage is not collected
        os.close(read_fd)
        _child(fn, write_fd)
    os.close(write_fd)
    return pid, read_fd


def _finish_fork(pid: int, read_fd: int) -> Any:
    """Read the child's answer (blocking), reap it, return its result or raise what it raised.

    The result is whatever the child's function returned, unpickled: its type is the caller's
    (:func:`in_fork`'s ``T``), which nothing in the pipe carries."""
    with os.fdopen(read_fd, "rb") as pipe:
        head = pipe.read(8)
        data = pipe.read(struct.unpack("<Q", head)[0]) if len(head) == 8 else b""
    os.waitpid(pid, 0)
    if not data:
        raise ForecastError("the forecast process died without an answer")
    ok, result = pickle.loads(data)  # our own child's bytes, through our own pipe
    if not ok:
        raise ForecastError(f"the forecast failed: {result}")
    return result


def in_fork(fn: Callable[[], T]) -> T:
    """``fn()`` run on a copy-on-write copy of this process; this process's state is untouched."""
    return _finish_fork(*_start_fork(fn))


async def in_fork_async(fn: Callable[[], T], children: set[int] | None = None) -> T:
    """:func:`in_fork` for the event loop: the fork is the only part on the loop (the snapshot);
    waiting for the answer runs in a thread, so passes and calls go on meanwhile. The child's pid
    is in ``children`` while it runs (to be killed on shutdown: :meth:`Forecaster.stop`)."""
    pid, read_fd = _start_fork(fn)
    if children is not None:
        children.add(pid)
    try:
        return await asyncio.get_running_loop().run_in_executor(None, _finish_fork, pid, read_fd)
    finally:
        if children is not None:
            children.discard(pid)


# --- the forward run ---------------------------------------------------------------------------------


@dataclass
class Outcome:
    """One forward run: when each job present at the snapshot (next) starts and when it ends."""

    starts: dict[str, float] = field(default_factory=dict)  # pending at the snapshot -> its next start
    finishes: dict[str, float] = field(default_factory=dict)  # present -> when it ends (completes, fails, ...)
    passes: int = 0
    events: int = 0
    end_time: float = 0.0
    cpu_s: float = 0.0  # CPU seconds of the run (its process's)
    arrived: int = 0  # sampled arrivals submitted during the run


def run_forward(core: SchedulingCore, pacer: Pacer, now: float, *, arrivals: Iterator[JobSpec] | None = None,
                pass_first: bool = False, horizon_s: float = DEFAULT_HORIZON_S,
                until_started: bool = False) -> Outcome:
    """Run ``core`` forward from ``now`` until every job present has ended (or ``horizon_s`` passed);
    with ``until_started``, until every job present has started (only starts are asked).

    ``arrivals`` are drawn only while some job present has not started yet in this run: the run is
    causal (a start at ``t`` is decided by a pass that has seen only the events up to ``t``), so an
    arrival after the last present job's start cannot move any present job's start. Once they have
    all started no more are drawn (the one drawn ahead is dropped) and the run goes on without
    arrivals, so it ends even when the arrival rate is above what the cluster serves.

    Destructive: call it on a copy (:func:`in_fork`). The loop is the simulator's
    (:class:`~halyard.scheduling.simulator.Simulator`): completions, then arrivals, then a round
    at one instant, then one pass; ``pacer`` is the control plane's own, whose fabric already holds
    the running jobs. ``pass_first`` makes a pass at ``now`` before any event (a what-if's change
    is such an event); a plain forecast makes none, as the live control plane would not.
    """
    cpu = time.process_time()
    core.profiles = None  # no agents to ask: stage profilings from the performance model
    core.log.quiet()  # the live observers (metrics, recorders) are the parent's business
    policy = core.policy
    out = Outcome()
    remaining = set(core.running) | {r.job_id for r in core.pending}
    pending_now = {r.job_id for r in core.pending}
    unstarted = set(pending_now)  # present jobs that have neither started nor ended in this run
    seen, passes0 = len(core.log), core.passes
    heap: list[tuple[float, int, int, str, int]] = []
    seq = 0

    def push(when: float, kind: int, job_id: str, epoch: int) -> None:
        nonlocal seq
        if math.isfinite(when):
            seq += 1
            heapq.heappush(heap, (max(when, now), kind, seq, job_id, epoch))

    pool = SimulatedPool(core, core.perf, push)
    pool.pacer = pacer  # the live one: its fabric knows the running jobs and their co-runners
    for record in core.running.values():  # a finish the control plane has not heard of yet is due now
        push(record.finish_time(), _COMPLETION, record.job_id, record.epoch)
    specs: dict[str, JobSpec] = {}

    def next_arrival() -> None:
        spec = next(arrivals, None) if arrivals is not None and unstarted else None
        if spec is not None:
            specs[spec.job_id] = spec
            push(spec.submit_time, _ARRIVAL, spec.job_id, 0)

    def note(t: float) -> None:
        nonlocal seen
        for event in core.log.since(seen):
            if event.job_id not in remaining:
                continue
            if event.kind is EventKind.STARTED and event.job_id in pending_now:
                out.starts.setdefault(event.job_id, event.time)
                unstarted.discard(event.job_id)
            elif event.kind in _ENDED:
                out.finishes[event.job_id] = event.time
                remaining.discard(event.job_id)
                unstarted.discard(event.job_id)
        seen = len(core.log)
        out.end_time = t

    next_arrival()
    if pass_first and (core.pending or policy.acts_without_pending):
        pool.execute(core.schedule(now), now)
        note(now)
    round_at = math.inf
    t = now
    while unstarted if until_started else remaining:
        waiting = core.pending or (policy.acts_without_pending and core.running)
        if policy.needs_rounds and waiting and round_at == math.inf:
            round_at = (math.floor(t / core.round_s) + 1) * core.round_s
            push(round_at, _ROUND, "", 0)
        if not heap or heap[0][0] > now + horizon_s:
            break
        t = heap[0][0]
        changed = False
        while heap and heap[0][0] == t:
            _, kind, _, job_id, epoch = heapq.heappop(heap)
            out.events += 1
            if kind == _COMPLETION:
                record = core.records[job_id]
                if record.epoch == epoch and record.state is JobState.RUNNING:
                    core.complete(job_id, t)
                    changed = True
            elif kind == _ARRIVAL:
                spec = specs.pop(job_id)
                if not unstarted:  # drawn ahead, due after every present job started: changes no start
                    continue
                with contextlib.suppress(ValidationError):  # a sampled job the core refuses is skipped
                    core.submit(spec, t)
                    out.arrived += 1
                    changed = True
                next_arrival()
            else:
                round_at = math.inf
                changed = True
        if changed and (core.pending or policy.acts_without_pending):
            pool.execute(core.schedule(t), t)
        note(t)
    out.passes = core.passes - passes0
    out.cpu_s = time.process_time() - cpu
    return out


# --- sampled arrivals ----------------------------------------------------------------------------------


def recent_specs(core: SchedulingCore, now: float, window_s: float = DEFAULT_ARRIVAL_WINDOW_S
                 ) -> tuple[list[JobSpec], float]:
    """The jobs submitted in the last ``window_s`` (at least the latest ``MIN_ARRIVAL_SAMPLE``) and
    their arrival rate per second (0 with fewer than two jobs)."""
    records = list(core.records.values())  # arrival order
    recent = [r.spec for r in records if r.spec.submit_time >= now - window_s]
    if len(recent) < MIN_ARRIVAL_SAMPLE:
        recent = [r.spec for r in records[-MIN_ARRIVAL_SAMPLE:]]
    if len(recent) < 2:
        return recent, 0.0
    return recent, len(recent) / max(now - recent[0].submit_time, MIN_RATE_SPAN_S)


def sampled_arrivals(mix: Sequence[JobSpec], rate_per_s: float, now: float, seed: int,
                     until: float = math.inf) -> Iterator[JobSpec]:
    """Poisson arrivals at ``rate_per_s`` from ``now`` up to ``until``, each a copy of a job drawn
    from ``mix``."""
    if rate_per_s <= 0.0 or not mix:
        return
    draw = random.Random(seed)
    t = now
    for i in range(MAX_SAMPLED_ARRIVALS):
        t += draw.expovariate(rate_per_s)
        if t > until:
            return
        yield replace(draw.choice(mix), job_id=f"{SAMPLED_PREFIX}{seed}-{i}", submit_time=t)


# --- forecasts -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobForecast:
    """One job's forecast, cluster seconds. ``start`` is None for a job already running (or one that
    does not start within the horizon); the band is set only with sampled arrivals."""

    start: float | None
    finish: float | None
    start_band: tuple[float, float, float] | None = None  # p10, p50, p90 over the sampled runs
    finish_band: tuple[float, float, float] | None = None


@dataclass(frozen=True)
class Forecast:
    made_at: float  # cluster time of the snapshot
    made_wall: float  # time.time() then
    jobs: Mapping[str, JobForecast]
    samples: int  # sampled-arrival runs behind the bands (0: none)
    passes: int  # of the no-arrival run
    events: int
    cpu_s: float  # CPU seconds of every run together

    def __getitem__(self, job_id: str) -> JobForecast | None:
        return self.jobs.get(job_id)


def _band(values: list[float]) -> tuple[float, float, float] | None:
    if not values:
        return None
    low, middle, high = np.percentile(values, BAND)
    return float(low), float(middle), float(high)


def arrival_limit(base: Outcome, now: float, sample_horizon_s: float | None) -> float:
    """The latest instant a sampled arrival may come: ``now + sample_horizon_s`` when given, else the
    no-arrival run's (``base``) last start of a present job (``now`` when none starts in it:
    none waits, or none fits).

    Within each sampled run arrivals stop anyway once every present job has started
    (:func:`run_forward`: later ones move no start). This bound is for the runs where arrivals keep a
    present job waiting -- a policy that lets new jobs overtake (Dally, Tiresias, SRTF) at an arrival
    rate above what the cluster serves -- whose queue would otherwise grow until ``MAX_SAMPLED_ARRIVALS``
    and whose run could then take minutes. It leaves out the arrivals after the no-arrival forecast's
    last start, which could delay further a present job that the sampled arrivals had already pushed
    past it: there the band's high end is a lower bound.
    """
    if sample_horizon_s is not None:
        return now + sample_horizon_s
    return max(base.starts.values(), default=now)


def sampled_runs(core: SchedulingCore, pacer: Pacer, now: float, base: Outcome, samples: int, *,
                 arrival_window_s: float = DEFAULT_ARRIVAL_WINDOW_S, horizon_s: float = DEFAULT_HORIZON_S,
                 seed: int = 0, sample_horizon_s: float | None = None, until_started: bool = False) -> list[Outcome]:
    """``samples`` sampled-arrival runs of ``core``, each on its own fork: arrivals at the recent rate and
    mix (:func:`recent_specs`) up to :func:`arrival_limit` of the no-arrival run ``base``."""
    if samples <= 0:
        return []
    mix, rate = recent_specs(core, now, arrival_window_s)
    until = arrival_limit(base, now, sample_horizon_s)

    def sample(k: int) -> Outcome:
        return run_forward(core, pacer, now, horizon_s=horizon_s, until_started=until_started,
                           arrivals=sampled_arrivals(mix, rate, now, seed + k, until))
    return [in_fork(functools.partial(sample, k)) for k in range(samples)]


def forecast_of(core: SchedulingCore, pacer: Pacer, now: float, *, samples: int = 0,
                arrival_window_s: float = DEFAULT_ARRIVAL_WINDOW_S, horizon_s: float = DEFAULT_HORIZON_S,
                seed: int = 0, sample_horizon_s: float | None = None, sample_finishes: bool = True) -> Forecast:
    """The forecast of every present job: one no-arrival run and ``samples`` sampled-arrival runs, each
    on its own fork of this process (so ``core`` is left as it is). Sampled arrivals come no later than
    :func:`arrival_limit`; without ``sample_finishes`` the sampled runs stop once every present job has
    started (no finish band)."""
    made_wall = time.time()
    base = in_fork(lambda: run_forward(core, pacer, now, horizon_s=horizon_s))
    runs = sampled_runs(core, pacer, now, base, samples, arrival_window_s=arrival_window_s, horizon_s=horizon_s,
                        seed=seed, sample_horizon_s=sample_horizon_s, until_started=not sample_finishes)
    present = list(core.running) + [r.job_id for r in core.pending]
    jobs: dict[str, JobForecast] = {}
    for job_id in present:
        start_band = finish_band = None
        if runs:
            start_band = _band([o.starts[job_id] for o in runs if job_id in o.starts])
            if sample_finishes:
                finish_band = _band([o.finishes[job_id] for o in runs if job_id in o.finishes])
        jobs[job_id] = JobForecast(base.starts.get(job_id), base.finishes.get(job_id), start_band, finish_band)
    return Forecast(now, made_wall, jobs, samples, base.passes, base.events,
                    base.cpu_s + sum(o.cpu_s for o in runs))


# --- what-if --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """What an operator is about to do; applied to a copy only."""

    policy: str = ""
    drain: tuple[str, ...] = ()
    undrain: tuple[str, ...] = ()
    cancel: tuple[str, ...] = ()
    add_nodes: tuple[NewNode, ...] = ()

    def describe(self, added: Sequence[Node] = ()) -> str:
        """e.g. "switching to tiresias and adding r3-n8 (8 A100)"; ``added``: the nodes as resolved."""
        parts = []
        if self.policy:
            parts.append(f"switching to {self.policy}")
        for verb, names in (("draining", self.drain), ("undraining", self.undrain), ("cancelling", self.cancel)):
            if names:
                parts.append(f"{verb} {', '.join(names)}")
        if added:
            shown = [f"{n.name} ({n.gpus} {n.gpu_type})" for n in added[:3]]
            more = f" and {len(added) - 3} more" if len(added) > 3 else ""
            parts.append(f"adding {', '.join(shown)}{more}")
        return " and ".join(parts) or "no change"


@dataclass(frozen=True)
class NewNode:
    """A node a what-if adds (``--add-node``): the fields of the cluster file's ``[[racks.nodes]]``
    (docs/cluster-format.md) in the units the cluster keeps. Empty or 0: as the rack's first node;
    an empty rack: the cluster's last; an empty name: ``{rack}-n{i}``, the first ``i`` not taken."""

    rack: str = ""
    name: str = ""
    gpu_type: str = ""
    gpus: int = 0
    cpus: int = 0
    memory_mb: int = 0
    fabric: str = ""
    fabric_gbyte_s: float = 0.0
    nic_gbyte_s: float = 0.0


def grown_cluster(cluster: Cluster, added: Sequence[NewNode], gpu_types: Sequence[str]
                  ) -> tuple[Cluster, tuple[Node, ...]]:
    """``cluster`` with the ``added`` nodes (and the nodes as resolved), or a :class:`ValidationError` whose
    field names the node and the key (``add_node[1].gpu_type``). The new nodes come after every node
    of the cluster (each node keeps its index, so running jobs' allocations hold) and join their racks;
    ``gpu_types`` are the performance model's (a node of another type could run nothing)."""
    if len(added) > MAX_ADDED_NODES:
        raise ValidationError(f"adds {len(added)} nodes; at most {MAX_ADDED_NODES}", field="add_node")
    racks = {r.name: r for r in cluster.racks}
    taken = {n.name for n in cluster.nodes} | set(racks)
    nodes, members = list(cluster.nodes), {r.name: list(r.node_indices) for r in cluster.racks}
    for i, new in enumerate(added):
        where = f"add_node[{i}]"
        rack = racks.get(new.rack or cluster.racks[-1].name)
        if rack is None:
            names = [r.name for r in cluster.racks]
            shown = ", ".join(names[:8]) + (f", ... {names[-1]}" if len(names) > 8 else "")
            raise ValidationError(f"no rack {new.rack!r} in cluster {cluster.name!r} (its racks: {shown})",
                                  field=f"{where}.rack")
        like = cluster.nodes[rack.node_indices[0]]
        name = new.name
        if name:
            lim.check_name(name, f"{where}.name", lim.MAX_REQUEST_ID)
            if name in taken:
                raise ValidationError(f"{name!r} is already a node or rack of the cluster (or added twice)",
                                      field=f"{where}.name")
        else:
            name = next(n for k in range(len(members[rack.name]), 10**9)
                        if (n := f"{rack.name}-n{k}") not in taken)
        gpu_type = new.gpu_type or like.gpu_type
        if gpu_type not in gpu_types:
            raise ValidationError(f"unknown GPU type {gpu_type!r} (the model catalog has: {', '.join(gpu_types)})",
                                  field=f"{where}.gpu_type")
        try:
            fabric = Fabric(new.fabric.lower()) if new.fabric else like.fabric
        except ValueError:
            raise ValidationError(f"unknown fabric {new.fabric!r} (one of: {', '.join(f.value for f in Fabric)})",
                                  field=f"{where}.fabric") from None
        gpus, cpus = new.gpus or like.gpus, new.cpus or like.cpus
        memory_mb = new.memory_mb or like.memory_mb
        fabric_gbyte_s, nic_gbyte_s = new.fabric_gbyte_s or like.fabric_gbyte_s, new.nic_gbyte_s or like.nic_gbyte_s
        lim.check_int(gpus, f"{where}.gpus", 1, MAX_NODE_GPUS)
        lim.check_int(cpus, f"{where}.cpus", 1, MAX_NODE_CPUS)
        lim.check_int(memory_mb, f"{where}.memory_mb", 1, MAX_NODE_MEMORY_MB)
        lim.check_number(fabric_gbyte_s, f"{where}.fabric_gbyte_s", 1e-9, MAX_NODE_GBYTE_S)
        lim.check_number(nic_gbyte_s, f"{where}.nic_gbyte_s", 1e-9, MAX_NODE_GBYTE_S)
        taken.add(name)
        members[rack.name].append(len(nodes))
        nodes.append(Node(name=name, rack=rack.name, index=len(nodes), rack_index=rack.index, gpu_type=gpu_type,
                          gpus=gpus, cpus=cpus, memory_mb=memory_mb, fabric=fabric, fabric_gbyte_s=fabric_gbyte_s,
                          nic_gbyte_s=nic_gbyte_s))
    grown = Cluster(name=cluster.name, racks=tuple(replace(r, node_indices=tuple(members[r.name]))
                                                   for r in cluster.racks),
                    nodes=tuple(nodes), spine_oversubscription=cluster.spine_oversubscription,
                    description=cluster.description, quotas=cluster.quotas, switches=cluster.switches,
                    links=cluster.links)
    return grown, tuple(nodes[len(cluster.nodes):])


@dataclass(frozen=True)
class Summary:
    """Average and p99 wait and JCT (cluster seconds) over the jobs present at the snapshot."""

    policy: str
    jobs: int
    unfinished: int  # jobs that did not end within the horizon (left out of the JCT figures)
    avg_wait_s: float
    p99_wait_s: float
    avg_jct_s: float
    p99_jct_s: float


@dataclass(frozen=True)
class Move:
    job_id: str
    start_before: float | None
    start_after: float | None
    finish_before: float | None
    finish_after: float | None


@dataclass(frozen=True)
class WhatIf:
    made_at: float
    change: str
    today: Summary
    changed: Summary
    moves: tuple[Move, ...]


def _summary(core: SchedulingCore, policy: str, out: Outcome, now: float, present: list[str]) -> Summary:
    waits, jcts, unfinished = [], [], 0
    for job_id in present:
        record = core.records[job_id]
        submit = record.spec.submit_time
        start = record.first_start if record.first_start is not None else out.starts.get(job_id)
        waits.append((start if start is not None else out.end_time) - submit)
        if job_id in out.finishes:
            jcts.append(out.finishes[job_id] - submit)
        else:
            unfinished += 1

    def stats(xs: list[float]) -> tuple[float, float]:
        return (float(np.mean(xs)), float(np.percentile(xs, 99))) if xs else (0.0, 0.0)

    return Summary(policy, len(present), unfinished, *stats(waits), *stats(jcts))


def check_change(cp: ControlPlane, change: Change) -> None:
    """Refuse a change that names what is not there, before anything runs (INVALID_ARGUMENT / NOT_FOUND)."""
    if change.policy:
        make_policy(change.policy)  # raises ValidationError naming the field
    for name in (*change.drain, *change.undrain):
        if not cp.cluster.has_node(name):
            raise ValidationError(f"no node {name!r} in cluster {cp.cluster.name!r}", field="drain")
    for job_id in change.cancel:
        record = cp.core.records.get(job_id)
        if record is None or record.state.terminal:
            raise ValidationError(f"no pending or running job {job_id!r}", field="cancel")
    if change.add_nodes:
        grown_cluster(cp.cluster, change.add_nodes, cp.core.perf.gpu_types())


def _apply(cp: ControlPlane, change: Change, now: float) -> tuple[SchedulingCore, Pacer, tuple[Node, ...]]:
    """In a fork: the core and pacer of the changed cluster (this process's own are changed), and the
    nodes the change adds."""
    core, pacer = cp.core, cp.pacer
    for job_id in change.cancel:
        core.cancel(job_id, now)
    for name in change.drain:
        core.free.schedulable[cp.cluster.node(name).index] = False
    for name in change.undrain:  # up again if its agent is connected (a drain keeps nothing else down)
        session = cp.sessions.get(name)
        core.free.schedulable[cp.cluster.node(name).index] = session is not None and not session.silent
    added: tuple[Node, ...] = ()
    if change.policy or change.add_nodes:
        # A new policy, or a cluster with more nodes (a ledger and cluster facts of another size): a new
        # core rebuilt from the copy's jobs and events, as a restart from the store does. A new policy
        # starts with fresh state of its own; with the same policy, the policy object (its timers,
        # queues, leases) moves over to the new core.
        cluster = core.cluster
        if change.add_nodes:
            cluster, added = grown_cluster(cluster, change.add_nodes, core.perf.gpu_types())
        policy = make_policy(change.policy) if change.policy else core.policy
        perf = performance_model_for(policy) if change.policy else core.perf
        fresh = SchedulingCore(cluster, policy, perf, round_s=core.round_s, round_slack_s=core.round_slack_s)
        fresh.origin_s = core.origin_s
        fresh.restore(StoredState(list(core.records.values()), list(core.log), {}))
        fresh.free.schedulable[:len(core.free.schedulable)] = core.free.schedulable  # added nodes: up
        pacer = Pacer(fresh, fresh.perf)
        pacer._seen_events = 0  # a fresh fabric learns every running job from the log
        pacer.update([], now)
        core = fresh
    return core, pacer, added


def what_if_of(cp: ControlPlane, change: Change, now: float, *, horizon_s: float = DEFAULT_HORIZON_S) -> WhatIf:
    """Today's forecast and the changed cluster's, each on its own fork (``cp`` is left as it is)."""
    present = list(cp.core.running) + [r.job_id for r in cp.core.pending]
    before = in_fork(lambda: run_forward(cp.core, cp.pacer, now, horizon_s=horizon_s))

    def changed() -> tuple[Outcome, str, str]:
        core, pacer, added = _apply(cp, change, now)
        return (run_forward(core, pacer, now, pass_first=True, horizon_s=horizon_s), core.policy.name,
                change.describe(added))

    after, policy, described = in_fork(changed)
    moves = []
    for job_id in present:
        a, b = before.starts.get(job_id), after.starts.get(job_id)
        if job_id in change.cancel or (a is None and b is None):
            continue
        moves.append(Move(job_id, a, b, before.finishes.get(job_id), after.finishes.get(job_id)))

    def shift(m: Move) -> float:
        if m.start_before is None or m.start_after is None:
            return math.inf
        return abs(m.start_after - m.start_before)

    moves.sort(key=shift, reverse=True)
    kept = [j for j in present if j not in change.cancel]
    return WhatIf(now, described, _summary(cp.core, cp.core.policy.name, before, now, kept),
                  _summary(cp.core, policy, after, now, kept),
                  tuple(m for m in moves[:TOP_MOVES] if shift(m) > 0.0))


# --- the control plane's forecaster ----------------------------------------------------------------------


@dataclass(frozen=True)
class ForecastSettings:
    period_s: float = DEFAULT_PERIOD_S  # 0: only on demand
    samples: int = 0  # K sampled-arrival runs for the band (0: none)
    arrival_window_s: float = DEFAULT_ARRIVAL_WINDOW_S
    horizon_s: float = DEFAULT_HORIZON_S
    sample_horizon_s: float | None = None  # sampled arrivals up to now + this (None: :func:`arrival_limit`)
    sample_finishes: bool = True  # False: sampled runs stop once every present job has started (no finish band)


class Forecaster:
    """Keeps the latest forecast of a live control plane: refreshed every ``period_s`` and on demand,
    each refresh a fork (:func:`in_fork_async`) that the event loop does not wait for."""

    def __init__(self, cp: ControlPlane, settings: ForecastSettings | None = None) -> None:
        self.cp = cp
        self.settings = settings or ForecastSettings()
        self.latest: Forecast | None = None
        self._running: asyncio.Future[Forecast] | None = None
        self._task: asyncio.Task[None] | None = None
        self._asked = -math.inf  # loop time of the last on-demand refresh
        self._spawned: asyncio.Task[None] | None = None
        self._started: set[str] = set()  # jobs whose first start was already scored
        self._children: set[int] = set()  # forecast processes running now
        self.on_error: Callable[[float], None] | None = None  # metrics: |actual - forecast| start, seconds
        cp.core.log.observe(self._on_event)

    def start(self) -> None:
        if self.settings.period_s > 0:
            self._task = asyncio.get_running_loop().create_task(self._periodic(), name="forecast")

    async def stop(self) -> None:
        for pid in self._children:  # a forecast under way ends now (its own children follow: PDEATHSIG)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for task in (self._task, self._spawned):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _periodic(self) -> None:
        while True:
            try:
                await self.refresh()
            except ForecastError as exc:
                log.warning("forecast failed", error=str(exc))
            await asyncio.sleep(self.settings.period_s)

    async def refresh(self) -> Forecast:
        """A new forecast (one already under way is shared, not started twice)."""
        if self._running is not None:
            return await asyncio.shield(self._running)
        future: asyncio.Future[Forecast] = asyncio.get_running_loop().create_future()
        self._running = future
        try:
            forecast = await self._make()
        except asyncio.CancelledError:
            future.cancel()
            raise
        except Exception as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning when nobody else waits
            raise
        finally:
            self._running = None
        self.latest = forecast
        future.set_result(forecast)
        log.info("forecast made", jobs=len(forecast.jobs), passes=forecast.passes, events=forecast.events,
                 cpu_s=round(forecast.cpu_s, 3), samples=forecast.samples)
        return forecast

    def instant(self) -> float:
        """The snapshot's cluster time. A live control plane's state is its clock's now. In lockstep
        (``halyard replay``) the core handles each instant's events when the accelerated clock has
        passed it, and a busy machine (a forecast child takes a core) lets the clock run ahead: the
        core's state is then that of the newest instant it handled (its latest event or pass), and the
        forward run starts there, going through the events due since in order, as the core will
        (the replay lockstep's own :meth:`~halyard.controlplane.replay_lockstep.Lockstep.instant`)."""
        cp = self.cp
        return cp.sync.instant(cp.now())  # a live control plane's Lockstep answers the clock's now

    async def _make(self) -> Forecast:
        cp, s = self.cp, self.settings
        now = self.instant()
        return await in_fork_async(lambda: forecast_of(cp.core, cp.pacer, now, samples=s.samples,
                                                      arrival_window_s=s.arrival_window_s,
                                                      horizon_s=s.horizon_s, sample_horizon_s=s.sample_horizon_s,
                                                      sample_finishes=s.sample_finishes), self._children)

    async def what_if(self, change: Change) -> WhatIf:
        check_change(self.cp, change)
        cp = self.cp
        now = cp.now()
        return await in_fork_async(lambda: what_if_of(cp, change, now, horizon_s=self.settings.horizon_s),
                                   self._children)

    def refresh_soon(self) -> None:
        """On demand, without waiting: a refresh unless one is under way or one began within
        ``ON_DEMAND_GAP_S`` (a burst of GetJob calls for new jobs makes one forecast, not many)."""
        loop = asyncio.get_running_loop()
        if self._running is not None or loop.time() - self._asked < ON_DEMAND_GAP_S:
            return
        self._asked = loop.time()
        self._spawned = loop.create_task(self._quietly(), name="forecast-on-demand")

    async def _quietly(self) -> None:
        try:
            await self.refresh()
        except ForecastError as exc:
            log.warning("forecast failed", error=str(exc))

    def of(self, job_id: str) -> JobForecast | None:
        return None if self.latest is None else self.latest[job_id]

    def start_of(self, job_id: str) -> float | None:
        """The job's expected start in the latest forecast (None: running, or not in it)."""
        mine = self.of(job_id)
        return None if mine is None else mine.start

    def wall_time(self, t: float) -> float:
        """Unix time of cluster time ``t`` on the control plane's clock (1:1 for a manual clock)."""
        params = self.cp.clock.params()
        speedup = params.speedup if params.kind == "scaled" and params.speedup > 0 else 1.0
        return time.time() + (t - self.cp.clock.now()) / speedup

    def _on_event(self, event: JobEvent) -> None:
        """Score a job's forecast start once it really starts (its first start after a forecast)."""
        if event.kind is not EventKind.STARTED or self.latest is None or event.job_id in self._started:
            return
        predicted = self.latest[event.job_id]
        if predicted is None or predicted.start is None:
            return
        self._started.add(event.job_id)
        if self.on_error is not None:
            self.on_error(abs(event.time - predicted.start))
