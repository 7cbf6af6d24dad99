"""Emit starts, resizes and migrations in an order the core can apply.

The core applies a plan's actions one after another (scheduling/core.py validates each against
the state the previous ones left), so a job moving onto GPUs another job is leaving must come
after that job's move. :func:`emit_in_order` emits each action once the GPUs it takes are free,
and reports the ones a cycle of moves leaves out.
"""

from __future__ import annotations

from collections.abc import Sequence

from halyard.datamodel import Allocation
from halyard.policies.plan import Plan
from halyard.policies.reasons import cannot_fit
from halyard.policies.resources import FreeResources, OverAllocation
from halyard.policies.view import JobInfo


def emit_in_order(plan: Plan, free: FreeResources, targets: Sequence[tuple[JobInfo, Allocation]],
                  stage: str) -> list[JobInfo]:
    """Add a Start (a pending job), Resize (another GPU count) or Migrate for each target, in an
    order that applies on ``free`` (the cluster after the plan's preemptions; it is updated).
    Returns the jobs left out because their moves form a cycle: running ones keep what they
    hold, pending ones wait with a reason from ``stage``."""
    todo = list(targets)
    while todo:
        left = []
        for job, alloc in todo:
            current = job.allocation
            if current is not None:
                free.give(current)
            try:
                free.take(alloc)
            except OverAllocation:
                if current is not None:
                    free.take(current)
                left.append((job, alloc))
                continue
            if current is None:
                plan.start(job.job_id, alloc)
            elif alloc.num_gpus != current.num_gpus:
                plan.resize(job.job_id, alloc)
            else:
                plan.migrate(job.job_id, alloc)
        if len(left) == len(todo):
            for job, _ in left:
                if job.allocation is None:
                    plan.wait(job.job_id, cannot_fit(stage, "its GPUs are held by jobs whose moves could not be "
                                                     "ordered this pass"))
            return [job for job, _ in left]
        todo = left
    return []
