"""Dally (Sharma et al.): delay scheduling over network tiers, auto-tuned delay timers,
and the network-sensitivity (Nw_sens) priority with preemption.

Paper: shared/papers/dally-network-sensitive-scheduling.txt. What each piece is:

* **Delay scheduling** (§4.3.2, Algorithm 1, :func:`delay_decision`). Jobs are
  offered the free GPUs in priority order. A job takes a placement on one
  machine whenever one is free (lines 5-8); otherwise it rejects offers until
  its *machine timer* has elapsed since its last resource assignment (lines
  10-11), then takes a placement inside one rack (13-16); otherwise it rejects
  until its *rack timer* has elapsed (18-19), then takes any placement (21).
  A job larger than a machine has a zero machine timer, one larger than a rack
  both timers zero. Timers count from the job's last resource assignment
  (``JobInfo.last_assignment_time``: when it last got or lost GPUs), or from
  its submission if it never ran.
* **Auto-tuner** (§4.3.3, Algorithm 2, :class:`AutoTuner`). Every acceptance at
  machine or rack level appends the job's starvation time to the list of that
  (level, GPU demand) (Algorithm 1 lines 7 and 15); a timer is the list's mean
  plus two sample standard deviations (Algorithm 2 lines 13-14,
  :func:`tuned_timer`), over the waits recorded within the history limit
  (lines 2-6, 8-12). Dally-manual uses fixed timers instead
  (:class:`ManualTimers`, the paper's 12 h + 12 h).
* **Nw_sens** (§4.3.1, :func:`nw_sens`). ``W_compl / T_norm`` with ``W_compl =
  I_compl / I_total`` and ``T_norm = T_run / T_total_ideal_run``,
  ``T_total_ideal_run`` = compute-only seconds per iteration x ``I_total``. Low
  means the job has been slowed (by the network, or by restarts); offers are
  made in increasing Nw_sens.
* **Preemption** (§4.3.1, §4.3.2: "network-sensitive job preemption"; resource
  offers in increasing Nw_sens, and a preempted job "is reintroduced into the wait
  queue"). The paper names the priority, not a victim rule; as written here a
  waiting job whose offer fails may preempt running jobs of *higher* Nw_sens (lower
  priority), worst (highest) Nw_sens first, when that frees a placement the job
  accepts now (a machine; a rack once its machine timer has elapsed; any GPUs once
  its rack timer has). A victim checkpoints and pays the performance model's
  restart cost when it resumes.

Five rules of Halyard's own, none in the paper, are named options, off in the
paper's ``dally`` and ``dally-manual`` (registered as ``+migrate``, ``+worse-half``,
``+hysteresis``, ``+lease`` and ``+reauction``; ``dally+migrate+worse-half+hysteresis`` is Halyard's earlier
Dally, docs/dally-reproduction.md measures each against the paper's version; the auto-tuner
has two more, ``+drop-short-waits`` and ``+manual-start``, on :class:`AutoTuner`):

* ``migrate``: a running job slowed by its placement (Nw_sens below ``1 - min_gain``)
  whose GPUs span more racks or machines than its size needs is re-placed on one rack
  or one machine when the free GPUs, its own and those of victims allow it (a
  ``Migrate``: checkpoint and restart). The closest the paper comes is its reference
  simulator's lease-end re-auction, which the paper does not describe (``lease`` below).
* ``worse_half``: victims (and movers) only among the jobs in the worse (higher) half
  of the Nw_sens range. Earlier attributed to a "priority gradient" of the reference
  simulator; neither the paper nor REFERENCE-NUMBERS has it.
* ``min_gain`` (``+hysteresis`` sets :data:`MIN_GAIN`): a victim must be at least this
  far above the beneficiary's Nw_sens, so that two jobs a hair apart do not swap GPUs.
* ``lease`` (``+lease``): the reading of the reference simulator's leases (§4.1: "The
  scheduler then periodically generates resource offers"; a preempted job "is reintroduced
  into the wait queue"), which the paper does not spell out. A running job's lease ends every
  ``lease_rounds`` rounds after its last resource assignment (:data:`LEASE_ROUNDS`, our
  choice: the round, as REFERENCE-NUMBERS reads the reference simulator's timer unit); the
  first pass at or after the end re-offers its GPUs. Jobs whose lease ended are offered, in
  increasing Nw_sens with the waiting jobs, the free GPUs, their own, and those of other
  lease-ended jobs of higher Nw_sens: a job keeps running where it is when that is as
  consolidated as what it is offered, moves (a ``Migrate``) when it is offered one machine or
  one rack where it spans more, and a lease-ended job whose GPUs a job of lower Nw_sens takes
  is preempted back into the wait queue (its starvation restarts, Algorithm 1 lines 1-2).
  Between lease ends nothing moves. The reference simulator itself (aakash-sharma/cluster-sim,
  read and run beside Halyard in docs/dally-public-comparison.md) goes further: at every lease
  end it takes back every job's GPUs, whatever it is offered, and never-run jobs bid first
  (Nw_sens 0); this option gives its placements, not its waits (``reauction`` below is that reading).

* ``reauction`` (``+reauction``): the reading the authors' simulator runs (aakash-sharma/cluster-sim,
  read from its code in docs/dally-public-comparison.md; the paper's §4.1 "periodically generates
  resource offers" and §4.3.2 "reintroduced into the wait queue"). At every lease end
  (``lease_rounds`` rounds after the job's last resource assignment, as ``lease``), **every**
  lease-ended running job gives all its GPUs back (``IntraJobScheduler.endIteration`` once
  ``GPU.assignGPU``'s lease has expired) and bids for the free GPUs again with the waiting jobs,
  in increasing Nw_sens, **a job that never ran at 0** and so first
  (``DallyIntraJobScheduler.prepareMultiBid``, ``PerGPUBidComparator``). Its starvation restarts at
  the lease end (the simulator's last assignment is reset by the release): it takes one machine,
  or a rack or any GPUs only where its size forces them (zero timers, §4.3.2); a job of lower
  Nw_sens may take its GPUs first. It keeps running where it is when it gets the same GPUs, moves
  (a ``Migrate``) when it gets others, and is preempted back into the wait queue when it gets
  none (``DallyInterJobScheduler.consolidatedGPUAllocation``). Not kept: the simulator's 1 s per
  GPU of checkpointing before released GPUs come back (``CHECKPOINTING_OVERHEAD_PER_GPU``), its
  ties (fewer GPUs held, earlier assignment; here submission, arrival) and its first-fit machine
  order (hash-map order; here Halyard's placement). ``+reauction`` switches the Nw_sens
  preemption between lease ends off, as the simulator has none: jobs lose GPUs only at lease ends.

Two more of the reference simulator's semantics are options on ``+reauction``, in
policies/dally_clustersim.py: ``+staggered`` (a lease end's jobs released one at a time, each release
an auction of what is free then) and ``+hoard`` (running jobs bid between their lease ends and hold
what they win, unused, until they finish: a side effect of its iteration bookkeeping).

``+no-preemption`` (a measurement option, not a rule) switches the Nw_sens preemption off: the
reference simulator preempts nobody between lease ends, so the side-by-side runs Halyard's
``dally-manual+no-preemption`` beside it with no lease ends.

Why Dally is its own :class:`~halyard.policies.stages.Policy` and not a
:class:`~halyard.policies.staged.StagedPolicy`: an offer is accepted or rejected
by the job itself, from its own timers and from the auto-tuner's lists, which
change as earlier jobs of the same pass accept; and preemption here is
placement-aware (the victims must free one machine or one rack for one given
job), where the staged preemptive pass only balances GPU counts. Its parts are
still stages of the contract: :class:`NwSensOrdering` (ordering),
:class:`DelayScheduling` (placement) and :class:`NwSensPreemption` (the
preemption stage, Kubernetes' PostFilter); :class:`DallyPass` is one pass of
them, one method per step (the offer order, Algorithm 1's offer, the
preemption, the acceptance), its per-pass caches its fields.

Never-run jobs have no measured slowdown; they get Nw_sens = 1 (what an
unslowed job has) rather than the undefined 0/0. So newly arrived jobs never
preempt, and a preempted, network-slowed job is offered GPUs before them.

All state (the auto-tuner's lists) lives in the policy instance and is a
function of the sequence of views of applied passes; nothing reads a clock. A
pass records its acceptances in its :class:`PassState` (later jobs of the same
pass see them, as Algorithm 1 records as it goes) and the tuner keeps them only
once the core has applied the plan (``on_applied``).

A job that is offered GPUs and rejects them, or cannot be offered enough, gets
a reason in the plan: a delay timer that has not elapsed is
``WAITING_BY_POLICY`` (Kubernetes' Wait), too few GPUs free ``CANNOT_FIT_NOW``.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import takewhile
from typing import TYPE_CHECKING, Protocol

import numpy as np

from halyard.datamodel import Allocation, Cluster, JobSpec, ValidationError
from halyard.policies.adjusting import adjust, applied, rejected
from halyard.policies.facts import ClusterFacts, ClusterShape, GpuTypes
from halyard.policies.passstate import PassState
from halyard.policies.placement import build_allocation, no_fit, usable_gpus
from halyard.policies.plan import Plan
from halyard.policies.reasons import Unplaced, by_policy, cannot_fit
from halyard.policies.resources import FreeResources
from halyard.policies.running_sens import RunningNwSens
from halyard.policies.stages import Adjuster, Ordering, Placement, Preemption
from halyard.policies.topology import Level, Picked, level_of, on_machine, on_network, on_rack
from halyard.policies.view import ClusterView, JobInfo, allocation_of
from halyard.policies.waiting_sens import WaitingOrder

if TYPE_CHECKING:
    from halyard.policies.dally_clustersim import HoardedGpus
HOARD_REAUCTION_KEY = "dally/hoard-reauction"  # PassState: a lease end of +hoard, which bid as it went

HOUR_S = 3600.0
# Dally §4.3.2: "a default value of 12 hours for machine-level consolidation and another
# 12 hours (or 24 hours in total) for rack-level consolidation".
MANUAL_MACHINE_TIMER_S = 12 * HOUR_S
MANUAL_RACK_TIMER_S = 12 * HOUR_S
# REFERENCE-NUMBERS, Dally's reference simulator: auto-tuned timers are floored at 6 leases
# (waiting for a machine before a rack is taken) and 12 leases (before the network), and
# capped by the history window. A lease is the round length of the view.
MACHINE_FLOOR_LEASES = 6
RACK_FLOOR_LEASES = 12
# Algorithm 2's HISTORY_TIME_LIMIT, read as the age of a recorded wait (§4.3.3: "in larger
# clusters, a smaller history time limit is advised ... because more jobs get placed over
# time in a large cluster"). The paper gives no value; Halyard's default is a week, long
# enough to learn multi-day waits on a contended cluster (docs/dally-reproduction.md).
HISTORY_LIMIT_S = 7 * 24 * HOUR_S
# The "size of the wait-time list" (§4.3.3): the most recent acceptances kept per list.
HISTORY_WINDOW = 100
# Preemption hysteresis of the ``+hysteresis`` option (Halyard's choice, not in the paper; see the
# module docstring): a victim's Nw_sens must exceed the beneficiary's by at least this much.
MIN_GAIN = 0.05
# ``+lease`` (Halyard's reading of the reference simulator, not in the paper): a lease lasts this
# many rounds of the view. Our choice: one round, the unit REFERENCE-NUMBERS gives the reference
# simulator's timers in ("delay timers counted in lease units"), which the floors above read as
# the round too.
LEASE_ROUNDS = 1
LEASES_KEY = "dally/lease-ends"  # PassState: job id -> (last assignment, lease index) seen this pass
# JobStatics keeps entries of finished jobs until they outnumber the live ones twice over plus this
# many (a bound on its memory; the figure only sets how often it is swept).
PRUNE_SLACK = 1024


def tuned_timer(waits: Sequence[float]) -> float | None:
    """Algorithm 2 lines 13-14: ``mean + 2 x sample standard deviation`` of ``waits``.

    None for an empty list; a single wait has no spread, so it is the timer
    itself. E.g. ``[2, 4, 6]`` -> mean 4, sample std 2 -> 8.
    """
    n = len(waits)
    if n == 0:
        return None
    mean = math.fsum(waits) / n
    if n == 1:
        return mean
    var = math.fsum((w - mean) ** 2 for w in waits) / (n - 1)
    return mean + 2.0 * math.sqrt(var)


# An acceptance of this pass, not yet recorded: (level, GPU demand, starvation s, when, lease s).
Acceptance = tuple[Level, int, float, float, float]
ACCEPTANCES_KEY = "dally/acceptances"  # PassState: this pass's acceptances, in order
TIMERS_KEY = "dally/timers"  # PassState: (demand, its acceptances so far) -> (T_Mc, T_Rk)
ACCEPTED_KEY = "dally/accepted"  # PassState: demand -> acceptances of that demand so far


class TimerSource(Protocol):
    """Where the (machine, rack) delay timers of a GPU demand come from."""

    name: str

    def timers(self, demand: int, lease_s: float, now: float,
               tentative: Sequence[Acceptance] = ()) -> tuple[float, float]:
        """(T_Mc, T_Rk): seconds of starvation before a rack, resp. network, placement is taken,
        counting the pass's ``tentative`` acceptances as recorded. Only the acceptances of the same
        ``demand`` may count (Algorithm 2 keeps a list per level and demand): a pass works the timers
        out once per demand and number of its acceptances."""
        ...

    def record(self, level: Level, demand: int, wait_s: float, now: float, lease_s: float = 0.0) -> None:
        """At ``now`` a job of ``demand`` GPUs accepted a ``level`` placement after ``wait_s`` of starvation
        (``lease_s``: the round of the view)."""
        ...


@dataclass(frozen=True)
class ManualTimers:
    """Dally-manual: fixed timers, ``machine_s`` then ``rack_s`` more (§4.3.2, §5.1.3).

    T_Rk is cumulative (Algorithm 1 compares it with the whole starvation time),
    so the paper's 12 h + 12 h is (12 h, 24 h).
    """

    machine_s: float = MANUAL_MACHINE_TIMER_S
    rack_s: float = MANUAL_RACK_TIMER_S
    name = "manual-timers"

    def timers(self, demand: int, lease_s: float, now: float,
               tentative: Sequence[Acceptance] = ()) -> tuple[float, float]:
        return self.machine_s, self.machine_s + self.rack_s

    def record(self, level: Level, demand: int, wait_s: float, now: float, lease_s: float = 0.0) -> None:
        return None


@dataclass
class AutoTuner:
    """Algorithm 2: delay timers from the wait times of past acceptances, per (level, GPU demand).

    * a wait recorded more than ``history_limit_s`` ago leaves its list (lines 2-6,
      8-12), and a timer never exceeds the limit (REFERENCE-NUMBERS: "capped by
      the history window");
    * a list keeps at most the ``window`` most recent waits (the "size of the
      wait-time list");
    * timer = mean + 2 sample std (:func:`tuned_timer`), floored at
      ``machine_floor_leases`` / ``rack_floor_leases`` rounds (Dally's reference
      simulator); an empty list gives the floor;
    * T_Rk is at least T_Mc (it is compared with the same, cumulative, starvation).
    """

    history_limit_s: float = HISTORY_LIMIT_S
    window: int = HISTORY_WINDOW
    machine_floor_leases: float = MACHINE_FLOOR_LEASES
    rack_floor_leases: float = RACK_FLOOR_LEASES
    # Options, off by default (not in the paper; docs/dally-reproduction.md measures them).
    # ``lease_waits`` (``+drop-short-waits``): record only waits of at least one lease, as the
    # reference simulator does (aakash-sharma/cluster-sim, DallyInterJobScheduler.setDemandDelay:
    # waits in leases, "if (delay < 1) return"); the paper records every acceptance's wait.
    # ``manual_start`` (``+manual-start``, our reading): an empty list gives §4.3.2's defaults
    # (12 h, 24 h) instead of the floors, as the tuned timers' starting point.
    lease_waits: bool = False
    manual_start: bool = False
    lists: dict[tuple[Level, int], deque[tuple[float, float]]] = field(default_factory=dict)
    # (demand, lease s, the tuner's settings) -> what its timers were worked out from, and the timers
    # (see timers()).
    _kept: dict[tuple[object, ...], tuple[tuple[object, ...], tuple[float, float]]] = field(
        default_factory=dict, repr=False, compare=False)
    name = "auto-tuner"

    def record(self, level: Level, demand: int, wait_s: float, now: float, lease_s: float = 0.0) -> None:
        if level is Level.NETWORK:
            return  # Algorithm 1 line 21 records nothing
        if self.lease_waits and wait_s < lease_s:
            return
        waits = self.lists.get((level, demand))
        if waits is None:
            waits = self.lists[(level, demand)] = deque(maxlen=self.window)
        waits.append((now, max(0.0, wait_s)))

    def waits(self, level: Level, demand: int, now: float, tentative: Sequence[Acceptance] = ()) -> list[float]:
        """The list of (level, demand) at ``now``: waits recorded within the history limit, the
        ``tentative`` ones of the running pass appended (the last ``window`` of all of them)."""
        waits = self.lists.get((level, demand))
        while waits and now - waits[0][0] > self.history_limit_s:
            waits.popleft()
        listed = [w for _, w in waits] if waits else []
        extra = [max(0.0, w) for lv, d, w, _, lease_s in tentative if lv is level and d == demand
                 and not (self.lease_waits and w < lease_s)]
        return (listed + extra)[-self.window:] if extra else listed

    def timers(self, demand: int, lease_s: float, now: float,
               tentative: Sequence[Acceptance] = ()) -> tuple[float, float]:
        """Kept from the last call for the same demand and lease while neither list has changed (the
        same deque, length and newest entry: an append makes a new tuple, and expiry shortens it), no
        wait of either list has expired at ``now`` (the check :meth:`waits` makes) and no ``tentative``
        acceptance is of this demand (issue 19: on a loaded trace each pass asked every waiting demand's
        timers afresh, the same figures from the same lists pass after pass)."""
        if any(d == demand for _, d, _, _, _ in tentative):
            return self._timers(demand, lease_s, now, tentative)
        key = (demand, lease_s, self.history_limit_s, self.window, self.machine_floor_leases,
               self.rack_floor_leases, self.lease_waits, self.manual_start)
        kept = self._kept.get(key)
        if kept is not None and self._unchanged(demand, now, kept[0]):
            return kept[1]
        found = self._timers(demand, lease_s, now, tentative)
        self._kept[key] = (self._basis(demand), found)
        return found

    def _basis(self, demand: int) -> tuple[object, ...]:
        """What the lists of ``demand`` are now: each deque (or None), its length and its newest entry."""
        out: list[object] = []
        for level in (Level.MACHINE, Level.RACK):
            waits = self.lists.get((level, demand))
            out += (waits, len(waits) if waits else 0, waits[-1] if waits else None)
        return tuple(out)

    def _unchanged(self, demand: int, now: float, basis: tuple[object, ...]) -> bool:
        """Whether the lists of ``demand`` are as ``basis`` says and none has a wait expired at ``now``."""
        for i, level in enumerate((Level.MACHINE, Level.RACK)):
            waits = self.lists.get((level, demand))
            if waits is not basis[3 * i] or (len(waits) if waits else 0) != basis[3 * i + 1]:
                return False
            if waits and (waits[-1] is not basis[3 * i + 2] or now - waits[0][0] > self.history_limit_s):
                return False
        return True

    def _timers(self, demand: int, lease_s: float, now: float,
                tentative: Sequence[Acceptance] = ()) -> tuple[float, float]:
        mc = self._timer(Level.MACHINE, demand, self.machine_floor_leases * lease_s, now, tentative,
                         MANUAL_MACHINE_TIMER_S)
        rk = self._timer(Level.RACK, demand, self.rack_floor_leases * lease_s, now, tentative,
                         MANUAL_MACHINE_TIMER_S + MANUAL_RACK_TIMER_S)
        return mc, max(rk, mc)

    def _timer(self, level: Level, demand: int, floor: float, now: float, tentative: Sequence[Acceptance],
               manual: float) -> float:
        tuned = tuned_timer(self.waits(level, demand, now, tentative))
        if tuned is None:
            tuned = manual if self.manual_start else floor
        return min(max(tuned, floor), max(self.history_limit_s, floor))


def nw_sens(job: JobInfo, now: float, compute_s: float) -> float:
    """§4.3.1: ``Nw_sens = W_compl / T_norm`` (1.0 for a job that never ran).

    ``W_compl = I_compl / I_total``; ``T_norm = T_run / T_total_ideal_run`` with
    ``T_total_ideal_run = compute_s x I_total`` (compute only, no communication).
    """
    run = job.run_time_s(now)
    total = job.iterations_total
    if run <= 0.0 or total <= 0:
        return 1.0
    return (job.iterations_done(now) / total) / (run / (compute_s * total))


def ideal_compute_s(view: ClusterView, job: JobInfo) -> float:
    """§4.3.1's compute time per iteration "on a single GPU": one figure per job, on its reference
    type (its constraint, else the fastest type it fits; :meth:`ClusterFacts.reference_compute_s`),
    so a job's Nw_sens does not change with where it sits."""
    return view.facts.reference_compute_s(job.spec)


# Where a running job's GPUs are, by allocation: job id -> (allocation, (node -> GPUs, rack -> GPUs)).
Spreads = dict[str, tuple[Allocation, tuple[dict[int, int], dict[int, int]]]]


@dataclass(frozen=True, slots=True)
class JobStatic:
    """What Dally reads of a job that depends on its spec and the cluster alone."""

    spec: JobSpec
    gpu_types: GpuTypes  # view.gpu_types_for(spec)
    machine: int  # GPUs of the largest node of those types
    rack: int  # GPUs of the largest rack of those types
    compute_s: float  # :func:`ideal_compute_s`, Nw_sens's ideal seconds per iteration


class JobStatics:
    """Each job's :class:`JobStatic`, worked out once per job instead of once per pass, and where a
    running job's GPUs are (GPUs per node and per rack), once per allocation.

    Issue 19: on a loaded trace every pass computes the Nw_sens of every running job and the
    timers of every waiting one, and looking these figures up in :class:`ClusterFacts`' memo
    (a key of five spec fields per call) was a third of that; a preemption's search located
    every victim afresh in every pass. An entry serves a job only while its spec (its
    allocation) is the very object it was made from, and only for the facts (cluster and
    performance model) it was made with, so it always equals what the lookup gives.
    """

    __slots__ = ("_entries", "_facts", "_spreads")

    def __init__(self) -> None:
        self._facts: ClusterFacts | None = None
        self._entries: dict[str, JobStatic] = {}
        self._spreads: Spreads = {}

    def entries(self, view: ClusterView) -> dict[str, JobStatic]:
        """The entries for ``view``'s facts, by job id, for a caller's own loop (check the spec as
        :meth:`of` does; ask :meth:`of` for a missing or stale one)."""
        if view.facts is not self._facts:
            self._facts, self._entries, self._spreads = view.facts, {}, {}
        return self._entries

    def of(self, view: ClusterView, job: JobInfo) -> JobStatic:
        entries = self.entries(view)
        spec = job.spec
        entry = entries.get(job.job_id)
        if entry is None or entry.spec is not spec:
            types = view.gpu_types_for(spec)
            machine, rack = view.shape.largest(types)
            entry = entries[job.job_id] = JobStatic(spec, types, machine, rack, ideal_compute_s(view, job))
        return entry

    def spreads(self, view: ClusterView) -> Spreads:
        """Job id -> (allocation, (GPUs per node index, GPUs per rack index)) for ``view``'s cluster,
        filled by :class:`_Victim`."""
        self.entries(view)
        return self._spreads

    def prune(self, view: ClusterView) -> None:
        """Forget jobs that are neither running nor pending, once they are most of the entries."""
        live = len(view.running) + len(view.pending)
        if len(self._entries) + len(self._spreads) > 2 * live + PRUNE_SLACK:
            keep = {*view.running, *(job.job_id for job in view.pending)}
            self._entries = {k: v for k, v in self._entries.items() if k in keep}
            self._spreads = {k: v for k, v in self._spreads.items() if k in view.running}


def delay_decision(avail: np.ndarray, shape: ClusterShape, demand: int, starvation_s: float,
                   machine_timer_s: float, rack_timer_s: float) -> tuple[Picked, Level] | None:
    """Algorithm 1 on the offer ``avail`` (usable GPUs per node): a placement and its level, or None (reject)."""
    picked = on_machine(avail, demand)                      # lines 5-9
    if picked is not None:
        return picked, Level.MACHINE
    if starvation_s < machine_timer_s:                      # lines 10-12
        return None
    picked = on_rack(avail, shape, demand)                  # lines 13-17
    if picked is not None:
        return picked, Level.RACK
    if starvation_s < rack_timer_s:                         # lines 18-20
        return None
    picked = on_network(avail, shape, demand)               # line 21 (None: the offer is too small)
    return None if picked is None else (picked, Level.NETWORK)


class _Victim:
    """A running job that may be preempted; where its GPUs are is worked out only if asked
    (most passes never look: nothing waits that a preemption would help), and kept in
    ``spreads`` (:meth:`JobStatics.spreads`) for later passes while the job keeps its allocation."""

    __slots__ = ("_cluster", "_spreads", "_where", "allocation", "gpus", "job", "sens")

    def __init__(self, job: JobInfo, sens: float, cluster: Cluster, spreads: Spreads | None = None) -> None:
        self.job, self.sens, self._cluster, self._spreads = job, sens, cluster, spreads
        self.allocation = allocation_of(job)  # the one it was made for (a kept victim serves only while it holds)
        self.gpus = self.allocation.num_gpus
        self._where: tuple[dict[int, int], dict[int, int]] | None = None

    def where(self) -> tuple[dict[int, int], dict[int, int]]:
        """(node index -> GPUs held there, rack index -> GPUs held there); shared with later passes:
        read only."""
        if self._where is None:
            allocation = allocation_of(self.job)
            known = self._spreads.get(self.job.job_id) if self._spreads is not None else None
            if known is not None and known[0] is allocation:
                self._where = known[1]
                return self._where
            per_node: dict[int, int] = {}
            per_rack: dict[int, int] = {}
            for part in allocation.nodes:
                node = self._cluster.node(part.node)
                per_node[node.index] = per_node.get(node.index, 0) + len(part.gpus)
                per_rack[node.rack_index] = per_rack.get(node.rack_index, 0) + len(part.gpus)
            self._where = (per_node, per_rack)
            if self._spreads is not None:
                self._spreads[self.job.job_id] = (allocation, self._where)
        return self._where


class _LazyVictims:
    """A pass's victims worst first, as :meth:`NwSensPreemption.listed` lists them, each :class:`_Victim` made
    only when an iteration first reaches it (issue 19: ~150 victims per list on a loaded trace, of which a
    waiting job is eligible for a handful, and ``_Victim`` objects were 6% of Dally's time). It
    iterates, tests empty and removes as the list would: the made victims, less those removed, then the
    rest in order. Its Nw_sens are in decreasing order without NaN, so the victims above a bound (those a
    job may preempt) are found by bisection (:meth:`above`).

    ``kept``: job id -> the :class:`_Victim` an earlier pass made for it, reused (with this pass's Nw_sens)
    while the job holds the same allocation, and where new ones are kept (issue 38: a loaded Philly trace
    made ~1.5M victims of the same few hundred running jobs, pass after pass)."""

    __slots__ = ("_cluster", "_jobs", "_kept", "_made", "_made_neg", "_neg", "_next", "_order", "_sens",
                 "_spreads")

    def __init__(self, jobs: list[JobInfo], order: list[int], sens: list[float], cluster: Cluster,
                 spreads: Spreads, kept: dict[str, _Victim] | None = None) -> None:
        self._jobs, self._order, self._sens = jobs, order, sens  # order[k]: the k-th victim's job; sens[k] its
        self._cluster, self._spreads, self._kept = cluster, spreads, kept
        self._made: list[_Victim] = []
        self._made_neg: list[float] = []  # -sens of each made victim: increasing, for bisection
        self._neg: list[float] | None = None  # -sens of every victim, once asked for
        self._next = 0  # how many of ``order`` are made

    def __bool__(self) -> bool:
        return bool(self._made) or self._next < len(self._order)

    def _make(self, upto: int) -> None:
        """Make the victims before position ``upto`` that are not made yet (reusing kept ones)."""
        jobs, order, sens, kept = self._jobs, self._order, self._sens, self._kept
        made, made_neg = self._made, self._made_neg
        for k in range(self._next, upto):
            job = jobs[order[k]]
            victim = None if kept is None else kept.get(job.job_id)
            if victim is None or victim.job is not job or victim.allocation is not job.allocation:
                victim = _Victim(job, sens[k], self._cluster, self._spreads)
                if kept is not None:
                    kept[job.job_id] = victim
            else:
                victim.sens = sens[k]
            made.append(victim)
            made_neg.append(-sens[k])
        self._next = max(self._next, upto)

    def __iter__(self) -> Iterator[_Victim]:
        made = self._made
        i = 0
        while True:
            if i == len(made):
                if self._next == len(self._order):
                    return
                self._make(self._next + 1)
            yield made[i]
            i += 1

    def above(self, bound: float, inclusive: bool) -> list[_Victim]:
        """The leading victims whose Nw_sens is above ``bound`` (at least ``bound`` if ``inclusive``): what
        ``takewhile`` over the victims gives, without a step per victim (issue 19: that walk was 6% of
        Dally's time on 20,000 Philly jobs compressed 8x). Negated, the Nw_sens increase (negation is
        exact, so every comparison is the one ``takewhile`` makes); a NaN ``bound`` admits none."""
        if bound != bound:
            return []
        if self._neg is None:
            self._neg = [-x for x in self._sens]
        find = bisect.bisect_right if inclusive else bisect.bisect_left
        upto = find(self._neg, -bound)  # of all the victims, removed ones too
        self._make(upto)
        return self._made[:find(self._made_neg, -bound)]

    def remove(self, victim: _Victim) -> None:
        i = self._made.index(victim)
        del self._made[i], self._made_neg[i]


Victims = list[_Victim] | _LazyVictims


def starvation(view: ClusterView, job: JobInfo) -> float:
    """Algorithm 1 lines 1-2: time since the last resource assignment (or submission)."""
    last = job.last_assignment_time
    return view.now - (job.pending_since if last is None else last)


class NwSensOrdering(Ordering):
    """§4.3.1 as an ordering stage: offers in increasing Nw_sens (never-run jobs 1.0), then arrival.

    Not preemptive: Dally's preemption is placement-aware (:class:`Dally`); this stage lets a
    pipeline order by network sensitivity with any placement (``ordering=nw-sens,...``)."""

    name = "nw-sens"
    preemptive = False
    needs_rounds = True  # Nw_sens drifts with time alone
    arrival_order = False

    def key(self, view: ClusterView, state: PassState) -> Callable[[JobInfo], tuple[float, float, int]]:
        now = view.now
        return lambda job: (nw_sens(job, now, ideal_compute_s(view, job)), job.spec.submit_time, job.arrival_seq)


class DelayScheduling(Placement):
    """Algorithm 1 as a placement stage: a job takes a machine, else (after its machine timer) a
    rack, else (after its rack timer) any GPUs; a rejected offer is ``WAITING_BY_POLICY``.

    Acceptances go into the pass's state at once (later jobs of the pass see them, lines 7
    and 15) and reach the timer source only in :meth:`on_applied`."""

    name = "delay-scheduling"

    def __init__(self, timers: TimerSource | None = None) -> None:
        self.timers: TimerSource = timers if timers is not None else AutoTuner()
        self.statics = JobStatics()  # per-job figures of the spec alone (a memo, not learning)

    def job_timers(self, view: ClusterView, job: JobInfo, state: PassState | None = None) -> tuple[float, float]:
        """(T_Mc, T_Rk) for ``job``: zero for a level its demand cannot fit (§4.3.2); with the pass's
        ``state``, counting its acceptances so far (and worked out once per demand and count of that
        demand's acceptances: issue 19, each acceptance of any demand made every demand's timers anew)."""
        demand = job.spec.num_gpus
        static = self.statics.of(view, job)
        machine, rack = static.machine, static.rack
        if demand > rack:
            return 0.0, 0.0
        if state is None:
            t_mc, t_rk = self.timers.timers(demand, view.round_s, view.now)
        else:
            tentative = state.get(ACCEPTANCES_KEY, ())
            memo = state.setdefault(TIMERS_KEY, dict)
            accepted: dict[int, int] = state.setdefault(ACCEPTED_KEY, dict)
            key = (demand, accepted.get(demand, 0))
            if key not in memo:
                memo[key] = self.timers.timers(demand, view.round_s, view.now, tentative)
            t_mc, t_rk = memo[key]
        if demand > machine:
            t_mc = 0.0
        return t_mc, t_rk

    def decide(self, view: ClusterView, job: JobInfo, free: FreeResources, state: PassState,
               offers: dict[GpuTypes, np.ndarray] | None = None,
               ) -> tuple[tuple[Picked, Level] | None, np.ndarray, float, float, float]:
        """Algorithm 1 for ``job`` on ``free``: (decision or None, usable GPUs, starvation, T_Mc, T_Rk).

        ``offers``: usable GPUs per GPU-type set on this ``free``, filled and read here; the caller
        empties it whenever ``free`` changes."""
        wait_s = starvation(view, job)
        t_mc, t_rk = self.job_timers(view, job, state)
        types = self.statics.of(view, job).gpu_types
        avail = None if offers is None else offers.get(types)
        if avail is None:
            avail = usable_gpus(free, view.shape, types)
            if offers is not None:
                offers[types] = avail
        return delay_decision(avail, view.shape, job.spec.num_gpus, wait_s, t_mc, t_rk), avail, wait_s, t_mc, t_rk

    @staticmethod
    def accept(view: ClusterView, job: JobInfo, level: Level, wait_s: float, state: PassState) -> None:
        """Algorithm 1 lines 7 and 15, tentatively: in the pass's state until the plan is applied."""
        demand = job.spec.num_gpus
        acceptances: list[Acceptance] = state.setdefault(ACCEPTANCES_KEY, list)
        acceptances.append((level, demand, wait_s, view.now, view.round_s))
        accepted: dict[int, int] = state.setdefault(ACCEPTED_KEY, dict)
        accepted[demand] = accepted.get(demand, 0) + 1

    def place(self, view: ClusterView, job: JobInfo, gpus: int, free: FreeResources,
              state: PassState) -> Allocation | Unplaced:
        decision, avail, wait_s, t_mc, t_rk = self.decide(view, job, free, state)
        if decision is None:
            return self.why(view, job, avail, wait_s, t_mc, t_rk)
        picked, level = decision
        self.accept(view, job, level, wait_s, state)
        return build_allocation(free, picked)

    def on_applied(self, view: ClusterView, plan: Plan, state: PassState) -> None:
        for level, demand, wait_s, now, lease_s in state.get(ACCEPTANCES_KEY, ()):
            self.timers.record(level, demand, wait_s, now, lease_s)
        self.statics.prune(view)

    def why(self, view: ClusterView, job: JobInfo, avail: np.ndarray | None, wait_s: float,
            t_mc: float, t_rk: float, free_total: int | None = None) -> Unplaced:
        """Why ``job`` rejected its offer (Algorithm 1 lines 10-11 and 18-19) or got none (``free_total``:
        ``view.free.total_gpus`` if the caller has it)."""
        demand = job.spec.num_gpus
        if avail is None:
            return cannot_fit(self.name, "needs {:#GPU}; {} free and no running job may be preempted for it",
                              demand, view.free.total_gpus if free_total is None else free_total)
        shape = view.shape
        if wait_s < t_mc:
            return by_policy(self.name, "delay timer: waits for one machine with {:#GPU} ({:.0f} s of its "
                             "{:.0f} s machine timer); the best machine has {} usable free", demand, wait_s,
                             t_mc, int(avail.max(initial=0)))
        if wait_s < t_rk:
            best_rack = int(np.bincount(shape.rack, weights=avail, minlength=shape.n_racks).max(initial=0))
            return by_policy(self.name, "delay timer: waits for one rack with {:#GPU} ({:.0f} s of its "
                             "{:.0f} s rack timer); the best rack has {} usable free", demand, wait_s, t_rk,
                             best_rack)
        return no_fit(self.name, view, job, demand, avail)


class _Searches:
    """A pass's preemption searches: the searches (level, demand, GPU types, eligible victims) that found
    nothing, kept while neither the free GPUs nor the victims change, so a job asking the same is
    answered at once (issue 19: 65% of the searches on a loaded trace were repeats), and each level's
    :func:`_holders`, which jobs of other demands and Nw_sens share, kept while the victims do not
    change: a start changes only what is free (:meth:`taken`). The eligible victims of any job are a
    prefix of the victims, worst first, so one level's holders serve every job: they are grown to the
    longest prefix asked for, and a search reads only the positions below its own count (issue 19:
    holders built afresh per count and after every start were 7.5% of dally's time on 20,000 Philly
    jobs compressed 8x)."""

    __slots__ = ("holders", "misses")

    def __init__(self) -> None:
        self.misses: set[tuple[Level, int, GpuTypes, int]] = set()
        self.holders: dict[Level, tuple[int, Holders]] = {}  # level -> (victims added, their holders)

    def holders_of(self, level: Level, eligible: list[_Victim]) -> Holders:
        """The holders of ``level`` of at least ``eligible`` (a prefix of the pass's victims), grown if short."""
        count, holders = self.holders.get(level, (0, None))
        if holders is None or count < len(eligible):
            holders = _holders(level, eligible, holders, count)
            self.holders[level] = (len(eligible), holders)
        return holders

    def clear(self) -> None:
        """The free GPUs and the victims changed."""
        self.misses.clear()
        self.holders.clear()

    def taken(self) -> None:
        """Only the free GPUs changed."""
        self.misses.clear()


class NwSensPreemption(Preemption):
    """§4.3.1's network-sensitive preemption as Dally's preemption stage (Kubernetes' PostFilter,
    :class:`~halyard.policies.stages.Preemption`).

    A waiting job whose offer fails (Algorithm 1 rejects it, or too few GPUs are free) may preempt
    running jobs of higher Nw_sens (a lower priority, §4.3.1), worst first, when that frees a placement
    it accepts now (module docstring, "Preemption"). Unlike the staged pass's preemption, which
    preempts victims in order until the placement succeeds, the choice is placement-aware:
    :meth:`free_for` takes the domain (one machine, one rack, the network) that needs the fewest
    preempted GPUs (:func:`_cheapest`). :meth:`victims` answers the stage contract's question for a
    staged pass.

    ``min_gain`` and ``worse_half`` are Halyard's options (``+hysteresis``, ``+worse-half``; module
    docstring). The running jobs' progress numbers are kept between passes (:class:`RunningNwSens`, a
    memo, not learning); the victims of one pass, and what its searches found, are the pass's
    (:class:`DallyPass`)."""

    name = "nw-sens"

    def __init__(self, statics: JobStatics, *, min_gain: float = 0.0, worse_half: bool = False) -> None:
        self.statics = statics  # the delay stage's per-job figures (compute seconds for Nw_sens)
        self.min_gain = min_gain
        self.worse_half = worse_half
        self.running_sens = RunningNwSens()  # running jobs' progress numbers (a memo, not learning)
        # job id -> the victim made for it, reused by later passes while it holds the same allocation (a
        # memo: _LazyVictims), for the spreads (the facts) it was made with
        self._kept: dict[str, _Victim] = {}
        self._kept_for: Spreads | None = None

    def on_applied(self, view: ClusterView, plan: Plan, state: PassState) -> None:
        self.running_sens.prune(view.running)
        if len(self._kept) > 2 * len(view.running) + PRUNE_SLACK:
            self._kept = {k: v for k, v in self._kept.items() if k in view.running}

    def sensitivity(self, view: ClusterView, job: JobInfo) -> float:
        """§4.3.1: ``job``'s Nw_sens on its reference compute time (:func:`ideal_compute_s`)."""
        return nw_sens(job, view.now, self.statics.of(view, job).compute_s)

    # ------------------------------------------------------------------ the stage contract
    def victims(self, view: ClusterView, job: JobInfo, plan: Plan, state: PassState) -> list[JobInfo]:
        """:meth:`Preemption.victims`: the running jobs ``job`` may preempt, worst (highest) Nw_sens first
        (a job that never ran is offered at 1.0, module docstring). Dally's own pass asks :meth:`free_for`
        instead, which takes among the same victims the cheapest group that frees one placement."""
        now = view.now

        def waiting_sens(waiting: JobInfo) -> float:
            return 1.0 if waiting.run_time_s(now) <= 0.0 else self.sensitivity(view, waiting)

        pool, _ = self.pass_victims(view, {j.job_id: waiting_sens(j) for j in view.pending}, -math.inf, lazy=False)
        return [v.job for v in self.eligible(pool, waiting_sens(job))]

    # ------------------------------------------------------------------ who may be preempted
    def running_nw_sens(self, view: ClusterView, sens: dict[str, float]) -> tuple[dict[str, float], float]:
        """Every running job's Nw_sens, and the middle of the range that ``worse_half`` cuts at
        (-inf without it; ``sens``: the waiting jobs')."""
        running = {job_id: self.sensitivity(view, job) for job_id, job in view.running.items()}
        middle = -math.inf
        if self.worse_half:
            measured = [sens[j.job_id] for j in view.pending if j.run_time_s(view.now) > 0.0]
            values = [*measured, *running.values()]
            middle = min(values) + (max(values) - min(values)) / 2.0
        return running, middle

    def pass_victims(self, view: ClusterView, sens: dict[str, float], floor: float,
                     lazy: bool = True) -> tuple[Victims, int]:
        """The victims of a pass whose order holds only waiting jobs (``sens``: theirs; ``floor``: the
        lowest of them, -inf if none), and how many running jobs are left out for being at or below it
        (``lazy``: :class:`_LazyVictims` where they can be, else a list)."""
        if self.worse_half:
            running, middle = self.running_nw_sens(view, sens)
            return self.listed(view, middle, floor, running, lazy)
        return self.listed(view, -math.inf, floor, lazy=lazy)

    def listed(self, view: ClusterView, middle: float, floor: float = -math.inf,
               running: dict[str, float] | None = None, lazy: bool = True) -> tuple[Victims, int]:
        """The running jobs above ``middle`` (the worse half of the Nw_sens range with ``worse_half``,
        else every one), worst (highest) Nw_sens first, and how many of them were left out of the
        list for being at or below ``floor`` (no job of the pass may preempt them; only counted).

        ``running``: their Nw_sens if the caller has them (then a list, which the movers' pass edits).
        Without, they are computed here, all at once (:class:`~halyard.policies.running_sens.RunningNwSens`;
        issue 19: this was the pass's longest loop on a loaded trace), and listed lazily
        (:class:`_LazyVictims`, with ``lazy``) unless one is NaN."""
        if running is not None:
            return self._listed_from(view, middle, floor, running)
        cut = max(middle, floor)
        spreads = self.statics.spreads(view)
        statics = self.statics

        def compute_s(job: JobInfo) -> float:
            return statics.of(view, job).compute_s

        table = self.running_sens
        jobs, values = table.at(view.running, view.now, compute_s, view.facts, view)
        # as _listed_from: not (s <= middle), then s <= cut counted, else listed (NaN is listed)
        kept = ~(values <= middle)
        unlisted = int(np.count_nonzero(kept & (values <= cut)))
        listed = kept & ~(values <= cut)
        if not np.isnan(values).any():  # listed already worst first, as the sort below would
            order = table.worst_first(values, listed)
            if spreads is not self._kept_for:  # other facts (or a pruned memo): kept victims' spreads are stale
                self._kept, self._kept_for = {}, spreads
            victims = _LazyVictims(jobs, order, values[order].tolist(), view.cluster, spreads,
                                    self._kept if lazy else None)  # (unoptimised: none kept)
            return (victims if lazy else list(victims)), unlisted
        # NaN does not order: the sort keeps the running jobs' order among them, as without the table
        jobs, values = table.at(view.running, view.now, compute_s, view.facts)
        kept = ~(values <= middle)
        listed = kept & ~(values <= cut)
        out = [_Victim(jobs[i], float(values[i]), view.cluster, spreads) for i in np.flatnonzero(listed).tolist()]
        return _worst_first(out), unlisted

    def _listed_from(self, view: ClusterView, middle: float, floor: float,
                     running: dict[str, float]) -> tuple[list[_Victim], int]:
        """:meth:`listed` from the caller's Nw_sens of the running jobs."""
        cut = max(middle, floor)
        spreads = self.statics.spreads(view)
        out = []
        unlisted = 0
        for job_id, job in view.running.items():
            s = running[job_id]
            if s <= middle or job.allocation is None:
                continue
            if s <= cut:
                unlisted += 1
            else:
                out.append(_Victim(job, s, view.cluster, spreads))
        return _worst_first(out), unlisted

    def may_preempt(self, victims: Victims, sens: float) -> bool:
        """Whether a job of Nw_sens ``sens`` has any victim (:meth:`eligible` not empty): the
        first victim has the highest Nw_sens."""
        for first in victims:
            return first.sens >= sens + self.min_gain if self.min_gain > 0.0 else first.sens > sens
        return False

    def eligible(self, victims: Victims, sens: float) -> list[_Victim]:
        """The victims a job of Nw_sens ``sens`` may preempt, worst first: a higher Nw_sens (a lower
        priority, §4.3.1), and with ``min_gain`` at least that much higher."""
        if isinstance(victims, _LazyVictims):
            return victims.above(sens + self.min_gain, True) if self.min_gain > 0.0 else victims.above(sens, False)
        if self.min_gain > 0.0:
            return list(takewhile(lambda v: v.sens >= sens + self.min_gain, victims))
        return list(takewhile(lambda v: v.sens > sens, victims))

    # ------------------------------------------------------------------ placement-aware preemption
    def free_for(self, view: ClusterView, job: JobInfo, sens: float, levels: Sequence[Level], free: FreeResources,
                 victims: Victims, plan: Plan, offers: dict[GpuTypes, np.ndarray] | None = None,
                 searches: _Searches | None = None) -> tuple[Picked, Level] | None:
        """§4.3.1-§4.3.2: free a placement at one of ``levels`` (those the waiting ``job`` accepts now,
        :func:`accepted_levels`) by preempting the cheapest group of its eligible victims; the
        preemptions go into ``plan``, their GPUs into ``free``, and they leave ``victims``.

        ``offers`` and ``searches`` are the pass's, valid while neither ``free`` nor ``victims``
        changes (the caller empties both then): usable GPUs per GPU-type set, and what earlier
        searches found (:class:`_Searches`)."""
        eligible = self.eligible(victims, sens)
        if not eligible:
            return None
        demand = job.spec.num_gpus
        types = view.gpu_types_for(job.spec)
        shape = view.shape
        avail = None if offers is None else offers.get(types)
        if avail is None:
            avail = usable_gpus(free, shape, types)
            if offers is not None:
                offers[types] = avail
        for level in levels:
            # the eligible victims are a prefix of ``victims`` (worst first), so their count names them
            search = (level, demand, types, len(eligible))
            holders = None
            if searches is not None:
                if search in searches.misses:
                    continue
                holders = searches.holders_of(level, eligible)
            found = _with_victims(level, demand, free, avail, shape, eligible, types, holders)
            if found is None:
                if searches is not None:
                    searches.misses.add(search)
                continue
            picked, group = found
            _preempt(group, plan, free, victims)
            if searches is not None:
                searches.clear()
            return picked, level_of(picked, shape)
        return None


def _worst_first(victims: list[_Victim]) -> list[_Victim]:
    """``victims`` sorted as a pass offers them to preemption: highest Nw_sens, then latest submission,
    then latest arrival first."""
    victims.sort(key=lambda v: (-v.sens, -v.job.spec.submit_time, -v.job.arrival_seq))
    return victims


def _preempt(group: list[_Victim], plan: Plan, free: FreeResources, victims: Victims,
             trial: FreeResources | None = None) -> None:
    """Preempt ``group``: in ``plan``, their GPUs back in ``free`` (and ``trial``), out of ``victims``."""
    for v in group:
        plan.preempt(v.job.job_id)
        free.give(allocation_of(v.job))
        if trial is not None:
            trial.give(allocation_of(v.job))
        victims.remove(v)


def accepted_levels(demand: int, machine: int, starvation_s: float, t_mc: float, t_rk: float) -> list[Level]:
    """The levels a job of ``demand`` GPUs (``machine``: the GPUs of its largest machine) accepts now,
    as Algorithm 1 takes them: a machine if it fits one (lines 5-8), a rack once its machine timer
    has elapsed (lines 10-16), the network once its rack timer has (lines 18-21)."""
    levels = []
    if demand <= machine:
        levels.append(Level.MACHINE)
    if starvation_s >= t_mc:
        levels.append(Level.RACK)
    if starvation_s >= t_rk:
        levels.append(Level.NETWORK)
    return levels


def best_level(view: ClusterView, job: JobInfo) -> Level:
    """The tightest level a job's GPU count fits (§4.3.2: one machine, one rack, else the network)."""
    machine, rack = view.shape.largest(view.gpu_types_for(job.spec))
    gpus = job.num_gpus
    return Level.MACHINE if gpus <= machine else Level.RACK if gpus <= rack else Level.NETWORK


def can_tighten(view: ClusterView, job: JobInfo) -> bool:
    """Whether a running job spans more than its GPU count forces (racks, or machines)."""
    return allocation_level(allocation_of(job), view.cluster) > best_level(view, job)


class _WaitingTail:
    """The tail of a pass's offer order once no job can preempt and nothing moves: a job there that does
    not fit what is free only waits, and its reason is all there is to work out (issue 19: a loaded
    queue has a thousand such jobs per pass, and walking them was a tenth of Dally's time). The reasons
    of each run of such jobs are given at once, found from the order's demands, so only the jobs that
    fit are looked at one by one; a reason depends on the demand alone while what is free holds."""

    __slots__ = ("demands", "fits", "fits_total", "ids", "reasons", "wanted")

    def __init__(self, ids: list[str], demands: list[int]) -> None:
        self.ids, self.demands = ids, demands  # the order's job ids and GPU demands
        self.wanted = np.array(demands, dtype=np.int64)
        self.fits: list[int] = []  # positions in the order whose demand is at most fits_total
        self.fits_total = -1
        self.reasons: dict[int, Unplaced] = {}  # demand -> its reason, while what is free holds

    def skip(self, i: int, free_total: int, unplaced: dict[str, Unplaced],
             reason: Callable[[int, int], Unplaced]) -> int:
        """Give the jobs from position ``i`` up to the next one that fits ``free_total`` GPUs their
        reasons (``reason(demand, position)``, asked once per demand) in ``unplaced``; that job's position."""
        if self.fits_total != free_total:
            self.fits, self.fits_total = np.flatnonzero(self.wanted <= free_total).tolist(), free_total
        k = bisect.bisect_left(self.fits, i)
        j = self.fits[k] if k < len(self.fits) else len(self.ids)  # the next job that fits
        if j > i:
            run = self.demands[i:j]
            for demand in set(run).difference(self.reasons):
                self.reasons[demand] = reason(demand, i + run.index(demand))
            unplaced.update(zip(self.ids[i:j], map(self.reasons.__getitem__, run), strict=True))
        return j


class DallyPass:
    """One pass of Dally's (§4.3: "The scheduler then periodically generates resource offers to jobs in
    the wait queue"): offers in increasing Nw_sens (§4.3.1, :meth:`offer_order`), each accepted or
    rejected by the job itself (Algorithm 1, :meth:`offer`), a failed offer followed by the Nw_sens
    preemption stage (:meth:`preempt_for`), an acceptance recorded for the auto-tuner (:meth:`accept`).
    With Halyard's ``migrate`` and ``lease`` options, running jobs join the offers (:meth:`reoffer`).

    Its fields are the pass's caches, valid within the pass only (issue 19's exact shortcuts, each
    equal to working the figure out afresh: ``tests/test_waiting_sens.py``): the victims, worked out
    when first needed (most passes never are); the free GPU count, re-summed only after a start, a move
    or a preemption; each GPU-type set's usable GPUs (the offer); the preemption searches that found
    nothing (:class:`_Searches`); reasons that depend only on a demand and those counts; and the tail of
    the order where jobs only wait (:class:`_WaitingTail`)."""

    def __init__(self, policy: Dally, view: ClusterView, state: PassState, ended: set[str]) -> None:
        self.policy, self.view, self.state = policy, view, state
        self.ended = ended  # ``lease``: the running jobs whose lease ended (Dally._ended_leases)
        self.delay = policy.delay
        self.nw_preemption = policy.nw_preemption
        self.plan = Plan()
        self.free = view.free.copy()
        self.sens: dict[str, float] = {}  # the offer order's Nw_sens: waiting jobs, then movers
        self.waiting: list[JobInfo] | None = None  # the waiting jobs in offer order, if kept (WaitingOrder)
        self.movers: list[JobInfo] = []
        self.order: list[JobInfo] = []
        # Victims at or below every waiting job's Nw_sens are never eligible in a pass without movers
        # (the order holds only waiting jobs then): left out of the list, only counted (``unlisted``),
        # since the "no victim at all" test counts them (issue 19: they are most of the running jobs).
        self._victims: Victims | None = None if policy.preemption and view.running else []
        self.unlisted = 0
        self.free_total: int | None = self.free.total_gpus
        self.start_total: int = view.free.total_gpus  # what the reasons quote
        self.offers: dict[GpuTypes, np.ndarray] = {}
        self.searches = _Searches()
        self._too_few: dict[tuple[int, int], Unplaced] = {}
        self._no_victim: dict[int, Unplaced] = {}
        self.tail: _WaitingTail | None = None

    def run(self) -> tuple[Plan, FreeResources]:
        """§4.3: the pass's offers, in increasing Nw_sens; the plan, and what it left free."""
        self.rank_waiting()
        if not self.find_movers():
            return self.plan, self.free  # nothing waits and nothing can move: no Nw_sens needed
        self.order = order = self.offer_order()
        i, n = 0, len(order)
        while i < n:
            if self.tail is not None:
                assert self.free_total is not None  # (no movers in a tail)
                i = self.tail.skip(i, self.free_total, self.plan.unplaced, self._tail_reason)
                if i == n:
                    break
            job = order[i]
            i += 1
            if job.allocation is not None:
                self.reoffer(job)
            else:
                self.offer(job)
        return self.plan, self.free

    # ------------------------------------------------------------------ the offer order (§4.3.1)
    def waiting_sens(self, job: JobInfo) -> float:
        """§4.3.1: a waiting job's Nw_sens (a job that never ran: :attr:`Dally._never_ran_sens`)."""
        if job.run_time_s(self.view.now) <= 0.0:
            return self.policy._never_ran_sens
        return self.policy.sensitivity(self.view, job)

    def rank_waiting(self) -> None:
        """§4.3.1: the waiting jobs' Nw_sens, and their offer order when it is kept from the last pass
        (:class:`WaitingOrder`, given the view's event log; else :meth:`offer_order` sorts)."""
        view, policy = self.view, self.policy
        if policy.shortcuts and view.events is not None and view.jobs is not None:
            self.waiting = policy._waiting.ranked(view, self.waiting_sens)
            self.sens = policy._waiting.sens  # read only: copied before movers are added
        else:
            self.sens = {job.job_id: self.waiting_sens(job) for job in view.pending}

    def find_movers(self) -> bool:
        """The running jobs offered GPUs with the waiting ones (``migrate``: slowed ones spread wider
        than their size needs; ``lease``: those whose lease ended), with their Nw_sens; False when
        nothing waits and nothing can move, which ends the pass."""
        policy, view = self.policy, self.view
        if not (policy.preemption and view.running):
            return True
        tighter = self.spread_wider() if policy.migrate or self.ended else []
        if not view.pending and not tighter:
            return False
        if tighter:
            self.add_movers(tighter)
        return True

    def spread_wider(self) -> list[JobInfo]:
        """The running jobs that may move: spread over more machines or racks than their size needs
        (only those can be moved), and without ``migrate`` only those whose lease ended."""
        view, migrate, ended = self.view, self.policy.migrate, self.ended
        return [job for job in view.running.values()
                if len(allocation_of(job).nodes) > 1 and can_tighten(view, job) and (migrate or job.job_id in ended)]

    def add_movers(self, tighter: list[JobInfo]) -> None:
        """The movers among ``tighter``: a lease-ended one, or with ``migrate`` one slowed (below 1), by
        at least ``min_gain``, and with ``worse_half`` in the more slowed half; the victims, listed with
        every running job's Nw_sens (a list the movers' re-offers edit)."""
        stage = self.nw_preemption
        running, middle = stage.running_nw_sens(self.view, self.sens)
        self._victims, _ = stage.listed(self.view, middle, running=running)
        slowed = min(middle if stage.worse_half else math.inf, 1.0 - stage.min_gain)
        migrate, ended = self.policy.migrate, self.ended
        self.movers = [job for job in tighter if job.job_id in ended
                       or (migrate and running[job.job_id] <= slowed and running[job.job_id] < 1.0)]
        self.sens = {**self.sens, **{job.job_id: running[job.job_id] for job in self.movers}}

    def offer_order(self) -> list[JobInfo]:
        """§4.3.1: "Resource offers are hence made in increasing order of Nw_sens" (then submission,
        then arrival): the waiting jobs and the movers."""
        sens = self.sens

        def key(j: JobInfo) -> tuple[float, float, int]:
            return sens[j.job_id], j.spec.submit_time, j.arrival_seq

        if self.waiting is None:
            return sorted([*self.view.pending, *self.movers], key=key)
        if self.movers:
            return list(heapq.merge(self.waiting, sorted(self.movers, key=key), key=key))
        return self.waiting

    # ------------------------------------------------------------------ a waiting job's offer (Algorithm 1)
    def offer(self, job: JobInfo) -> None:
        """Algorithm 1 for a waiting ``job`` on what is free (:meth:`DelayScheduling.decide`, lines 1-22);
        if it rejects the offer, or too few GPUs are free for one, the preemption stage
        (:meth:`preempt_for`); then :meth:`accept`, or a reason to wait."""
        free_total = self.free_gpus()
        demand = job.spec.num_gpus
        if free_total < demand and not self.victims() and not self.unlisted:
            self.plan.wait(job.job_id, self.too_few(demand, free_total))
            return
        sens = self.sens[job.job_id]
        if free_total >= demand:
            decision, avail, wait_s, t_mc, t_rk = self.delay.decide(self.view, job, self.free, self.state,
                                                                    self.offers)
            if decision is None and self.nw_preemption.may_preempt(self.victims(), sens):
                decision = self.preempt_for(job, sens, wait_s, t_mc, t_rk)
            if decision is None:  # lines 11 and 19: rejected (or the offer is too small)
                self.plan.wait(job.job_id, self.delay.why(self.view, job, avail, wait_s, t_mc, t_rk))
                return
        elif self.nw_preemption.may_preempt(self.victims(), sens):
            # Too few GPUs free: only a preemption can place it, so its timers matter only then
            # (the reason quotes neither its starvation nor its timers).
            wait_s = starvation(self.view, job)
            t_mc, t_rk = self.delay.job_timers(self.view, job, self.state)
            decision = self.preempt_for(job, sens, wait_s, t_mc, t_rk)
            if decision is None:
                self.plan.wait(job.job_id, self.no_victim(job))
                return
        else:
            self.only_waits_from_here(sens)
            self.plan.wait(job.job_id, self.no_victim(job))
            return
        self.accept(job, decision, wait_s)

    def preempt_for(self, job: JobInfo, sens: float, wait_s: float, t_mc: float,
                    t_rk: float) -> tuple[Picked, Level] | None:
        """The preemption stage (§4.3.1-§4.3.2, :meth:`NwSensPreemption.free_for`) for a waiting ``job``
        whose offer failed: a placement at a level it accepts now (Algorithm 1's ladder with its
        starvation ``wait_s`` and timers), freed by preempting victims, or None."""
        machine = self.delay.statics.of(self.view, job).machine
        levels = accepted_levels(job.spec.num_gpus, machine, wait_s, t_mc, t_rk)
        return self.nw_preemption.free_for(self.view, job, sens, levels, self.free, self.victims(), self.plan,
                                           self.offers, self.searches)

    def accept(self, job: JobInfo, decision: tuple[Picked, Level], wait_s: float) -> None:
        """Algorithm 1 lines 6-7, 14-15 and 21: allocate the GPUs and start the job, and record its
        starvation for the auto-tuner (in the pass's state until the plan is applied:
        :meth:`DelayScheduling.accept`)."""
        picked, level = decision
        allocation = build_allocation(self.free, picked)
        self.free.take(allocation)
        self.free_total = self.free.total_gpus
        self.offers.clear()
        self.searches.taken()  # (a preemption for this start has cleared the holders)
        if self.tail is not None:
            self.tail.reasons.clear()
        self.plan.start(job.job_id, allocation)
        self.delay.accept(self.view, job, level, wait_s, self.state)

    def only_waits_from_here(self, sens: float) -> None:
        """No job from here on can preempt (the order is by increasing Nw_sens, so none after the first
        that cannot) and nothing moves: a job that does not fit what is free only waits
        (:class:`_WaitingTail`). Not with the shortcuts off, with movers, or at a NaN Nw_sens (which
        does not order)."""
        if not self.policy.shortcuts or self.movers or sens != sens:
            return
        if self.order is self.waiting:
            self.tail = _WaitingTail(self.policy._waiting.ids, self.policy._waiting.demands)
        else:
            self.tail = _WaitingTail([job.job_id for job in self.order], [job.spec.num_gpus for job in self.order])

    # ------------------------------------------------------------------ a running job's re-offer (options)
    def reoffer(self, job: JobInfo) -> None:
        """``migrate`` or ``lease`` (module docstring): a running mover is re-offered GPUs and moves to
        one machine or one rack if it can now (:meth:`reconsolidate`); at a lease end only the GPUs of
        other lease-ended jobs are re-offered to it. Skipped if a job earlier in the pass took its GPUs:
        it waits again (§4.3)."""
        self.free_total = None  # moves and preemptions change what is free, and the victims
        self.offers.clear()
        self.searches.clear()
        if self.plan.stopped(job.job_id):
            return
        pool = self.victims()
        assert isinstance(pool, list)  # (listed with the movers' Nw_sens: add_movers)
        sens = self.sens[job.job_id]
        if job.job_id in self.ended and not (self.policy.migrate and sens < 1.0):
            self.reoffer_at_lease_end(job, sens, pool)
        else:
            self.reconsolidate(job, sens, pool)

    def reoffer_at_lease_end(self, job: JobInfo, sens: float, pool: list[_Victim]) -> None:
        """``lease``: only the GPUs of other lease-ended jobs are re-offered to ``job``; those it takes
        leave ``pool``."""
        ended = self.ended
        offered = [v for v in pool if v.job.job_id in ended]
        self.reconsolidate(job, sens, offered)
        left = {v.job.job_id for v in offered}  # those it did not preempt
        pool[:] = [v for v in pool if v.job.job_id not in ended or v.job.job_id in left]

    def reconsolidate(self, job: JobInfo, sens: float, victims: list[_Victim]) -> None:
        """Move a slowed running ``job`` to one machine or one rack if that is possible now, on the free
        GPUs, its own, and those of ``victims`` it may preempt (:meth:`NwSensPreemption.eligible`)."""
        view, free, plan, shape = self.view, self.free, self.plan, self.view.shape
        allocation = job.allocation
        assert allocation is not None
        current = allocation_level(allocation, view.cluster)
        demand = allocation.num_gpus
        trial = free.copy()
        trial.give(allocation)
        types = view.gpu_types_for(job.spec)
        avail = usable_gpus(trial, shape, types)
        eligible = self.nw_preemption.eligible(victims, sens)
        for level in range(best_level(view, job), current):
            level = Level(level)
            picked = on_machine(avail, demand) if level is Level.MACHINE else on_rack(avail, shape, demand)
            group: list[_Victim] = []
            if picked is None and eligible:
                found = _with_victims(level, demand, trial, avail, shape, eligible, types)
                if found is not None:
                    picked, group = found
            if picked is None or level_of(picked, shape) >= current:
                continue
            _preempt(group, plan, free, victims, trial)
            moved = build_allocation(trial, picked)
            free.give(allocation)
            free.take(moved)
            plan.migrate(job.job_id, moved)
            return

    # ------------------------------------------------------------------ the pass's caches
    def victims(self) -> Victims:
        """The pass's victims, worked out from the view when first asked for (so the same whenever)."""
        if self._victims is None:
            waiting = self.policy._waiting
            floor = waiting.lowest() if self.sens is waiting.sens else min(self.sens.values(), default=-math.inf)
            self._victims, self.unlisted = self.nw_preemption.pass_victims(self.view, self.sens, floor,
                                                                           lazy=self.policy.shortcuts)
        return self._victims

    def free_gpus(self) -> int:
        """The free GPU count, re-summed only after a move or a preemption."""
        if self.free_total is None:
            self.free_total = self.free.total_gpus
        return self.free_total

    def too_few(self, demand: int, free_now: int) -> Unplaced:
        """The reason of a job of ``demand`` GPUs with ``free_now`` free and no victim at all."""
        why = self._too_few.get((demand, free_now))
        if why is None:
            why = self._too_few[(demand, free_now)] = cannot_fit(self.delay.name, "needs {:#GPU}; {} free",
                                                                 demand, free_now)
        return why

    def no_victim(self, job: JobInfo) -> Unplaced:
        """The reason of a job too large for what is free that may preempt no victim."""
        why = self._no_victim.get(job.spec.num_gpus)
        if why is None:
            why = self._no_victim[job.spec.num_gpus] = self.delay.why(self.view, job, None, 0.0, 0.0, 0.0,
                                                                      self.start_total)
        return why

    def _tail_reason(self, demand: int, position: int) -> Unplaced:
        if not self._victims and not self.unlisted:
            assert self.free_total is not None
            return self.too_few(demand, self.free_total)
        return self.no_victim(self.order[position])


class Dally:
    """Delay scheduling with auto-tuned (or manual) timers and Nw_sens preemption.

    Its parts are stages: :class:`NwSensOrdering`'s order, :class:`DelayScheduling`'s offers and
    timers, and :class:`NwSensPreemption`, the placement-aware preemption that needs both at once;
    :class:`DallyPass` runs one pass of them."""

    needs_rounds = True  # timers elapse and Nw_sens drifts with time alone
    resource_sensitive = False
    # The pass's exact shortcuts (issue 19): the waiting jobs' order kept from pass to pass, the
    # tail of the order where jobs can only wait answered with their reasons alone, and victims made
    # only when reached and kept from pass to pass (_LazyVictims). Off only in the tests that check they
    # change no decision and no reason.
    shortcuts = True
    honours: frozenset[str] = frozenset()  # neither priority nor deadlines (§4.3)
    starvation = staticmethod(starvation)

    def __init__(self, timers: TimerSource | None = None, *, name: str = "dally", preemption: bool = True,
                 migrate: bool = False, worse_half: bool = False, min_gain: float = 0.0,
                 lease: bool = False, lease_rounds: float = LEASE_ROUNDS, reauction: bool = False,
                 adjusters: tuple[Adjuster, ...] = ()) -> None:
        """``migrate``, ``worse_half``, ``min_gain``, ``lease`` and ``reauction`` are Halyard's options
        (module docstring); their defaults are the paper's Dally."""
        if not 0.0 <= min_gain < 1.0:
            raise ValueError(f"min_gain must be in [0, 1), got {min_gain!r}")
        if not (lease_rounds > 0.0 and math.isfinite(lease_rounds)):
            raise ValueError(f"lease_rounds must be a positive number of rounds, got {lease_rounds!r}")
        self.name = name
        self.delay = DelayScheduling(timers)
        self.nw_preemption = NwSensPreemption(self.delay.statics, min_gain=min_gain, worse_half=worse_half)
        self.preemption = preemption
        self.migrate = migrate
        self.lease = lease
        self.lease_rounds = lease_rounds
        self.reauction = reauction
        if reauction:  # the reference simulator preempts nobody between lease ends (module docstring)
            self.preemption = False
        # ``lease``: job id -> (last assignment time, index of the last lease end re-offered); a
        # function of the applied passes (updated in on_applied), pruned to the running jobs.
        self._lease_ends: dict[str, tuple[float, int]] = {}
        self._waiting = WaitingOrder()  # the waiting jobs in offer order (a memo, not learning)
        # Adjusters run after Dally's pass on what is still free, as in a staged policy
        # (``dally+cassini``: Cassini's time-shifts on Dally's placements).
        self.adjusters = adjusters
        # ``+hoard`` (policies/dally_clustersim.py): the GPUs running jobs won between lease ends, held unused.
        self.hoard: HoardedGpus | None = None
        # ``+staggered`` (policies/dally_clustersim.py): a lease end's jobs released one at a time.
        self.staggered: Callable[[Dally, ClusterView, PassState, set[str], Plan], FreeResources] | None = None

    @property
    def timers(self) -> TimerSource:
        return self.delay.timers

    @property
    def min_gain(self) -> float:
        """The preemption stage's ``min_gain`` (``+hysteresis``)."""
        return self.nw_preemption.min_gain

    @min_gain.setter
    def min_gain(self, value: float) -> None:
        self.nw_preemption.min_gain = value

    @property
    def worse_half(self) -> bool:
        """The preemption stage's ``worse_half`` (``+worse-half``)."""
        return self.nw_preemption.worse_half

    @worse_half.setter
    def worse_half(self, value: bool) -> None:
        self.nw_preemption.worse_half = value

    @property
    def acts_without_pending(self) -> bool:
        """With ``migrate``, slowed running jobs are re-consolidated even when nothing waits."""
        return self._migrates or self._leases or self.reauction or any(a.acts_without_pending for a in self.adjusters)

    @property
    def _migrates(self) -> bool:
        return self.preemption and self.migrate

    @property
    def _leases(self) -> bool:
        return self.preemption and self.lease

    def stages(self) -> list[tuple[str, str]]:
        options = [o for o, on in (("migrate", self.migrate), ("worse-half", self.worse_half),
                                   (f"min-gain {self.min_gain:g}", self.min_gain > 0.0),
                                   (f"lease {self.lease_rounds:g} rounds", self.lease)) if on]
        preemption = "+".join([self.nw_preemption.name, *options]) if self.preemption else "off"
        if self.reauction:
            preemption = f"lease-end re-auction every {self.lease_rounds:g} rounds"
        timers = self.timers
        tuned = [o for o, on in (("drop-short-waits", getattr(timers, "lease_waits", False)),
                                 ("manual-start", getattr(timers, "manual_start", False))) if on]
        return [("ordering", NwSensOrdering.name), ("placement", self.delay.name),
                ("timers", "+".join([timers.name, *tuned])),
                ("preemption", preemption),
                *(("adjust", a.name) for a in self.adjusters)]

    def quiet_until(self, view: ClusterView) -> float:
        """No pass is skipped (:meth:`Policy.quiet_until`): delay timers elapse with the clock alone."""
        return -math.inf

    def on_applied(self, view: ClusterView, plan: Plan, state: PassState) -> None:
        self.delay.on_applied(view, plan, state)
        self.nw_preemption.on_applied(view, plan, state)
        if self.hoard is not None:
            self.hoard.on_applied(state)
        if self.lease or self.reauction:
            self._lease_ends = {k: v for k, v in self._lease_ends.items() if k in view.running}
            self._lease_ends.update(state.get(LEASES_KEY, {}))
        applied(self.adjusters, view, plan, state)

    def on_rejected(self, view: ClusterView, plan: Plan, state: PassState) -> None:
        rejected(self.adjusters, view, plan, state)  # the pass's acceptances never happened; nothing was recorded

    # ------------------------------------------------------------------ reading the view
    def sensitivity(self, view: ClusterView, job: JobInfo) -> float:
        return self.nw_preemption.sensitivity(view, job)

    # ------------------------------------------------------------------ the pass
    def schedule(self, view: ClusterView, state: PassState) -> Plan:
        if self.hoard is not None:  # ``+hoard``: what running jobs won mid-lease is offered to nobody
            view = self.hoard.hide(view)
        plan, free = self._schedule(view, state)
        if self.hoard is not None:
            free = self.hoard.bid(self, view, state, plan, free)
        return adjust(self.adjusters, view, plan, free if free is not None else view.free.copy(), state)

    def _schedule(self, view: ClusterView, state: PassState) -> tuple[Plan, FreeResources | None]:
        """Dally's own pass (:class:`DallyPass`, or at a lease end with ``reauction`` :meth:`_reauction`):
        the plan, and what it left free (None when it returned before copying)."""
        if self.reauction:
            ended = self._ended_leases(view, state)
            if ended:
                plan = Plan()
                if self.staggered is not None:  # ``+staggered`` (policies/dally_clustersim.py)
                    return plan, self.staggered(self, view, state, ended, plan)
                return plan, self._reauction(view, state, ended, plan)
        ended = self._ended_leases(view, state) if self._leases else set()
        if not view.pending and not (self._migrates and view.running) and not ended:
            return Plan(), None
        return DallyPass(self, view, state, ended).run()

    @property
    def _never_ran_sens(self) -> float:
        """The Nw_sens a job that never ran is offered at: 1.0 (an unslowed job, module docstring), or
        with ``reauction`` 0.0, first, as the reference simulator's ``PerGPUBidComparator`` ranks it."""
        return 0.0 if self.reauction else 1.0

    def _reauction(self, view: ClusterView, state: PassState, ended: set[str], plan: Plan) -> FreeResources:
        """``reauction``'s pass at a lease end (module docstring): the lease-ended jobs' GPUs are all
        free, and they and the waiting jobs are offered them in increasing Nw_sens (never-run first);
        a lease-ended job's starvation is zero. Returns what is left free.

        The plan lists the preemptions first, then the moves (each after the moves off the GPUs it
        takes), then the starts, so that each action finds its GPUs free; moves that take each
        other's GPUs in a ring are written as a preemption and a start of the same job."""
        now = view.now
        free = view.free.copy()
        if self.hoard is not None:
            state.put(HOARD_REAUCTION_KEY, True)
        released = [view.running[job_id] for job_id in sorted(ended)]
        for job in released:
            free.give(allocation_of(job))
        sens = {job.job_id: self._never_ran_sens if job.run_time_s(now) <= 0.0 else self.sensitivity(view, job)
                for job in view.pending}
        sens.update({job.job_id: self.sensitivity(view, job) for job in released})
        order = sorted([*view.pending, *released],
                       key=lambda j: (sens[j.job_id], j.spec.submit_time, j.arrival_seq))
        starts: list[tuple[str, Allocation]] = []
        moves: dict[str, Allocation] = {}
        for job in order:
            lease_ended = job.job_id in ended
            decision, avail, wait_s, t_mc, t_rk = self._bid(view, job, free, state, lease_ended)
            if decision is None:
                if lease_ended:
                    plan.preempt(job.job_id)  # back into the wait queue (§4.3.2)
                else:
                    plan.wait(job.job_id, self.delay.why(view, job, avail, wait_s, t_mc, t_rk))
                continue
            picked, level = decision
            allocation = build_allocation(free, picked)
            free.take(allocation)
            self.delay.accept(view, job, level, wait_s, state)
            if self.hoard is not None:  # ``+hoard``: its bid between lease ends, at its place in the order
                self.hoard.bid_one(self, view, state, job, free)
            if not lease_ended:
                starts.append((job.job_id, allocation))
            elif _gpus_of(allocation) != _gpus_of(allocation_of(job)):
                moves[job.job_id] = allocation
        _write_moves(plan, view, moves, starts)
        return free

    def _bid(self, view: ClusterView, job: JobInfo, free: FreeResources, state: PassState, lease_ended: bool,
             ) -> tuple[tuple[Picked, Level] | None, np.ndarray, float, float, float]:
        """Algorithm 1 for one bid of ``reauction``'s pass (:meth:`DelayScheduling.decide`'s answer): a
        lease-ended job's last assignment is this lease end, so its starvation is zero (lines 1-2)."""
        if not lease_ended:
            return self.delay.decide(view, job, free, state)
        t_mc, t_rk = self.delay.job_timers(view, job, state)
        avail = usable_gpus(free, view.shape, self.delay.statics.of(view, job).gpu_types)
        return delay_decision(avail, view.shape, job.spec.num_gpus, 0.0, t_mc, t_rk), avail, 0.0, t_mc, t_rk

    def _ended_leases(self, view: ClusterView, state: PassState) -> set[str]:
        """``lease``: the running jobs whose lease has ended since their last re-offer (recorded in
        the pass's state; kept by :meth:`on_applied`)."""
        lease_s = self.lease_rounds * view.round_s
        seen = state.setdefault(LEASES_KEY, dict)
        for job_id, job in view.running.items():
            last = job.last_assignment_time
            if last is None or job.allocation is None:
                continue
            index = math.floor((view.now - last) / lease_s + 1e-9)
            before = self._lease_ends.get(job_id)
            if index > (before[1] if before is not None and before[0] == last else 0):
                seen[job_id] = (last, index)
        return set(seen)



def _gpus_of(allocation: Allocation) -> frozenset[tuple[str, int]]:
    """The (node, GPU) pairs an allocation holds: whether a re-placed job kept its GPUs."""
    return frozenset((n.node, g) for n in allocation.nodes for g in n.gpus)


def _write_moves(plan: Plan, view: ClusterView, moves: dict[str, Allocation],
                 starts: list[tuple[str, Allocation]]) -> None:
    """``reauction``'s moves, then its ``starts``, into ``plan`` (after its preemptions), so that each
    action finds its GPUs free: a move waits for the moves off its GPUs; a ring of moves is broken into
    preemptions and starts. Empties ``moves``."""
    held = {job_id: _gpus_of(allocation_of(view.running[job_id])) for job_id in moves}
    while moves:
        ready = [j for j, a in moves.items()
                 if not any(_gpus_of(a) & held[k] for k in moves if k != j)]
        if not ready:
            ring = next(iter(moves))
            plan.preempt(ring)
            starts.append((ring, moves.pop(ring)))
            continue
        for job_id in ready:
            plan.migrate(job_id, moves.pop(job_id))
    for job_id, allocation in starts:
        plan.start(job_id, allocation)


def with_option(policy: object, option: str) -> Dally:
    """``policy`` (a Dally) with one of the rules not in the paper switched on: ``migrate``, ``worse-half``,
    ``hysteresis`` (``min_gain`` = :data:`MIN_GAIN`), ``lease``, ``reauction``, ``no-preemption`` (no Nw_sens
    preemption: what aakash-sharma/cluster-sim's Dally does between lease ends; measured in
    docs/dally-public-comparison.md), or of its auto-tuner ``drop-short-waits`` and ``manual-start``;
    the name gains ``+option``."""
    if not isinstance(policy, Dally):
        name = getattr(policy, "name", type(policy).__name__)
        raise ValidationError(f"+{option} is an option of Dally; {name!r} is not a Dally policy", field="policy")
    if option == "migrate":
        policy.migrate = True
    elif option == "worse-half":
        policy.worse_half = True
    elif option == "hysteresis":
        policy.min_gain = MIN_GAIN
    elif option == "lease":
        policy.lease = True
    elif option == "reauction":
        policy.reauction = True
        policy.preemption = False  # the reference simulator preempts nobody between lease ends
    elif option == "no-preemption":
        policy.preemption = False
    elif option == "hoard":
        if not policy.reauction:
            raise ValidationError("+hoard is a bid between lease ends: it needs +reauction before it",
                                  field="policy")
        from halyard.policies.dally_clustersim import HoardedGpus  # (it imports this module)
        policy.hoard = HoardedGpus()
    elif option == "staggered":
        if not policy.reauction:
            raise ValidationError("+staggered releases a lease end's jobs one at a time: it needs +reauction "
                                  "before it", field="policy")
        from halyard.policies.dally_clustersim import staggered_reauction
        policy.staggered = staggered_reauction
    elif option in TUNER_OPTIONS:
        if not isinstance(policy.timers, AutoTuner):
            raise ValidationError(f"+{option} is an option of the auto-tuner; {policy.name!r} has "
                                  f"{policy.timers.name}", field="policy")
        if option == "drop-short-waits":
            policy.timers.lease_waits = True
        else:
            policy.timers.manual_start = True
    else:
        raise ValidationError(f"unknown Dally option {option!r} (known: {', '.join(DALLY_OPTIONS)})", field="policy")
    policy.name = f"{policy.name}+{option}"
    return policy


# The auto-tuner's options (AutoTuner.lease_waits and .manual_start), for Dally with tuned timers only.
TUNER_OPTIONS = ("drop-short-waits", "manual-start")
# Rules not in the paper, named as '+option' on a Dally preset (policies/registry.py AUGMENTATIONS).
DALLY_OPTIONS = ("migrate", "worse-half", "hysteresis", "lease", "reauction", "no-preemption", "hoard",
                 "staggered", *TUNER_OPTIONS)


def allocation_level(allocation: Allocation, cluster: Cluster) -> Level:
    """The consolidation level of an allocation: one machine, one rack, or the network."""
    nodes = [cluster.node(p.node) for p in allocation.nodes if p.gpus]
    if len(nodes) == 1:
        return Level.MACHINE
    return Level.RACK if len({n.rack_index for n in nodes}) == 1 else Level.NETWORK


def _with_victims(level: Level, demand: int, free: FreeResources, avail: np.ndarray, shape: ClusterShape,
                  eligible: list[_Victim], gpu_types: GpuTypes,
                  holders: Holders | None = None) -> tuple[Picked, list[_Victim]] | None:
    """A ``level`` placement of ``demand`` GPUs on ``free`` plus the GPUs of the cheapest victims
    (``holders``: :func:`_holders` of ``level`` and of at least ``eligible`` if the caller has them)."""
    chosen = _cheapest(level, demand, avail, shape, eligible, holders)
    if chosen is None:
        return None
    domain, group = chosen
    trial = free.copy()
    for v in group:
        trial.give(allocation_of(v.job))
    picked = _place_in(level, domain, usable_gpus(trial, shape, gpu_types), shape, demand)
    if picked is None or level_of(picked, shape) > level:
        return None
    return picked, group


# A level's domains (node, rack, or -1 for the whole network) -> the victims holding GPUs there, in the
# victims' order, with the GPUs each holds there and its position among the victims.
Holders = dict[int, list[tuple[_Victim, int, int]]]


def _holders(level: Level, eligible: list[_Victim], holders: Holders | None = None, start: int = 0) -> Holders:
    """Each ``level`` domain's victims, built in one walk over them, so that a domain looks only at its
    own (issue 19: walking every victim for every machine of a large cluster was most of Dally's time
    on a loaded trace); with the ``holders`` of ``eligible[:start]``, those grown by the rest."""
    if holders is None:
        holders = {}
    if level is Level.NETWORK:
        if start < len(eligible):
            holders.setdefault(-1, []).extend((eligible[k], eligible[k].gpus, k) for k in range(start, len(eligible)))
        return holders
    side = 0 if level is Level.MACHINE else 1  # of where(): per node, per rack
    for k in range(start, len(eligible)):
        v = eligible[k]
        for index, held in (v._where or v.where())[side].items():  # (no call once located: issue 19)
            if held:
                holders.setdefault(index, []).append((v, held, k))
    return holders


def _cheapest(level: Level, demand: int, avail: np.ndarray, shape: ClusterShape,
              eligible: list[_Victim], holders: Holders | None = None) -> tuple[int, list[_Victim]] | None:
    """The domain (node, rack, or -1 for the whole network) needing the fewest preempted GPUs.

    Victims are taken in the given order (worst Nw_sens first) until the domain
    holds ``demand`` usable GPUs; ties go to fewer victims, then to the victims of lowest
    priority (the highest smallest Nw_sens, §4.3.1), then the lowest index. ``holders``: the
    :func:`_holders` at ``level`` of ``eligible`` or of a longer prefix of the same victims (only
    the first ``len(eligible)`` positions count), if the caller has them.
    """
    if holders is None:
        holders = _holders(level, eligible)
    count = len(eligible)
    if level is Level.NETWORK:
        free = np.array([avail.sum()])  # the one domain, index -1
    else:
        free = avail if level is Level.MACHINE else np.bincount(shape.rack, weights=avail, minlength=shape.n_racks)
    best: tuple[tuple[int, int, float, int], int, list[_Victim]] | None = None
    for index, held_here in holders.items():
        if held_here[0][2] >= count:
            continue  # no eligible victim holds GPUs here
        if level is Level.MACHINE and shape.gpus[index] < demand:
            continue
        have = int(free[index])
        if have >= demand:
            continue  # fits with no victim: not a preemption's domain
        group: list[_Victim] = []
        gpus = 0
        low = held_here[0][0].sens  # min() over the group's Nw_sens, as min() takes it (NaN included)
        for v, held, k in held_here:
            if k >= count:
                break
            group.append(v)
            gpus += v.gpus
            if v.sens < low:
                low = v.sens
            have += held
            if have >= demand:
                break
        if have < demand:
            continue
        key = (gpus, len(group), -low, index)
        if best is None or key < best[0]:
            best = (key, index, group)
    return None if best is None else (best[1], best[2])


def _place_in(level: Level, domain: int, avail: np.ndarray, shape: ClusterShape, demand: int) -> Picked | None:
    if level is Level.MACHINE:
        return [(domain, demand)] if avail[domain] >= demand else None
    if level is Level.RACK:
        masked = np.zeros_like(avail)
        members = shape.rack_nodes[domain]
        masked[members] = avail[members]
        return on_rack(masked, shape, demand)
    return on_network(avail, shape, demand)

