"""Dally's preemption stage (:class:`NwSensPreemption`): the running jobs that may be preempted
(victims) and the cheapest set of them that frees one machine or one rack for a given job.

Part of the Dally policy; :mod:`halyard.policies.dally` says what each piece is and why.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator, Sequence
from itertools import takewhile

import numpy as np

from halyard.datamodel import Cluster
from halyard.policies.dally_stages import PRUNE_SLACK, JobStatics, Spreads, nw_sens
from halyard.policies.facts import ClusterShape, GpuTypes
from halyard.policies.passstate import PassState
from halyard.policies.placement import usable_gpus
from halyard.policies.plan import Plan
from halyard.policies.resources import FreeResources
from halyard.policies.running_sens import RunningNwSens
from halyard.policies.stages import Preemption
from halyard.policies.topology import Level, Picked, level_of, on_network, on_rack
from halyard.policies.view import ClusterView, JobInfo, allocation_of


class _Victim:
    """A running job that may be preempted; where its GPUs are is worked out only if asked
    (most passes never look: nothing waits that a preemption would help), and kept in
    ``spreads`` (:meth:`JobStatics.spreads`) for later passes while the job keeps its allocation."""

    __slots__ = ("_cluster", "_spots", "_spreads", "_where", "allocation", "gpus", "job", "sens")

    def __init__(self, job: JobInfo, sens: float, cluster: Cluster, spreads: Spreads | None = None) -> None:
        self.job, self.sens, self._cluster, self._spreads = job, sens, cluster, spreads
        self.allocation = allocation_of(job)  # the one it was made for (a kept victim serves only while it holds)
        self.gpus = self.allocation.num_gpus
        self._where: tuple[dict[int, int], dict[int, int]] | None = None
        self._spots: tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]] | None = None

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

    def spots(self) -> tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]]:
        """:meth:`where` as pairs (index, GPUs held there) where it holds any, per node and per rack: what
        :func:`_holders` walks for every victim of every pass (the victim is kept from pass to pass)."""
        if self._spots is None:
            per_node, per_rack = self.where()
            self._spots = (tuple((i, held) for i, held in per_node.items() if held),
                           tuple((i, held) for i, held in per_rack.items() if held))
        return self._spots


class _LazyVictims:
    """A pass's victims worst first, as :meth:`NwSensPreemption.listed` lists them, each :class:`_Victim` made
    only when an iteration first reaches it (~150 victims per list on a loaded trace, of which a
    waiting job is eligible for a handful, and ``_Victim`` objects were 6% of Dally's time). It
    iterates, tests empty and removes as the list would: the made victims, less those removed, then the
    rest in order. Its Nw_sens are in decreasing order without NaN, so the victims above a bound (those a
    job may preempt) are found by bisection (:meth:`above`).

    ``kept``: job id -> the :class:`_Victim` an earlier pass made for it, reused (with this pass's Nw_sens)
    while the job holds the same allocation, and where new ones are kept (a loaded Philly trace
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
        ``takewhile`` over the victims gives, without a step per victim (that walk was 6% of
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

    def first_sens(self) -> float | None:
        """The first victim's Nw_sens (the highest), None if there is none: what iterating gives first, without
        making a generator (asked at every offer that does not fit)."""
        if self._made:
            return self._made[0].sens
        if self._next < len(self._order):
            self._make(self._next + 1)
            return self._made[0].sens
        return None

    def remove(self, victim: _Victim) -> None:
        i = self._made.index(victim)
        del self._made[i], self._made_neg[i]


Victims = list[_Victim] | _LazyVictims


class _Searches:
    """A pass's preemption searches: the searches (level, demand, GPU types, eligible victims) that found
    nothing, kept while neither the free GPUs nor the victims change, so a job asking the same is
    answered at once (65% of the searches on a loaded trace were repeats), and each level's
    :func:`_holders`, which jobs of other demands and Nw_sens share, kept while the victims do not
    change: a start changes only what is free (:meth:`taken`). The eligible victims of any job are a
    prefix of the victims, worst first, so one level's holders serve every job: they are grown to the
    longest prefix asked for, and a search reads only the positions below its own count
    (holders built afresh per count and after every start were 7.5% of dally's time on 20,000 Philly
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
        this was the pass's longest loop on a loaded trace), and listed lazily
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
        if isinstance(victims, _LazyVictims):
            top = victims.first_sens()
            if top is None:
                return False
            return top >= sens + self.min_gain if self.min_gain > 0.0 else top > sens
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
        types = self.statics.of(view, job).gpu_types  # (view.gpu_types_for(job.spec), kept per job)
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
    own (walking every victim for every machine of a large cluster was most of Dally's time
    on a loaded trace); with the ``holders`` of ``eligible[:start]``, those grown by the rest."""
    if holders is None:
        holders = {}
    if level is Level.NETWORK:
        if start < len(eligible):
            holders.setdefault(-1, []).extend((eligible[k], eligible[k].gpus, k) for k in range(start, len(eligible)))
        return holders
    side = 0 if level is Level.MACHINE else 1  # of spots(): per node, per rack
    found = holders.get
    for k in range(start, len(eligible)):
        v = eligible[k]
        for index, held in (v._spots or v.spots())[side]:  # (no call once located)
            here = found(index)
            if here is None:
                holders[index] = [(v, held, k)]
            else:
                here.append((v, held, k))
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
