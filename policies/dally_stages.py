"""Dally's ordering and placement stages: the Nw_sens priority (:class:`NwSensOrdering`), delay
scheduling's offer (Algorithm 1, :func:`delay_decision`, :class:`DelayScheduling`) and the per-job
figures they share (:class:`JobStatics`).

Part of the Dally policy; :mod:`halyard.policies.dally` says what each piece is and why.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from halyard.datamodel import Allocation, JobSpec
from halyard.policies.dally_first_fit import FirstFit
from halyard.policies.dally_timers import ACCEPTANCES_KEY, ACCEPTED_KEY, TIMERS_KEY, Acceptance, AutoTuner, TimerSource
from halyard.policies.facts import ClusterFacts, ClusterShape, GpuTypes
from halyard.policies.passstate import PassState
from halyard.policies.placement import build_allocation, no_fit, usable_gpus
from halyard.policies.plan import Plan
from halyard.policies.reasons import Unplaced, by_policy, cannot_fit
from halyard.policies.resources import FreeResources
from halyard.policies.stages import Ordering, Placement
from halyard.policies.topology import Level, Picked, on_machine, on_network, on_rack
from halyard.policies.view import ClusterView, JobInfo

# JobStatics keeps entries of finished jobs until they outnumber the live ones twice over plus this
# many (a bound on its memory; the figure only sets how often it is swept).
PRUNE_SLACK = 1024


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

    On a loaded trace every pass computes the Nw_sens of every running job and the
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


def machine_offer(avail: np.ndarray, shape: ClusterShape, demand: int, first_fit: FirstFit | None = None,
                  ) -> Picked | None:
    """Algorithm 1 lines 5-8 alone: one machine of the offer ``avail`` with ``demand`` GPUs, or None. They read
    neither timer, so a caller that needs the timers only when no machine fits asks this first and
    :func:`delay_decision` (with ``machine_tried``) only then (:meth:`DelayScheduling.decide`'s ``lazy``)."""
    return on_machine(avail, demand) if first_fit is None else first_fit.on_machine(avail, shape, demand)


def delay_decision(avail: np.ndarray, shape: ClusterShape, demand: int, starvation_s: float,
                   machine_timer_s: float, rack_timer_s: float, first_fit: FirstFit | None = None,
                   machine_tried: bool = False, summary: OfferSummary | None = None) -> tuple[Picked, Level] | None:
    """Algorithm 1 on the offer ``avail`` (usable GPUs per node): a placement and its level, or None (reject).
    ``first_fit`` (``+first-fit``, policies/dally_first_fit.py): the GPUs of each tier as cluster-sim picks
    them, instead of the best fit; which tier, and whether the job accepts, are the same. ``machine_tried``:
    the caller's :func:`machine_offer` found no machine (lines 5-8 are not asked again). ``summary``: the
    caller's :class:`OfferSummary` of ``avail``, which answers a tier that cannot hold ``demand`` without
    looking for a placement in it (the best fit's :func:`on_rack` finds none exactly when no rack has ``demand``
    usable GPUs, :func:`on_network` when the offer has fewer in all)."""
    ff = first_fit
    if not machine_tried:
        picked = machine_offer(avail, shape, demand, ff)  # lines 5-9
        if picked is not None:
            return picked, Level.MACHINE
    if starvation_s < machine_timer_s:                      # lines 10-12
        return None
    if ff is None:  # lines 13-17
        picked = None if summary is not None and summary.largest_rack() < demand else on_rack(avail, shape, demand)
    else:
        picked = ff.on_rack(avail, shape, demand)
    if picked is not None:
        return picked, Level.RACK
    if starvation_s < rack_timer_s:                         # lines 18-20
        return None
    # line 21 (None: the offer is too small)
    if ff is None:
        picked = None if summary is not None and summary.usable()[0] < demand else on_network(avail, shape, demand)
    else:
        picked = ff.on_network(avail, shape, demand)
    return None if picked is None else (picked, Level.NETWORK)


# The reasons of Algorithm 1 lines 10-11 and 18-19 (DelayScheduling.why).
MACHINE_WAIT = ("delay timer: waits for one machine with {:#GPU} ({:.0f} s of its {:.0f} s machine timer); the best "
                "machine has {} usable free")
RACK_WAIT = ("delay timer: waits for one rack with {:#GPU} ({:.0f} s of its {:.0f} s rack timer); the best rack has "
             "{} usable free")


def rejection(stage: str, view: ClusterView, job: JobInfo, starvation_s: float, machine_timer_s: float,
              rack_timer_s: float, summary: OfferSummary) -> Unplaced | None:
    """Algorithm 1 for ``job``'s bid when it finds no machine in the offer ``summary`` is of (lines 5-8 already
    asked), answered from the summary alone where it rejects: the reason :meth:`DelayScheduling.why` gives (lines
    10-11, 18-19, or too few usable GPUs in all), or None where a rack or the network may hold it (the caller asks
    :func:`delay_decision`). The best fit's :func:`on_rack` finds nothing exactly when no rack has the demand, and
    :func:`on_network` when the offer has fewer usable GPUs in all (as :func:`delay_decision` reads its summary).
    What a re-auction's waiting jobs, rejected one after another on one offer, mostly get (policies/dally.py
    ``Dally._reauction``): one call instead of the bid's, the offer's and the reason's."""
    demand = job.spec.num_gpus
    if starvation_s < machine_timer_s:
        return by_policy(stage, MACHINE_WAIT, demand, starvation_s, machine_timer_s, summary.largest_node())
    if summary.largest_rack() >= demand:
        return None
    if starvation_s < rack_timer_s:
        return by_policy(stage, RACK_WAIT, demand, starvation_s, rack_timer_s, summary.largest_rack())
    usable = summary.usable()
    return no_fit(stage, view, job, demand, summary.avail, usable) if usable[0] < demand else None


class OfferSummaries:
    """A pass's :class:`OfferSummary` of each offer array it asks about, kept with the array (a summary serves only
    the very array object it was made of, which it holds: a pass that works out a new offer after a take gets a new
    summary; the arrays must not change in place). Dally's own pass (policies/dally_pass.py) offers one array to
    the waiting jobs until one of them takes GPUs, and finding no machine, its largest rack and its usable GPUs for
    each of them was a third of the pass's offers on loaded Philly (issue 38)."""

    __slots__ = ("_kept", "shape")

    def __init__(self, shape: ClusterShape) -> None:
        self.shape = shape
        self._kept: dict[int, OfferSummary] = {}  # id of the array -> its summary (which keeps the array alive)

    def of(self, avail: np.ndarray) -> OfferSummary:
        summary = self._kept.get(id(avail))
        if summary is None or summary.avail is not avail:
            summary = self._kept[id(avail)] = OfferSummary(avail, self.shape)
        return summary


class OfferSummary:
    """What a rejected offer's answer and reason read of one offer ``avail`` (usable GPUs per node): its largest
    node, its largest rack, and its usable GPUs and the nodes that have any, each worked out once, when first
    asked, with the very expressions :func:`delay_decision` and :meth:`DelayScheduling.why` would evaluate. Valid
    while ``avail`` does not change (Dally's re-auction makes a new one after every take: policies/dally_bids.py),
    so the waiting jobs of a re-auction, rejected one after another on the same offer, share them."""

    __slots__ = ("_node", "_rack", "_usable", "avail", "shape")

    def __init__(self, avail: np.ndarray, shape: ClusterShape) -> None:
        self.avail, self.shape = avail, shape
        self._node: int | None = None
        self._rack: int | None = None
        self._usable: tuple[int, int] | None = None

    def largest_node(self) -> int:
        if self._node is None:
            self._node = int(self.avail.max(initial=0))
        return self._node

    def largest_rack(self) -> int:
        if self._rack is None:
            shape = self.shape
            self._rack = int(np.bincount(shape.rack, weights=self.avail, minlength=shape.n_racks).max(initial=0))
        return self._rack

    def usable(self) -> tuple[int, int]:
        """(usable GPUs, nodes with any)."""
        if self._usable is None:
            self._usable = (int(self.avail.sum()), int(np.count_nonzero(self.avail)))
        return self._usable


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
        # ``+first-fit`` (policies/dally_first_fit.py): cluster-sim's choice of GPUs in a tier; None: best fit
        self.first_fit: FirstFit | None = None

    def job_timers(self, view: ClusterView, job: JobInfo, state: PassState | None = None,
                   static: JobStatic | None = None) -> tuple[float, float]:
        """(T_Mc, T_Rk) for ``job``: zero for a level its demand cannot fit (§4.3.2); with the pass's
        ``state``, counting its acceptances so far (and worked out once per demand and count of that
        demand's acceptances: each acceptance of any demand made every demand's timers anew). ``static``: the
        job's :class:`JobStatic` if the caller has it."""
        demand = job.spec.num_gpus
        if static is None:
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
               offers: dict[GpuTypes, np.ndarray] | None = None, lazy: bool = False,
               summaries: OfferSummaries | None = None,
               ) -> tuple[tuple[Picked, Level] | None, np.ndarray, float, float, float]:
        """Algorithm 1 for ``job`` on ``free``: (decision or None, usable GPUs, starvation, T_Mc, T_Rk).

        ``offers``: usable GPUs per GPU-type set on this ``free``, filled and read here; the caller
        empties it whenever ``free`` changes. ``lazy``: the caller reads the timers only when the job
        takes no machine (lines 5-8 need none), so they are worked out only then, and are NaN when it
        takes one (a loaded re-auction's bids mostly take a machine, and their timers, each acceptance of
        the pass making its demand's anew, were a sixth of ``dally``'s pass; :meth:`job_timers` is a pure
        function of the pass, so asking it less changes no answer). ``summaries`` (with ``lazy``): the pass's
        :class:`OfferSummaries`, whose largest node answers "no machine" without looking for one."""
        wait_s = starvation(view, job)
        types = self.statics.of(view, job).gpu_types
        avail = None if offers is None else offers.get(types)
        if avail is None:
            avail = usable_gpus(free, view.shape, types)
            if offers is not None:
                offers[types] = avail
        summary = None if summaries is None else summaries.of(avail)
        tried = lazy and summary is not None and summary.largest_node() < job.spec.num_gpus  # (on_machine: None)
        return self.offer(view, job, avail, wait_s, state, lazy, tried, summary)

    def offer(self, view: ClusterView, job: JobInfo, avail: np.ndarray, wait_s: float, state: PassState,
              lazy: bool = False, machine_tried: bool = False, summary: OfferSummary | None = None,
              timers: tuple[float, float] | None = None,
              ) -> tuple[tuple[Picked, Level] | None, np.ndarray, float, float, float]:
        """:meth:`decide` on the offer ``avail`` with starvation ``wait_s``; ``machine_tried`` (with ``lazy``): the
        caller found no machine already (lines 5-8 are not asked again); ``summary``: :func:`delay_decision`'s;
        ``timers``: :meth:`job_timers`' answer if the caller has it."""
        demand = job.spec.num_gpus
        if lazy and not machine_tried:
            picked = machine_offer(avail, view.shape, demand, self.first_fit)
            if picked is not None:
                return (picked, Level.MACHINE), avail, wait_s, math.nan, math.nan
        t_mc, t_rk = self.job_timers(view, job, state) if timers is None else timers
        decision = delay_decision(avail, view.shape, demand, wait_s, t_mc, t_rk, self.first_fit, lazy, summary)
        return decision, avail, wait_s, t_mc, t_rk

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
            t_mc: float, t_rk: float, free_total: int | None = None, summary: OfferSummary | None = None,
            ) -> Unplaced:
        """Why ``job`` rejected its offer (Algorithm 1 lines 10-11 and 18-19) or got none (``free_total``:
        ``view.free.total_gpus`` if the caller has it; ``summary``: an :class:`OfferSummary` of ``avail``)."""
        demand = job.spec.num_gpus
        if avail is None:
            return cannot_fit(self.name, "needs {:#GPU}; {} free and no running job may be preempted for it",
                              demand, view.free.total_gpus if free_total is None else free_total)
        if summary is None:
            summary = OfferSummary(avail, view.shape)
        if wait_s < t_mc:
            return by_policy(self.name, MACHINE_WAIT, demand, wait_s, t_mc, summary.largest_node())
        if wait_s < t_rk:
            return by_policy(self.name, RACK_WAIT, demand, wait_s, t_rk, summary.largest_rack())
        return no_fit(self.name, view, job, demand, avail, summary.usable())
