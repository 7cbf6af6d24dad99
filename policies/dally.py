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

The presets (policies/registry.py ``DALLY_READINGS``) are two readings of this class. ``dally`` and
``dally-manual`` are the reading of the authors' evaluation: this class with ``reauction``,
``auction-on-release``, ``event-leases`` and ``release-delay`` on, the rules their reference simulator runs
(aakash-sharma/cluster-sim, less its mid-lease bids; run beside it on the same inputs in
docs/reproductions/dally-public-comparison.md, within 5% at 2 and 4 racks, and against Tiresias and Gandiva in
docs/reproductions/dally-reproduction.md). The reading that was the preset before, ``reauction`` with
``staggered`` releases at round boundaries, is ``dally-literal+reauction+staggered``. ``dally-literal`` and
``dally-manual-literal`` are the paper's §4.3 text alone, every option below off (the class's defaults).

Five rules of Halyard's own, none in the paper, are named options, off in the paper's text
(``dally-literal``, ``dally-manual-literal``; registered as ``+migrate``, ``+worse-half``,
``+hysteresis``, ``+lease`` and ``+reauction``; ``dally-literal+migrate+worse-half+hysteresis`` is Halyard's
earlier Dally, docs/reproductions/dally-reproduction.md measures each against the paper's version; the
auto-tuner has two more, ``+drop-short-waits`` and ``+manual-start``, on :class:`AutoTuner`):

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
  read and run beside Halyard in docs/reproductions/dally-public-comparison.md) goes further: at every lease
  end it takes back every job's GPUs, whatever it is offered, and never-run jobs bid first
  (Nw_sens 0); this option gives its placements, not its waits (``reauction`` below is that reading).

