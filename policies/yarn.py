"""YARN's capacity scheduler as EasyScale's trace experiment runs it (papers/easyscale-elastic-training.txt
§5.2): "YARN-CS enforces FIFO mode ... all jobs use gang-scheduling ... YARN-CS allocates the same type of
GPUs (e.g., all V100 GPUs) for a job based on its requirement".

* Ordering: FIFO (the staged pass backfills: a later job that fits may start ahead of one that does not,
  as Philly's YARN-CS lets smaller jobs through; this favours the baseline).
* Sizing: all the GPUs the job asks for, at once (gang scheduling).
* Placement (:class:`OneTypeConsolidated`): all of a job's GPUs of one type -- its ``gpu_type`` if it
  names one, else the type on which its model runs fastest among those with room -- on the fewest
  nodes, then racks.
"""

from __future__ import annotations

from halyard.datamodel import Allocation
from halyard.policies.passstate import PassState
from halyard.policies.placement import build_allocation, choose_nodes, no_fit, usable_gpus
from halyard.policies.reasons import Unplaced
from halyard.policies.resources import FreeResources
from halyard.policies.stages import Placement
from halyard.policies.view import ClusterView, JobInfo


def fastest_first(view: ClusterView, job: JobInfo) -> list[str]:
    """The GPU types ``job`` fits, fastest for its model first (compute-only time; ties by name)."""
    spec = job.spec
    fit = view.gpu_types_for(spec)
    types = view.cluster.gpu_types if fit is None else fit
    return sorted(types, key=lambda t: (view.facts.memo("one-type/compute-s", (spec.model, spec.batch_size, t),
                                                        lambda: view.perf.ideal_iteration_time(spec, t)), t))


class OneTypeConsolidated(Placement):
    """Every GPU of a job on one GPU type, the fastest with room, consolidated (a placement stage)."""

    name = "one-type"

    def place(self, view: ClusterView, job: JobInfo, gpus: int, free: FreeResources,
              state: PassState) -> Allocation | Unplaced:
        for t in fastest_first(view, job):
            picked = choose_nodes(usable_gpus(free, view.shape, t), view.shape, gpus)
            if picked is not None:
                return self.finish(view, job, build_allocation(free, picked))
        return no_fit(self.name, view, job, gpus, usable_gpus(free, view.shape, view.gpu_types_for(job.spec)))

    def finish(self, view: ClusterView, job: JobInfo, allocation: Allocation) -> Allocation:
        """Hook for a subclass that sets more on the chosen allocation (EasyScale's EST mapping)."""
        return allocation
