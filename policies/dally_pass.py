"""One pass of Dally's Algorithm 1 (:class:`DallyPass`): the offer order, the offer, the preemption
and the acceptance, one method per step, its per-pass caches its fields.

Part of the Dally policy; :mod:`halyard.policies.dally` says what each piece is and why.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING

import numpy as np

from halyard.datamodel import Allocation, Cluster
from halyard.policies.dally_preemption import Victims, _preempt, _Searches, _Victim, _with_victims
from halyard.policies.dally_stages import OfferSummaries, starvation
from halyard.policies.facts import GpuTypes
from halyard.policies.passstate import PassState
from halyard.policies.placement import build_allocation, usable_gpus
from halyard.policies.plan import Plan
from halyard.policies.reasons import Unplaced, cannot_fit
from halyard.policies.resources import FreeResources
from halyard.policies.topology import Level, Picked, level_of, on_machine, on_rack
from halyard.policies.view import ClusterView, JobInfo, allocation_of
from halyard.policies.waiting_sens import NOT_TOLD, WaitingOrder

if TYPE_CHECKING:
    from halyard.policies.dally import Dally

# PassState: the reason codes a change-set pass told the core, one per waiting job in the kept order
# (WaitingOrder.commit_told, once the core applied the pass).
TOLD_CODES_KEY = "dally/told-codes"

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
    not fit what is free only waits, and its reason is all there is to work out (a loaded
    queue has a thousand such jobs per pass, and walking them was a tenth of Dally's time). The reasons
    of each run of such jobs are given at once, found from the order's demands, so only the jobs that
    fit are looked at one by one; a reason depends on the demand alone while what is free holds.

    With :meth:`tell_changes` (the plan is a change set, Plan.changes_from) a run's reasons are numbered
    (:meth:`WaitingOrder.code`) and compared, as arrays, with those the core holds: only the jobs whose
    reason differs are written (about one in six of the thousand on 20,000 Philly jobs compressed 8x;
    writing them all was a sixth of Dally's time, with the core's upkeep of them)."""

    __slots__ = ("demands", "fits", "fits_total", "held", "ids", "kept", "key", "reasons", "told", "wanted")

    def __init__(self, ids: list[str], demands: list[int], wanted: np.ndarray | None = None) -> None:
        self.ids, self.demands = ids, demands  # the order's job ids and GPU demands
        self.wanted = np.array(demands, dtype=np.int64) if wanted is None else wanted  # the demands, as an array
        self.fits: list[int] = []  # positions in the order whose demand is at most fits_total
        self.fits_total = -1
        self.reasons: dict[int, Unplaced] = {}  # demand -> its reason, while what is free holds
        # Change sets (tell_changes): the reason codes the core holds (None: unknown, all are told), the
        # codes this pass tells (NOT_TOLD where a job was looked at by itself), what a reason depends on
        # besides the demand, and the order's numbered reasons kept for it (WaitingOrder.tail_reasons).
        self.held: np.ndarray | None = None
        self.told: np.ndarray | None = None
        self.key: Callable[[], Hashable] | None = None
        self.kept: WaitingOrder | None = None

    def tell_changes(self, held: np.ndarray | None, kept: WaitingOrder, key: Callable[[], Hashable]) -> None:
        """Write only the reasons that differ from ``held`` (the codes the core holds, in the order; None:
        unknown); a reason is the same for the same demand and ``key()``, so ``kept`` keeps it numbered
        from pass to pass; :attr:`told` gets this pass's codes."""
        self.held, self.kept, self.key = held, kept, key
        self.told = np.full(len(self.ids), NOT_TOLD, dtype=np.int64)

    def forget_reasons(self) -> None:
        """What is free changed (a start): the reasons by demand are worked out again."""
        self.reasons.clear()

    def skip(self, i: int, free_total: int, unplaced: dict[str, Unplaced],
             reason: Callable[[int, int], Unplaced]) -> int:
        """Give the jobs from position ``i`` up to the next one that fits ``free_total`` GPUs their
        reasons (``reason(demand, position)``, asked once per demand) in ``unplaced``; that job's position."""
        if self.fits_total != free_total:
            self.fits, self.fits_total = np.flatnonzero(self.wanted <= free_total).tolist(), free_total
        k = bisect.bisect_left(self.fits, i)
        j = self.fits[k] if k < len(self.fits) else len(self.ids)  # the next job that fits
        if j > i:
            if self.told is not None:
                self._tell(i, j, unplaced, reason)
                return j
            run = self.demands[i:j]
            for demand in set(run).difference(self.reasons):
                self.reasons[demand] = reason(demand, i + run.index(demand))
            unplaced.update(zip(self.ids[i:j], map(self.reasons.__getitem__, run), strict=True))
        return j

    def _tell(self, i: int, j: int, unplaced: dict[str, Unplaced], reason: Callable[[int, int], Unplaced]) -> None:
        """:meth:`skip`'s reasons for positions ``i`` to ``j`` as changes: those that differ from :attr:`held`."""
        assert self.told is not None and self.kept is not None and self.key is not None
        wanted = self.wanted[i:j]
        lut, reasons = self.kept.tail_reasons(self.key(), int(wanted.max()) + 1)
        codes = lut[wanted]
        if codes.min() < 0:  # demands whose reason is not numbered yet for this key
            for demand in np.unique(wanted[codes < 0]).tolist():
                why = reasons[demand] = reason(demand, i + int(np.argmax(wanted == demand)))
                lut[demand] = self.kept.code(why)
            codes = lut[wanted]
        self.told[i:j] = codes
        ids, demands = self.ids, self.demands
        if self.held is None:
            unplaced.update(zip(ids[i:j], map(reasons.__getitem__, demands[i:j]), strict=True))
            return
        for p in (np.flatnonzero(codes != self.held[i:j]) + i).tolist():
            unplaced[ids[p]] = reasons[demands[p]]