* ``reauction`` (``+reauction``): the reading the authors' simulator runs (aakash-sharma/cluster-sim,
  read from its code in docs/reproductions/dally-public-comparison.md; the paper's §4.1 "periodically generates
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
  order (hash-map order; here Halyard's best fit, or with ``+first-fit``, policies/dally_first_fit.py,
  cluster-sim's). ``+reauction`` switches the Nw_sens
  preemption between lease ends off, as the simulator has none: jobs lose GPUs only at lease ends.

Two more of the reference simulator's semantics are options on ``+reauction``, in
policies/dally_clustersim.py: ``+staggered`` (a lease end's jobs released one at a time, each release
an auction of what is free then) and ``+hoard`` (running jobs bid between their lease ends and hold
what they win, unused, until they finish: a side effect of its iteration bookkeeping). Three more say when
a lease ends and its auction runs, in policies/dally_release.py: ``+auction-on-release`` (at the lease's own end,
between rounds: the core runs a pass then), ``+event-leases`` (at the end of the job's iteration event that
crosses it), ``+release-delay`` (1 s per released GPU after it) and ``+no-rounds`` (no pass at round
boundaries, which cluster-sim does not have).

``+no-preemption`` (a measurement option, not a rule) switches the Nw_sens preemption off: the
reference simulator preempts nobody between lease ends, so the side-by-side runs Halyard's
``dally-manual-literal+no-preemption`` beside it with no lease ends.

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

Where each piece lives (each module imports only those above it):

* policies/dally_timers.py: the delay timers, :class:`ManualTimers` and the
  :class:`AutoTuner` (:func:`tuned_timer`).
* policies/dally_stages.py: :func:`nw_sens`, the ordering (:class:`NwSensOrdering`)
  and delay scheduling's offer (:func:`delay_decision`, :class:`DelayScheduling`).
* policies/dally_preemption.py: the victims and :class:`NwSensPreemption`.
* policies/dally_pass.py: :class:`DallyPass`, one pass of Algorithm 1.
* policies/dally_bids.py: the ``reauction`` bids' exact shortcuts (kept offers, the best fit by bisection, the
  trusted takes of a pass's own ledger).
* this module: the :class:`Dally` policy, its options (:data:`DALLY_OPTIONS`,
  :func:`with_option`) and the moves they write.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from halyard.datamodel import Allocation, ValidationError
from halyard.policies.adjusting import adjust, applied, rejected
from halyard.policies.dally_bids import CarriedOffers, HeldParts, KeptOffers, parts_of
from halyard.policies.dally_pass import TOLD_CODES_KEY, DallyPass
from halyard.policies.dally_preemption import NwSensPreemption
from halyard.policies.dally_stages import DelayScheduling, JobStatic, NwSensOrdering, rejection, starvation
from halyard.policies.dally_timers import AutoTuner, TimerSource
from halyard.policies.facts import ClusterShape
from halyard.policies.passstate import PassState
from halyard.policies.placement import build_allocation, usable_gpus
from halyard.policies.plan import Plan
from halyard.policies.resources import FreeResources, LedgerPart
from halyard.policies.stages import Adjuster
from halyard.policies.topology import Level, Picked
from halyard.policies.view import ClusterView, JobInfo, allocation_of
from halyard.policies.waiting_sens import WaitingOrder

if TYPE_CHECKING:
    from halyard.policies.dally_clustersim import HoardedGpus
    from halyard.policies.dally_release import ReleaseAuctions
HOARD_REAUCTION_KEY = "dally/hoard-reauction"  # PassState: a lease end of +hoard, which bid as it went
# Preemption hysteresis of the ``+hysteresis`` option (Halyard's choice, not in the paper; see the
# module docstring): a victim's Nw_sens must exceed the beneficiary's by at least this much.
MIN_GAIN = 0.05
# ``+lease`` (Halyard's reading of the reference simulator, not in the paper): a lease lasts this
# many rounds of the view. Our choice: one round, the unit REFERENCE-NUMBERS gives the reference
# simulator's timers in ("delay timers counted in lease units"), which the timer floors (dally_timers.py) read as
# the round too.
LEASE_ROUNDS = 1
LEASES_KEY = "dally/lease-ends"  # PassState: job id -> (last assignment, lease index) seen this pass


class Dally:
    """Delay scheduling with auto-tuned (or manual) timers and Nw_sens preemption.

    Its parts are stages: :class:`NwSensOrdering`'s order, :class:`DelayScheduling`'s offers and
    timers, and :class:`NwSensPreemption`, the placement-aware preemption that needs both at once;
    :class:`DallyPass` runs one pass of them."""

    needs_rounds = True  # timers elapse and Nw_sens drifts with time alone
    resource_sensitive = False
    # The pass's exact shortcuts: the waiting jobs' order kept from pass to pass, the
    # tail of the order where jobs can only wait answered with their reasons alone, and victims made
    # only when reached and kept from pass to pass (_LazyVictims). Off only in the tests that check they
    # change no decision and no reason.
    shortcuts = True
    honours: frozenset[str] = frozenset()  # neither priority nor deadlines (§4.3)
    starvation = staticmethod(starvation)
    # A pass the core runs between rounds (Policy, SchedulingCore.wake_at): only with ``+auction-on-release``.
    wake_at: Callable[[ClusterView], float] | None = None

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
        # ``+auction-on-release`` (policies/dally_release.py): each lease ends, and is re-auctioned, at its own instant.
        self.release: ReleaseAuctions | None = None
        # (shape, its per-node lists) for the re-auction's kept offers (KeptOffers; a memo, not learning)
        self._lists: tuple[ClusterShape, tuple[list[int], list[int], list[int], list[int]]] | None = None
        self._held = HeldParts()  # running jobs' allocations as ledger parts, for the re-auction (a memo)
        self._carried: CarriedOffers | None = None  # the last re-auction's offers, for the next (a memo)

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
        if self.reauction:  # (+staggered, +hoard: policies/dally_clustersim.py; the rest policies/dally_release.py)
            release = self.release
            when = [f"every {self.lease_rounds:g} rounds"] if release is None else [
                f"at each {self.lease_rounds:g}-round lease's own end",
                *(["with the iteration event that crosses it"] if release.events else []),
                *(["auctioned 1 s per released GPU later"] if release.delay else []),
                *(["no round passes"] if release.no_rounds else [])]
            preemption = ", ".join([f"lease-end re-auction {when[0]}", *when[1:],
                                    *(["leases released one at a time"] if self.staggered is not None else []),
                                    *(["running jobs hoard what they win"] if self.hoard is not None else [])])
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
        codes = state.get(TOLD_CODES_KEY)
        if codes is not None and view.reasons is not None and plan.since is view.reasons:
            self._waiting.commit_told(codes, view.reasons)  # what the core holds now (DallyPass.run)
        else:
            self._waiting.forget_told()
        self.delay.on_applied(view, plan, state)
        self.nw_preemption.on_applied(view, plan, state)
        if self.hoard is not None:
            self.hoard.on_applied(state)
        if self.release is not None:
            self.release.on_applied(view, state)
        self._held.prune(view.running)
        if self.lease or self.reauction:
            self._lease_ends = {k: v for k, v in self._lease_ends.items() if k in view.running}
            self._lease_ends.update(state.get(LEASES_KEY, {}))
        applied(self.adjusters, view, plan, state)

    def on_rejected(self, view: ClusterView, plan: Plan, state: PassState) -> None:
        self._waiting.forget_told()
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
        free = view.free.copy()
        if self.hoard is not None:
            state.put(HOARD_REAUCTION_KEY, True)
        released = [view.running[job_id] for job_id in sorted(ended)]
        # (the bids' own offers, machines and takes: policies/dally_bids.py; the ledger is trusted without +hoard,
        # whose bids change ``free`` behind the kept offers)
        offers = KeptOffers(free, view.shape, self._shape_lists(view.shape), self.delay.first_fit is None,
                            self._carried) if self.shortcuts else None
        self._carried = None
        held_parts = self._held if offers is not None and self.hoard is None else None
        for job in released:
            if held_parts is not None:
                free.give_parts(held_parts.of(view.cluster, job.job_id, allocation_of(job))[0])
            else:
                free.give(allocation_of(job))
        order = self._bid_order(view, released)
        starts: list[tuple[str, Allocation]] = []
        moves: dict[str, Allocation] = {}
        moved: dict[str, tuple[tuple[LedgerPart, ...], tuple[LedgerPart, ...]]] = {}  # moves' parts (held, target)
        statics = self.delay.statics
        stage = self.delay.name
        for job in order:
            lease_ended = job.job_id in ended
            static = statics.of(view, job)
            if not lease_ended and offers is not None and offers.best_fit:
                # A waiting bid of a demand and GPU types whose machine was missed since the last take, its timers
                # with it (KeptOffers.miss): it finds no machine either; where the offer's summary says it rejects,
                # it waits with the reason _bid and DelayScheduling.why would give (rejection), without asking them.
                timers = offers.misses.get((static.gpu_types, job.spec.num_gpus))  # (KeptOffers.missed)
                if timers is not None:
                    why = rejection(stage, view, job, starvation(view, job), timers[0], timers[1],
                                    offers.summary(static.gpu_types))
                    if why is not None:
                        plan.wait(job.job_id, why)
                        continue
            picked = None
            if lease_ended and offers is not None and offers.best_fit:
                # A lease end's bid (starvation zero) with no machine missed for its demand and types since the last
                # take: Algorithm 1 lines 5-8 on the kept offer, as _bid asks them first (its timers only without one).
                types, demand = static.gpu_types, job.spec.num_gpus
                if offers.missed(types, demand) is None:
                    picked = offers.machine(types, demand)
            decision: tuple[Picked, Level] | None
            if picked is not None:
                decision, wait_s = (picked, Level.MACHINE), 0.0
            else:
                decision, avail, wait_s, t_mc, t_rk = self._bid(view, job, free, state, lease_ended, offers, static)
            if decision is None:
                if lease_ended:
                    plan.preempt(job.job_id)  # back into the wait queue (§4.3.2)
                else:
                    summary = None if offers is None else offers.summary(static.gpu_types)
                    plan.wait(job.job_id, self.delay.why(view, job, avail, wait_s, t_mc, t_rk, summary=summary))
                continue
            picked, level = decision
            held = allocation_of(job) if lease_ended else None
            if held_parts is not None:
                parts, below = held_parts.of(view.cluster, job.job_id, held) if held is not None else ((), None)
                if held is not None and held_parts.builds_as(free, picked, parts, below):
                    allocation = held  # it takes back what it held (most bids at a lease end: the same value, unbuilt)
                else:
                    held_as = parts
                    allocation = build_allocation(free, picked)
                    parts = parts_of(picked, allocation)
                    if held is not None and _node_bits(parts) != _node_bits(held_as):  # (as _gpus_of's, below)
                        moved[job.job_id] = (held_as, parts)
                free.take_parts(parts)  # (built from this ledger's offer: take's checks cannot fail)
            else:
                allocation = build_allocation(free, picked)
                free.take(allocation)
            if offers is not None:
                offers.took(picked)
            self.delay.accept(view, job, level, wait_s, state)
            if self.hoard is not None:  # ``+hoard``: its bid between lease ends, at its place in the order
                self.hoard.bid_one(self, view, state, job, free)
                offers = None  # (what it took is not followed: the offers are worked out afresh from here)
            if held is None:
                starts.append((job.job_id, allocation))
            elif held_parts is not None:
                if job.job_id in moved:
                    moves[job.job_id] = allocation
            elif allocation is not held and _gpus_of(allocation) != _gpus_of(held):
                moves[job.job_id] = allocation
        _write_moves(plan, view, moves, starts, moved if held_parts is not None else None)
        if offers is not None:
            self._carried = offers.carry()  # (for the next lease end's KeptOffers)
        return free

    def _bid_order(self, view: ClusterView, released: list[JobInfo]) -> list[JobInfo]:
        """``reauction``'s bidders, the waiting jobs and the lease-ended ``released``, in increasing Nw_sens (a job
        that never ran at :attr:`_never_ran_sens`), then submission, then arrival.

        With :attr:`shortcuts` and the view's event log the waiting jobs come in the order kept from pass to pass
        (:class:`WaitingOrder`, as Dally's own pass reads them: a waiting job's Nw_sens does not move while it
        waits) and the released ones are put in their places (:meth:`WaitingOrder.merged`): the same order as
        sorting all of them, without every waiting job's Nw_sens worked out and sorted at every lease end."""
        now = view.now

        def waiting_sens(job: JobInfo) -> float:
            return self._never_ran_sens if job.run_time_s(now) <= 0.0 else self.sensitivity(view, job)

        keyed = [((self.sensitivity(view, job), job.spec.submit_time, job.arrival_seq), job) for job in released]
        if self.shortcuts and view.events is not None and view.jobs is not None:
            self._waiting.ranked(view, waiting_sens)
            order = self._waiting.merged(keyed)
            if order is not None:
                return order
        sens = {job.job_id: waiting_sens(job) for job in view.pending}
        sens.update({job.job_id: key[0] for key, job in keyed})
        return sorted([*view.pending, *released], key=lambda j: (sens[j.job_id], j.spec.submit_time, j.arrival_seq))

    def _bid(self, view: ClusterView, job: JobInfo, free: FreeResources, state: PassState, lease_ended: bool,
             offers: KeptOffers | None = None, static: JobStatic | None = None,
             ) -> tuple[tuple[Picked, Level] | None, np.ndarray, float, float, float]:
        """Algorithm 1 for one bid of ``reauction``'s pass (:meth:`DelayScheduling.decide`'s answer): a
        lease-ended job's last assignment is this lease end, so its starvation is zero (lines 1-2).

        With :attr:`shortcuts` the timers are worked out only when the job takes no machine (NaN when it
        does: the callers read them only for a job that takes nothing) and ``offers`` (the pass's usable GPUs,
        kept as its bids take them) stands for ``usable_gpus`` of ``free``, and with the best fit finds its
        machine (:meth:`KeptOffers.machine`, policies/dally_bids.py). ``static``: the job's figures if the caller
        has them."""
        if static is None:
            static = self.delay.statics.of(view, job)
        types = static.gpu_types
        wait_s = 0.0 if lease_ended else starvation(view, job)
        if offers is None:
            return self.delay.offer(view, job, usable_gpus(free, view.shape, types), wait_s, state,
                                    lazy=self.shortcuts)
        avail = offers.of(types)
        if not offers.best_fit:
            return self.delay.offer(view, job, avail, wait_s, state, lazy=True)
        demand = job.spec.num_gpus
        timers = offers.missed(types, demand)
        if timers is None:
            picked = offers.machine(types, demand)
            if picked is not None:  # (lines 5-8: no timer read)
                return (picked, Level.MACHINE), avail, wait_s, math.nan, math.nan
            timers = offers.miss(types, demand, self.delay.job_timers(view, job, state, static))
        return self.delay.offer(view, job, avail, wait_s, state, lazy=True, machine_tried=True,  # (lines 10-21)
                                summary=offers.summary(types), timers=timers)

    def _shape_lists(self, shape: ClusterShape) -> tuple[list[int], list[int], list[int], list[int]]:
        """The GPUs, CPUs, memory and rack of each node of ``shape`` as lists (what NodeOffer reads), once per shape."""
        kept = self._lists
        if kept is None or kept[0] is not shape:
            kept = self._lists = (shape, (shape.gpus.tolist(), shape.cpus.tolist(), shape.memory_mb.tolist(),
                                          shape.rack.tolist()))
        return kept[1]

    def _ended_leases(self, view: ClusterView, state: PassState) -> set[str]:
        """``lease``: the running jobs whose lease has ended since their last re-offer (recorded in
        the pass's state; kept by :meth:`on_applied`). With ``+auction-on-release``, its leases'."""
        if self.release is not None:
            return self.release.ended(view, state)
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


def _node_bits(parts: tuple[LedgerPart, ...]) -> dict[int, int]:
    """The GPU bits per node index of an allocation's ledger parts: equal exactly when :func:`_gpus_of` of the two
    allocations are (node indices and names correspond one to one; a part without GPUs holds none)."""
    bits: dict[int, int] = {}
    for index, _, _, _, mask in parts:
        if mask:
            bits[index] = bits.get(index, 0) | mask
    return bits


def _write_moves(plan: Plan, view: ClusterView, moves: dict[str, Allocation],
                 starts: list[tuple[str, Allocation]],
                 parts: dict[str, tuple[tuple[LedgerPart, ...], tuple[LedgerPart, ...]]] | None = None) -> None:
    """``reauction``'s moves, then its ``starts``, into ``plan`` (after its preemptions), so that each
    action finds its GPUs free: a move waits for the moves off its GPUs; a ring of moves is broken into
    preemptions and starts. Empties ``moves``.

    In rounds: every move whose GPUs no other pending move still holds migrates, in ``moves``' order; when
    none can, the first pending move is preempted and started instead. Each move's blockers (the pending
    moves holding its GPUs) are found once through a GPU -> holder index and dropped as they leave, so a
    lease end that re-places every running job costs about the GPUs involved, not the square of the moves
    (tests/test_dally_moves.py holds it to the rounds recomputed from scratch).

    ``parts`` (the re-auction's, policies/dally_bids.py): each move's ledger parts, of what it holds and of its
    target, whose GPU bit masks per node index find the same blockers as the (node, GPU) pairs, a node's masks
    at a time (a move's blocker holds a GPU of its target: on some node their masks share a bit)."""
    if parts is None:
        holders: dict[tuple[str, int], list[str]] = {}
        for job_id in moves:
            for gpu in _gpus_of(allocation_of(view.running[job_id])):
                holders.setdefault(gpu, []).append(job_id)
        blockers = {j: {k for gpu in _gpus_of(a) for k in holders.get(gpu, ()) if k != j} for j, a in moves.items()}
    else:
        on_node: dict[int, list[tuple[str, int]]] = {}
        for job_id in moves:
            for index, _, _, _, mask in parts[job_id][0]:
                on_node.setdefault(index, []).append((job_id, mask))
        blockers = {j: {k for index, _, _, _, mask in parts[j][1] for k, held in on_node.get(index, ())
                        if k != j and held & mask} for j in moves}
    blocks: dict[str, list[str]] = {}
    for j, ks in blockers.items():
        for k in ks:
            blocks.setdefault(k, []).append(j)

    def leave(job_id: str) -> None:
        for j in blocks.pop(job_id, ()):
            blockers[j].discard(job_id)

    while moves:
        ready = [j for j in moves if not blockers[j]]
        if not ready:
            ring = next(iter(moves))
            plan.preempt(ring)
            starts.append((ring, moves.pop(ring)))
            leave(ring)
            continue
        for job_id in ready:
            plan.migrate(job_id, moves.pop(job_id))
        for job_id in ready:
            leave(job_id)
    for job_id, allocation in starts:
        plan.start(job_id, allocation)


def with_option(policy: object, option: str) -> Dally:
    """``policy`` (a Dally) with one of the rules not in the paper switched on: ``migrate``, ``worse-half``,
    ``hysteresis`` (``min_gain`` = :data:`MIN_GAIN`), ``lease``, ``reauction``, ``no-preemption`` (no Nw_sens
    preemption: what aakash-sharma/cluster-sim's Dally does between lease ends; measured in
    docs/reproductions/dally-public-comparison.md), cluster-sim's ``hoard``, ``staggered`` (on ``reauction``) and
    ``first-fit`` (policies/dally_first_fit.py), ``auction-on-release``, ``event-leases``, ``release-delay`` and
    ``no-rounds`` (policies/dally_release.py), or of its auto-tuner ``drop-short-waits`` and ``manual-start``;
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
            raise ValidationError(f"{policy.name!r} cannot take +hoard (a bid between lease ends): it needs "
                                  "+reauction before it", field="policy")
        from halyard.policies.dally_clustersim import HoardedGpus  # (it imports this module)
        policy.hoard = HoardedGpus()
    elif option == "staggered":
        if not policy.reauction:
            raise ValidationError(f"{policy.name!r} cannot take +staggered (a lease end's jobs released one at "
                                  "a time): it needs +reauction before it", field="policy")
        from halyard.policies.dally_clustersim import staggered_reauction
        policy.staggered = staggered_reauction
    elif option == "first-fit":
        from halyard.policies.dally_first_fit import FirstFit
        policy.delay.first_fit = FirstFit()
    elif option == "auction-on-release":
        if not policy.reauction:
            raise ValidationError(f"{policy.name!r} cannot take +auction-on-release (a pass at each lease end): "
                                  "it needs +reauction before it", field="policy")
        from halyard.policies.dally_release import ReleaseAuctions
        policy.release = ReleaseAuctions(policy.lease_rounds)
        policy.wake_at = policy.release.wake_at
    elif option == "event-leases":
        if policy.release is None:
            raise ValidationError(f"{policy.name!r} cannot take +event-leases (a lease ends with an iteration event): "
                                  "it needs +auction-on-release before it", field="policy")
        policy.release.events = True
    elif option == "no-rounds":
        if policy.release is None:
            raise ValidationError(f"{policy.name!r} cannot take +no-rounds (passes only at cluster-sim's auctions): "
                                  "it needs +auction-on-release before it", field="policy")
        policy.release.no_rounds = True
        policy.needs_rounds = False  # (an instance attribute: the class's stays True)
    elif option == "release-delay":
        if policy.release is None:
            raise ValidationError(f"{policy.name!r} cannot take +release-delay (a lease end's auction 1 s per GPU "
                                  "later): it needs +auction-on-release before it", field="policy")
        policy.release.delay = True
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
                 "staggered", "first-fit", *TUNER_OPTIONS, "auction-on-release", "release-delay",
                 "event-leases", "no-rounds")
