"""Gandiva (Xiao et al., OSDI'18) as Dally §5.1.3 uses it as a baseline.

"Being network-agnostic, Gandiva ... exhibits sub-optimal performance. It
addresses this limitation by migrating jobs to more favorable GPU consolidation
whenever resources become available."

* Ordering: FIFO, non-preemptive, with backfilling (the staged pass).
* Placement (:class:`NetworkAgnostic`): the first usable GPUs in node order,
  whatever machines and racks that spans.
* Migration (:class:`ConsolidatingMigration`, an adjuster, so it also runs
  when nothing waits): after the pass has started what it can, each running job
  (in arrival order) whose GPUs span more racks, or more machines, than the
  tightest placement it could now have (the free GPUs plus its own) migrates to
  that placement. A migration checkpoints and pays the performance model's
  restart cost (the core and simulator charge it).

Gandiva's time-slicing and GPU packing of small jobs are left out: Dally's
comparison is about placement and consolidation, and its description of the
baseline names only these two features.
"""

from __future__ import annotations

from halyard.datamodel import Allocation
from halyard.policies.adaptive import with_runtime_plan
from halyard.policies.passstate import PassState
from halyard.policies.placement import build_allocation, choose_nodes, no_fit, usable_gpus
from halyard.policies.plan import Plan
from halyard.policies.reasons import Unplaced
from halyard.policies.resources import FreeResources
from halyard.policies.stages import Adjuster, Placement
from halyard.policies.topology import first_fit, spread, tightest_spread
from halyard.policies.view import ClusterView, JobInfo, allocation_of


class NetworkAgnostic(Placement):
    """The first usable GPUs in node order (a placement stage)."""

    name = "network-agnostic"

    def place(self, view: ClusterView, job: JobInfo, gpus: int, free: FreeResources,
              state: PassState) -> Allocation | Unplaced:
        avail = usable_gpus(free, view.shape, view.gpu_types_for(job.spec))
        picked = first_fit(avail, gpus)
        return no_fit(self.name, view, job, gpus, avail) if picked is None else build_allocation(free, picked)


class ConsolidatingMigration(Adjuster):
    """Migrate running jobs to a tighter placement when free GPUs allow one (an adjuster)."""

    name = "gandiva-migration"
    acts_without_pending = True

    def adjust(self, view: ClusterView, plan: Plan, free: FreeResources, state: PassState) -> None:
        # A job's own GPUs alone cannot be rearranged into a tighter shape, and a migration
        # keeps the GPU count, so no free GPUs now means none for the whole loop.
        if not view.running or free.total_gpus == 0:
            return
        cluster = view.cluster
        shape = view.shape
        touched = plan.touched()
        rack_gpus = shape.largest(None)[1]
        # A job on one node is as tight as can be: only multi-node jobs are candidates.
        spread_out = [j for j in view.running.values() if j.allocation is not None and len(j.allocation.nodes) > 1]
        for job in sorted(spread_out, key=lambda j: (j.spec.submit_time, j.arrival_seq)):
            allocation = allocation_of(job)
            if job.job_id in touched:
                continue
            gpus = allocation.num_gpus
            current = spread(allocation, cluster)
            types = view.gpu_types_for(job.spec)
            if current <= tightest_spread(gpus, shape.max_gpus_per_node(types), rack_gpus):
                continue
            trial = free.copy()
            trial.give(allocation)
            picked = choose_nodes(usable_gpus(trial, shape, types), shape, gpus)
            if picked is None:
                continue
            target = (len({int(shape.rack[i]) for i, _ in picked}), len(picked))
            if target >= current:
                continue
            moved = with_runtime_plan(view, job.spec, build_allocation(trial, picked))  # Crius §8.1
            plan.migrate(job.job_id, moved)
            free.give(allocation)
            free.take(moved)
