"""Two semantics of Dally's reference simulator (aakash-sharma/cluster-sim, read and run beside Halyard
in docs/reproductions/dally-public-comparison.md) that its paper does not have, as options on ``+reauction``
(policies/dally.py), off by default: ``+staggered`` (:func:`staggered_reauction`) and ``+hoard``
(:class:`HoardedGpus`).

``+staggered``: a lease end's jobs are released one at a time, each release an auction of what is free
then. Not in the paper (§4.1: the scheduler "periodically generates resource offers"; nothing says
when leases end). In cluster-sim every job's lease ends at its own iteration boundary
(``IntraJobScheduler.endIteration`` once ``GPU.hasLeaseExpired``), its GPUs come back
``CHECKPOINTING_OVERHEAD_PER_GPU`` (1 s) per GPU later (a ``ResourceAvailableEvent``), and each such
event is an auction (``InterJobScheduler.multiGPUResourceAllocator``) in which the waiting jobs bid in
increasing Nw_sens for the GPUs free at that instant: the released job's, and whatever earlier auctions
left, while every other job keeps its GPUs. Halyard's ``+reauction`` ends every lease of a round in one
pass and offers all their GPUs at once, so a job that needs a whole rack finds one the moment the leases
end. Here the jobs whose leases ended in the pass are released in the order their leases began (last
assignment, then arrival), and after each release the waiting jobs (the released ones among them, with
zero starvation) bid for what is free, as :meth:`Dally._reauction` lets them. Not kept: the 1 s per GPU
(every release of the pass is at the pass's instant) and auctions between passes; those are
policies/dally_release.py's options. That module says why, once releases fall at their own instants, the
releases of one instant are one auction in cluster-sim (its ``END_ITERATION`` events all run before any
``RESOURCE_AVAILABLE``), which ``+reauction`` without ``+staggered`` is. The auctions run
incrementally (policies/dally_staggered.py: Algorithm 1 only for the bidders that accept), with the
same plan as offering every bidder every release.

``+hoard``: running jobs bid between their lease ends and keep what they win, unused. Not in the paper.
§4.3.2 offers resources to the jobs that *wait* ("resource offers ... in increasing Nw_sens"; a
preempted job "is reintroduced into the wait queue"); a running job holds its placement. In cluster-sim
a running job bids in every auction during its lease, whatever it runs on:

* ``IntraJobScheduler.startIteration`` empties the job's next-iteration GPU set
  (``mNextIterationGPUs = new HashSet<GPU>()``) at the start of every iteration event, and
  ``InterJobScheduler.multiGPUResourceAllocator`` lets every job whose next-iteration set is empty bid
  ("Already have enough GPUs. No need to bid" is checked on that set only), so a job in mid-iteration
  bids with the waiting ones, in the same order (``PerGPUBidComparator`` on
  ``DallyIntraJobScheduler.prepareMultiBid``'s ``-Nw_sens``: increasing Nw_sens, a job that never
  finished an iteration at 0) and under the same delay rules
  (``DallyInterJobScheduler.consolidatedGPUAllocation``, for its whole ``max_parallelism``);
* what it wins is leased to it (``GPU.assignGPU``) and added to its next-iteration set
  (``notifyResourceAssignment``); at its next ``IntraJobScheduler.endIteration``, if no lease of its
  current GPUs has expired, ``mNextIterationGPUs = mCurrentIterationGPUs`` drops the won GPUs from the
  set while they stay leased to it, so no auction offers them (``GPU.isLeased``) until the job ends
  (``relinquishAllResources``). Only when the win falls in the iteration its lease ends in does the job
  move onto them.

The side-by-side measures it inside cluster-sim (``--public-variant running-jobs-wait`` of
benchmarks/dally_public_perjob.py lets only waiting jobs bid). In Halyard the jobs that run bid after each
placement of a lease end (:meth:`HoardedGpus.bid_one`; with ``+staggered``, in every release's auction, in
increasing Nw_sens with the waiting jobs), and after any other pass (:meth:`HoardedGpus.bid`), each for its
whole GPU count on what is free, under Algorithm 1 with zero starvation (its lease began in the pass).
What a job wins is held out of every later offer, unused, until the job finishes; it counts as an
acceptance for the auto-tuner, as cluster-sim records it. Not kept: the wins of cluster-sim's last
iteration of a lease, which become the job's next placement (one iteration event in five with the
side-by-side's 60 s events and 300 s leases), and the several auctions per lease a job may win in.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from halyard.datamodel import Allocation
from halyard.policies.dally import HOARD_REAUCTION_KEY, _gpus_of, _write_moves
from halyard.policies.dally_stages import delay_decision, starvation
from halyard.policies.dally_staggered import Auctions, auctions_one_by_one
from halyard.policies.facts import GpuTypes
from halyard.policies.passstate import PassState
from halyard.policies.placement import build_allocation, usable_gpus
from halyard.policies.plan import Migrate, Plan, Preempt, Start
from halyard.policies.reasons import Unplaced
from halyard.policies.resources import FreeResources
from halyard.policies.view import ClusterView, JobInfo, allocation_of

if TYPE_CHECKING:
    from halyard.policies.dally import Dally

HOARDS_KEY = "dally/hoards"  # PassState: job id -> the allocations it won in this pass's mid-lease bids


@dataclasses.dataclass
class HoardedGpus:
    """The GPUs each job won in a mid-lease bid and holds unused until it finishes (module docstring);
    a function of the applied passes (:meth:`on_applied`)."""

    held: dict[str, list[Allocation]] = dataclasses.field(default_factory=dict)

    def hide(self, view: ClusterView) -> ClusterView:
        """``view`` with the held GPUs of the jobs it still knows (running or waiting) not free: no offer
        names them. A job that has finished gives them back."""
        live = {*view.running, *(job.job_id for job in view.pending)}
        self.held = {job_id: allocs for job_id, allocs in self.held.items() if job_id in live}
        if not self.held:
            return view
        free = view.free.copy()
        for allocations in self.held.values():
            for allocation in allocations:
                free.take(allocation)
        return dataclasses.replace(view, free=free)

    def bid(self, policy: Dally, view: ClusterView, state: PassState, plan: Plan,
            free: FreeResources | None) -> FreeResources | None:
        """After a pass that was no lease end (:meth:`Dally._reauction` bids as it goes,
        :meth:`bid_one`): the mid-lease bids of the jobs that run after ``plan``, in increasing Nw_sens,
        on what it left ``free`` (None: the view's). Returns what is left free (None: as the view)."""
        if state.get(HOARD_REAUCTION_KEY):
            return free
        free = free if free is not None else view.free.copy()
        if free.total_gpus == 0:
            return free
        gone = {a.job_id for a in plan.actions if isinstance(a, Preempt)}
        placed = {a.job_id for a in plan.actions if isinstance(a, Start | Migrate)}
        pending = {job.job_id: job for job in view.pending}
        bidders: list[JobInfo] = [job for job_id, job in view.running.items() if job_id not in gone]
        bidders += [pending[job_id] for job_id in placed if job_id in pending]
        now = view.now

        def sens(job: JobInfo) -> float:
            return policy._never_ran_sens if job.run_time_s(now) <= 0.0 else policy.sensitivity(view, job)

        order = sorted(((sens(job), job.spec.submit_time, job.arrival_seq, job) for job in bidders),
                       key=lambda entry: entry[:3])
        for _, _, _, job in order:
            self.bid_one(policy, view, state, job, free)
        return free

    @staticmethod
    def bid_one(policy: Dally, view: ClusterView, state: PassState, job: JobInfo, free: FreeResources) -> None:
        """One mid-lease bid of the running ``job`` for its whole GPU count on ``free`` (taken from it when
        it wins), under Algorithm 1 with zero starvation; recorded in the pass's state."""
        won = state.setdefault(HOARDS_KEY, dict)
        if free.total_gpus < job.spec.num_gpus or job.job_id in won:
            return  # (one win per pass: a win fills cluster-sim's next-iteration set, which stops its bids)
        t_mc, t_rk = policy.delay.job_timers(view, job, state)
        avail = usable_gpus(free, view.shape, policy.delay.statics.of(view, job).gpu_types)
        decision = delay_decision(avail, view.shape, job.spec.num_gpus, 0.0, t_mc, t_rk, policy.delay.first_fit)
        if decision is None:
            return
        picked, level = decision
        allocation = build_allocation(free, picked)
        free.take(allocation)
        won[job.job_id] = [allocation]
        policy.delay.accept(view, job, level, 0.0, state)

    def on_applied(self, state: PassState) -> None:
        for job_id, allocations in state.get(HOARDS_KEY, {}).items():
            self.held.setdefault(job_id, []).extend(allocations)


def _running_keys(policy: Dally, view: ClusterView, wanted: list[JobInfo] | None = None,
                  ) -> dict[str, tuple[float, float, int]]:
    """The running jobs' bid keys (Nw_sens, submission, arrival), their Nw_sens all at once from the kept
    progress rows (:class:`~halyard.policies.running_sens.RunningNwSens`, the very floats :func:`nw_sens` gives;
    a job that has not run yet at the pass's instant bids at ``_never_ran_sens``): one Nw_sens per running job
    per lease end was a twentieth of +staggered's time on loaded Philly. With ``wanted`` (some running jobs),
    only theirs, unless any running job's Nw_sens is NaN (then every one: NaN keys send the auctions one by
    one, :meth:`Auctions.applies`)."""
    statics = policy.delay.statics
    table = policy.nw_preemption.running_sens

    def compute_s(job: JobInfo) -> float:
        return statics.of(view, job).compute_s

    jobs, values = table.at(view.running, view.now, compute_s, view.facts, view)
    if len(jobs) != len(view.running):  # (a running job without an allocation: none should be)
        now = view.now
        return {job.job_id: (policy._never_ran_sens if job.run_time_s(now) <= 0.0 else policy.sensitivity(view, job),
                             job.spec.submit_time, job.arrival_seq) for job in view.running.values()}
    sens = np.where(table.run <= 0.0, policy._never_ran_sens, values)
    if wanted is not None and jobs is table.followed() and not np.isnan(sens).any():
        where = table.position
        return {job.job_id: (float(sens[where(job.job_id)]), job.spec.submit_time, job.arrival_seq) for job in wanted}
    return {job.job_id: (s, job.spec.submit_time, job.arrival_seq)
            for job, s in zip(jobs, sens.tolist(), strict=True)}


def staggered_reauction(policy: Dally, view: ClusterView, state: PassState, ended: set[str],
                        plan: Plan) -> FreeResources:
    """``+staggered``'s lease end (module docstring): the ``ended`` jobs released one at a time, each
    release an auction of the free GPUs among the waiting jobs (and with ``+hoard`` the running ones). The
    plan as :meth:`Dally._reauction` writes it (preemptions, moves, starts); returns what is left free.
    The auctions are :class:`~halyard.policies.dally_staggered.Auctions` (incremental), or with
    ``Dally.shortcuts`` off :func:`~halyard.policies.dally_staggered.auctions_one_by_one`: the same plan."""
    now = view.now
    free = view.free.copy()
    if policy.hoard is not None:
        state.put(HOARD_REAUCTION_KEY, True)

    def sens(job: JobInfo) -> float:
        return policy._never_ran_sens if job.run_time_s(now) <= 0.0 else policy.sensitivity(view, job)

    releases = sorted((view.running[job_id] for job_id in ended),
                      key=lambda job: (job.last_assignment_time or 0.0, job.arrival_seq, job.job_id))
    key_of = {job.job_id: (sens(job), job.spec.submit_time, job.arrival_seq) for job in view.pending}
    if policy.shortcuts:  # the running jobs bid only when released, or with +hoard
        key_of.update(_running_keys(policy, view, None if policy.hoard is not None else releases))
    else:
        key_of.update({job.job_id: (sens(job), job.spec.submit_time, job.arrival_seq) for job in view.running.values()})
    fast = policy.shortcuts and Auctions.applies(key_of)
    if fast:
        placed = Auctions(policy, view, state, key_of, free).run(ended, releases)
    else:
        placed = auctions_one_by_one(policy, view, state, ended, releases, key_of, free)
    moves: dict[str, Allocation] = {}
    starts: list[tuple[str, Allocation]] = []
    for job in releases:
        target = placed.get(job.job_id)
        if target is None:
            plan.preempt(job.job_id)  # back into the wait queue (§4.3.2)
        elif target != allocation_of(job) and _gpus_of(target) != _gpus_of(allocation_of(job)):
            moves[job.job_id] = target  # (an equal allocation holds the same GPUs)
    offers: dict[GpuTypes, np.ndarray] = {}  # the usable free GPUs per GPU-type set: ``free`` is final now
    no_fits: dict[tuple[GpuTypes, int], Unplaced] = {}  # a reason past both timers: of (types, demand) alone
    for job in view.pending:
        target = placed.get(job.job_id)
        if target is not None:
            starts.append((job.job_id, target))
            continue
        if not fast:
            _, avail, wait_s, t_mc, t_rk = policy.delay.decide(view, job, free, state)
            plan.wait(job.job_id, policy.delay.why(view, job, avail, wait_s, t_mc, t_rk))
            continue
        # a waiting job's reason needs its offer, starvation and timers, not Algorithm 1's answer
        types = policy.delay.statics.of(view, job).gpu_types
        offer = offers.get(types)
        if offer is None:
            offer = offers[types] = usable_gpus(free, view.shape, types)
        t_mc, t_rk = policy.delay.job_timers(view, job, state)
        wait_s = starvation(view, job)
        if wait_s < t_mc or wait_s < t_rk:
            plan.wait(job.job_id, policy.delay.why(view, job, offer, wait_s, t_mc, t_rk))
            continue
        reason = no_fits.get((types, job.spec.num_gpus))
        if reason is None:
            reason = no_fits[(types, job.spec.num_gpus)] = policy.delay.why(view, job, offer, wait_s, t_mc, t_rk)
        plan.wait(job.job_id, reason)
    _write_moves(plan, view, moves, starts)
    return free
