"""Gandiva (Xiao et al., OSDI'18) as Dally §5.1.3 uses it as a baseline.

"Being network-agnostic, Gandiva ... exhibits sub-optimal performance. It
addresses this limitation by migrating jobs to more favorable GPU consolidation
whenever resources become available."

* Ordering: FIFO, non-preemptive, with backfilling (the staged pass).
* Placement (:class:`NetworkAgnostic`): the first usable GPUs in node order,
  whatever machines and racks that spans.
* Migration (:class:`ConsolidatingMigration`, a network stage, so it also runs
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
from halyard.policies.placement import FirstFitConsolidated, build_allocation, choose_nodes, usable_gpus
from halyard.policies.plan import Plan
from halyard.policies.resources import FreeResources
from halyard.policies.topology import first_fit, spread, tightest_spread
from halyard.policies.view import ClusterView, JobInfo


class NetworkAgnostic:
    """The first usable GPUs in node order (a placement stage)."""

    name = "network-agnostic"

    def __init__(self) -> None:
        self._shapes = FirstFitConsolidated()

    def place(self, view: ClusterView, job: JobInfo, gpus: int, free: FreeResources) -> Allocation | None:
        avail = usable_gpus(free, self._shapes.shape(free.cluster), view.gpu_types_for(job.spec))
        picked = first_fit(avail, gpus)
        return None if picked is None else build_allocation(free, picked)


class ConsolidatingMigration:
    """Migrate running jobs to a tighter placement when free GPUs allow one (a network stage)."""

    name = "gandiva-migration"

    def __init__(self) -> None:
        self._shapes = FirstFitConsolidated()

    def augment(self, view: ClusterView, plan: Plan, free: FreeResources) -> None:
        if not view.running:
            return
        cluster = view.cluster
        shape = self._shapes.shape(cluster)
        touched = {a.job_id for a in plan.actions}
        rack_gpus = max(sum(cluster.nodes[i].gpus for i in r.node_indices) for r in cluster.racks)
        for job in sorted(view.running.values(), key=lambda j: (j.spec.submit_time, j.arrival_seq)):
            if free.total_gpus == 0:
                return  # a job's own GPUs alone cannot be rearranged into a tighter shape
            allocation = job.allocation
            if allocation is None or job.job_id in touched:
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
            moved = build_allocation(trial, picked)
            plan.migrate(job.job_id, moved)
            free.give(allocation)
            free.take(moved)