class DallyPass:
    """One pass of Dally's (§4.3: "The scheduler then periodically generates resource offers to jobs in
    the wait queue"): offers in increasing Nw_sens (§4.3.1, :meth:`offer_order`), each accepted or
    rejected by the job itself (Algorithm 1, :meth:`offer`), a failed offer followed by the Nw_sens
    preemption stage (:meth:`preempt_for`), an acceptance recorded for the auto-tuner (:meth:`accept`).
    With Halyard's ``migrate`` and ``lease`` options, running jobs join the offers (:meth:`reoffer`).

    Its fields are the pass's caches, valid within the pass only (the pass's exact shortcuts, each
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
        # since the "no victim at all" test counts them (they are most of the running jobs).
        self._victims: Victims | None = None if policy.preemption and view.running else []
        self.unlisted = 0
        self.free_total: int | None = self.free.total_gpus
        self.start_total: int = view.free.total_gpus  # what the reasons quote
        self.offers: dict[GpuTypes, np.ndarray] = {}
        self.summaries = OfferSummaries(view.shape) if policy.shortcuts else None  # of the offers' arrays
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
        if order is self.waiting and self.view.reasons is not None:  # the kept order alone: tell changes only
            self.plan.changes_from(self.view.reasons)
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
        if self.plan.since is not None:  # the codes the core will hold, kept by Dally.on_applied
            told = self.tail.told if self.tail is not None else None
            self.state.put(TOLD_CODES_KEY, told if told is not None else np.full(n, NOT_TOLD, dtype=np.int64))
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
                                                                    self.offers, lazy=self.policy.shortcuts,
                                                                    summaries=self.summaries)
            if decision is None and self.nw_preemption.may_preempt(self.victims(), sens):
                decision = self.preempt_for(job, sens, wait_s, t_mc, t_rk)
            if decision is None:  # lines 11 and 19: rejected (or the offer is too small)
                summary = None if self.summaries is None else self.summaries.of(avail)
                self.plan.wait(job.job_id, self.delay.why(self.view, job, avail, wait_s, t_mc, t_rk, summary=summary))
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
            self.tail.forget_reasons()
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
            waiting = self.policy._waiting
            self.tail = _WaitingTail(waiting.ids, waiting.demands, waiting.wanted())
            if self.plan.since is not None:
                self.tail.tell_changes(waiting.told_codes(self.plan.since), waiting, self._tail_key)
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

    def _tail_key(self) -> tuple[bool, int]:
        """What :meth:`_tail_reason` depends on besides the demand: whether any job may be preempted at all,
        and the free GPU count its reason quotes."""
        if not self._victims and not self.unlisted:
            assert self.free_total is not None
            return True, self.free_total
        return False, self.start_total

    def _tail_reason(self, demand: int, position: int) -> Unplaced:
        if not self._victims and not self.unlisted:
            assert self.free_total is not None
            return self.too_few(demand, self.free_total)
        return self.no_victim(self.order[position])


def allocation_level(allocation: Allocation, cluster: Cluster) -> Level:
    """The consolidation level of an allocation: one machine, one rack, or the network."""
    nodes = [cluster.node(p.node) for p in allocation.nodes if p.gpus]
    if len(nodes) == 1:
        return Level.MACHINE
    return Level.RACK if len({n.rack_index for n in nodes}) == 1 else Level.NETWORK
