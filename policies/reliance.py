"""What a policy's own behaviour needs of a run's jobs and cluster, and a warning when nothing has it.

A policy built for elastic jobs, deadlines, priorities or tenant quotas still runs a trace
without them: it then does only what its base stages do. ``easyscale-heter`` on a trace
without ``logical_workers`` gave exactly FIFO's numbers, with no word. Each
stage names what it relies on (:attr:`Stage.relies_on`); :func:`unmet_reliance` says, for a
run, which of those no job (or the cluster) provides, and what the policy does instead. The
commands that run a trace (simulate, replay, compare) print these as warnings, and refuse
the run under ``--strict``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from halyard.datamodel import Cluster, JobSpec
from halyard.plural import plural


@dataclass(frozen=True)
class Reliance:
    """One thing a stage may rely on: what a job has when it provides it, and what happens when none does."""

    has: str  # "set logical_workers": completes "acts on jobs that ..."
    job_has: Callable[[JobSpec], bool] | None  # None: a property of the cluster, not of jobs
    otherwise: str  # what the policy does without it


RELIANCES: Mapping[str, Reliance] = MappingProxyType({
    "logical_workers": Reliance("set logical_workers (EasyScale's ESTs)", lambda s: s.logical_workers > 0,
                                "no job gets a scale-out proposal: each runs on the GPUs it first got, in FIFO "
                                "order (on a cluster of one GPU type, exactly FIFO's schedule)"),
    "elastic": Reliance("are elastic (min_gpus < max_gpus)", lambda s: s.elastic,
                        "every job keeps the GPU count it asked for"),
    "deadline": Reliance("have a deadline", lambda s: s.deadline is not None,
                         "deadline admission and early drop do nothing"),
    "priority": Reliance("differ in priority", None,  # judged over all the jobs, not job by job
                         "priority ordering and priority preemption do nothing"),
    "quotas": Reliance("", None, "every job is admitted and quota reclaim never preempts"),
})


def unmet_reliance(policy: object, jobs: Sequence[JobSpec], cluster: Cluster) -> list[str]:
    """One line per thing ``policy`` relies on that this run lacks (empty when it has them all, or has no jobs)."""
    if not jobs:
        return []
    name = getattr(policy, "name", "?")
    lines = []
    for key in sorted(getattr(policy, "relies_on", frozenset())):
        reliance = RELIANCES[key]
        if key == "quotas":
            if cluster.quotas:
                continue
            lines.append(f"policy {name} admits jobs by tenant quota, but cluster {cluster.name} has no [quotas] "
                         f"table (docs/cluster-format.md): {reliance.otherwise}")
            continue
        if key == "priority":
            if len({spec.priority for spec in jobs}) > 1:
                continue
            lines.append(f"policy {name} orders or preempts by priority, but all {plural(len(jobs), 'job')} have "
                         f"the same priority ({jobs[0].priority}): {reliance.otherwise}")
            continue
        assert reliance.job_has is not None
        if any(reliance.job_has(spec) for spec in jobs):
            continue
        lines.append(f"policy {name} acts on jobs that {reliance.has}, and none of the {plural(len(jobs), 'job')} of "
                     f"this trace does: {reliance.otherwise}")
    return lines
