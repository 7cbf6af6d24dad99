"""Baseline orderings: FIFO, SRTF and LAS.

Ties break by arrival order, so every ordering is a total order and passes are
deterministic.
"""

from __future__ import annotations

from collections.abc import Callable

from halyard.policies.view import ClusterView, JobInfo


class Fifo:
    """First in, first out by submit time; never preempts."""

    name = "fifo"
    preemptive = False
    needs_rounds = False
    arrival_order = True  # the core keeps pending jobs by (submit time, arrival)

    def key(self, view: ClusterView) -> Callable[[JobInfo], tuple[float, int]]:
        return lambda job: (job.spec.submit_time, job.arrival_seq)


class Srtf:
    """Shortest remaining time first, preemptive.

    Remaining time = remaining iterations x the job's ideal (consolidated)
    iteration time, so a job is not penalised for a bad current placement.
    Only events change the order (running jobs' keys only shrink), so SRTF
    needs no round passes.
    """

    name = "srtf"
    preemptive = True
    arrival_order = False
    needs_rounds = False

    def key(self, view: ClusterView) -> Callable[[JobInfo], tuple[float, float, int]]:
        now = view.now
        return lambda job: (job.remaining_iterations(now) * job.ideal_iteration_s,
                            job.spec.submit_time, job.arrival_seq)


class Las:
    """Least attained service first: attained GPU-seconds (GPUs x time held), preemptive."""

    name = "las"
    preemptive = True
    arrival_order = False
    needs_rounds = True

    def key(self, view: ClusterView) -> Callable[[JobInfo], tuple[float, float, int]]:
        now = view.now
        return lambda job: (job.attained_gpu_s(now), job.spec.submit_time, job.arrival_seq)
