"""A policy made of stages: admission, ordering, sizing, placement, network.

One pass (:meth:`StagedPolicy.schedule`):

* non-preemptive ordering: walk the admitted pending jobs in priority order
  and start each one that can be placed in what is still free (later jobs may
  start ahead of an earlier one that does not fit: backfilling);
* preemptive ordering: rank running and admitted pending jobs together, keep
  the top jobs whose GPU demands fit in the schedulable GPUs, preempt the
  running jobs outside that set, then place the pending jobs inside it.

Then the network stage may add time-shifts. The result is a :class:`Plan`;
the core validates and applies it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from halyard.policies.placement import FirstFitConsolidated
from halyard.policies.plan import Plan
from halyard.policies.resources import FreeResources
from halyard.policies.stages import (
    Admission,
    AdmitAll,
    FixedSize,
    NetworkAugmenter,
    NoAugmentation,
    Ordering,
    Placement,
    Sizing,
)
from halyard.policies.view import ClusterView, JobInfo


@dataclass
class StagedPolicy:
    name: str
    ordering: Ordering
    admission: Admission = field(default_factory=AdmitAll)
    sizing: Sizing = field(default_factory=FixedSize)
    placement: Placement = field(default_factory=FirstFitConsolidated)
    network: NetworkAugmenter = field(default_factory=NoAugmentation)

    @property
    def needs_rounds(self) -> bool:
        """Whether the round timer must trigger passes (priorities drift with time)."""
        return self.ordering.needs_rounds

    @property
    def acts_without_pending(self) -> bool:
        """Whether a pass can do anything when no job is waiting.

        The baselines only start or preempt for waiting jobs; a network stage
        may re-shift running jobs at any time.
        """
        return not isinstance(self.network, NoAugmentation)

    def schedule(self, view: ClusterView) -> Plan:
        plan = Plan()
        free = view.free.copy()
        admitted = list(self.admission.admit(view, view.pending))
        if admitted:
            if self.ordering.preemptive:
                self._preemptive(view, admitted, plan, free)
            else:
                self._in_order(view, admitted, plan, free)
        self.network.augment(view, plan, free)
        return plan

    def _in_order(self, view: ClusterView, jobs: list[JobInfo], plan: Plan, free: FreeResources) -> None:
        if not self.ordering.arrival_order:  # view.pending is already in arrival order
            jobs.sort(key=self.ordering.key(view))
        left = free.usable_free_gpus  # GPUs on drained or agent-less nodes cannot be handed out
        # With every pending job admitted at its requested size, the pass can stop
        # as soon as no job still to be visited asks for <= `left` GPUs: on a long
        # queue that is the difference between O(started) and O(queue) per pass.
        waiting = Counter(view.pending_demand) if self._bounded(jobs, view) else None
        smallest = min(waiting) if waiting else 0
        for job in jobs:
            if left < smallest or left == 0:
                break
            if waiting is not None:
                n = job.spec.num_gpus
                waiting[n] -= 1
                if not waiting[n]:
                    del waiting[n]
                    if n == smallest and waiting:
                        smallest = min(waiting)
            gpus = self.sizing.gpus(view, job)
            if gpus > left:
                continue
            allocation = self.placement.place(view, job, gpus, free)
            if allocation is not None:
                free.take(allocation)
                plan.start(job.job_id, allocation)
                left -= gpus

    def _bounded(self, jobs: list[JobInfo], view: ClusterView) -> bool:
        return isinstance(self.sizing, FixedSize) and len(jobs) == len(view.pending)

    def _preemptive(self, view: ClusterView, pending: list[JobInfo], plan: Plan, free: FreeResources) -> None:
        ranked: list[JobInfo] = [*view.running.values(), *pending]
        ranked.sort(key=self.ordering.key(view))
        budget = view.schedulable_gpus
        starts: list[tuple[JobInfo, int]] = []
        for job in ranked:
            running = job.allocation is not None
            gpus = job.num_gpus if running else self.sizing.gpus(view, job)
            if gpus <= budget:
                budget -= gpus
                if not running:
                    starts.append((job, gpus))
            elif running:
                plan.preempt(job.job_id)
                free.give(job.allocation)
        for job, gpus in starts:
            allocation = self.placement.place(view, job, gpus, free)
            if allocation is not None:
                free.take(allocation)
                plan.start(job.job_id, allocation)
