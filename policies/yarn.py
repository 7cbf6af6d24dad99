"""YARN's capacity scheduler as EasyScale's trace experiment runs it (papers/easyscale-elastic-training.txt
§5.2): "YARN-CS enforces FIFO mode ... all jobs use gang-scheduling ... YARN-CS allocates the same type of
GPUs (e.g., all V100 GPUs) for a job based on its requirement".

* Ordering: FIFO, strictly: the pass stops at the first job that cannot start, so the jobs behind it wait
  even where they would fit ("enforces FIFO mode ... to ensure inter-job fairness"). Two rules the paper
  does not have are options of :func:`yarn_cs`, off by default: ``backfill`` (a later job that fits may
  start ahead of the head, as the staged pass does for FIFO elsewhere; it favours the baseline) and
  ``one_job_at_a_time`` (what the public artifact's ``FifoPolicy`` does: it allocates the head job of the
  queue only, so one job runs at a time in the whole cluster; it handicaps the baseline).
* Sizing: all the GPUs the job asks for, at once (gang scheduling).
* Placement (:class:`OneTypeConsolidated`): all of a job's GPUs of one type -- its ``gpu_type`` if it
  names one, else the type on which its model runs fastest among those with room -- on the fewest
  nodes, then racks.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from halyard.datamodel import Allocation
from halyard.policies.ordering import Fifo
from halyard.policies.passstate import PassState
from halyard.policies.placement import build_allocation, choose_nodes, no_fit, usable_gpus
from halyard.policies.plan import Plan
from halyard.policies.reasons import Unplaced, by_policy
from halyard.policies.resources import FreeResources
from halyard.policies.staged import StagedPolicy
from halyard.policies.stages import Admission, AdmitAll, Placement
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


class OneJobAtATime(Admission):
    """The head of the queue, and only while no job runs: the EasyScale artifact's ``FifoPolicy``
    (simulator/other_policy.py allocates the first active job and stops), not the paper's text."""

    name = "one-at-a-time"

    def admit(self, view: ClusterView, jobs: Sequence[JobInfo], plan: Plan, state: PassState) -> Iterable[JobInfo]:
        if view.running:
            plan.otherwise = by_policy(self.name, "{} is running; one job runs at a time", next(iter(view.running)))
            return ()
        if len(jobs) > 1:
            plan.otherwise = by_policy(self.name, "behind {}; one job runs at a time", jobs[0].job_id)
        return jobs[:1]


def yarn_cs(*, backfill: bool = False, one_job_at_a_time: bool = False, name: str = "yarn-cs") -> StagedPolicy:
    """YARN-CS as EasyScale §5.2 describes it: strict FIFO, gang scheduling, one GPU type per job.

    ``backfill`` and ``one_job_at_a_time`` are the two departures the module docstring names (off by
    default; docs/reproductions/easyscale-reproduction.md measures both)."""
    return StagedPolicy(name, Fifo(), admission=OneJobAtATime() if one_job_at_a_time else AdmitAll(),
                        placement=OneTypeConsolidated(), backfill=backfill)
