"""Hand-built views for policy rule tests: jobs whose progress and history are set directly."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from halyard.datamodel import Allocation, Cluster, JobSpec, JobState, NodeAllocation
from halyard.policies import ClusterView, FreeResources, PassState, Plan, Policy


@dataclass
class FakeJob:
    """A :class:`halyard.policies.JobInfo` with its numbers given, not accrued."""

    spec: JobSpec
    arrival_seq: int = 0
    done: float = 0.0  # iterations done
    run_s: float = 0.0  # seconds spent running
    gpu_s: float = 0.0  # attained GPU-seconds
    iterations_total: int = 1000
    allocation: Allocation | None = None
    pending_since: float = 0.0
    last_assignment_time: float | None = None
    preemptions: int = 0
    ideal_iteration_s: float = 1.0

    @property
    def job_id(self) -> str:
        return self.spec.job_id

    @property
    def state(self) -> JobState:
        return JobState.RUNNING if self.allocation is not None else JobState.PENDING

    @property
    def num_gpus(self) -> int:
        return self.allocation.num_gpus if self.allocation is not None else self.spec.num_gpus

    @property
    def iteration_s(self) -> float:
        return self.ideal_iteration_s

    def iterations_done(self, now: float) -> float:
        return self.done

    def remaining_iterations(self, now: float) -> float:
        return self.iterations_total - self.done

    def attained_gpu_s(self, now: float) -> float:
        return self.gpu_s

    def run_time_s(self, now: float) -> float:
        return self.run_s

    @property
    def epoch(self) -> tuple[float, float, int]:
        """The numbers themselves: set directly, they change with nothing else."""
        return self.done, self.run_s, self.iterations_total

    def progress_line(self) -> tuple[float, float, float, float, float]:
        return float(self.done), 0.0, 0.0, self.run_s, math.nan  # no rate, not accruing: done and run_s


@dataclass
class FakePerf:
    """Compute-only iteration time ``compute_s`` for every model (what Nw_sens divides by)."""

    compute_s: float = 1.0
    calls: list[str] = field(default_factory=list)

    def ideal_iteration_time(self, spec: JobSpec, gpu_type: str) -> float:
        self.calls.append(spec.model)
        return self.compute_s

    def iteration_time(self, spec, allocation, cluster):  # pragma: no cover - not used by these policies
        raise NotImplementedError

    def consolidated_iteration_time(self, spec, cluster, gpu_type=None):  # pragma: no cover
        return self.compute_s

    def fits_memory(self, spec: JobSpec, gpu_type: str, gpus: int = 0) -> bool:
        return True  # every job fits every GPU: these tests are about time, not memory


def on(cluster: Cluster, *parts: tuple[str, int]) -> Allocation:
    """An allocation of the first ``k`` GPUs of each named node (GPU-proportional CPU/memory)."""
    nodes = []
    for name, k in parts:
        n = cluster.node(name)
        nodes.append(NodeAllocation(name, tuple(range(k)), n.proportional_cpus(k), n.proportional_memory_mb(k)))
    return Allocation(tuple(nodes))


def view_of(cluster: Cluster, now: float, running: list[FakeJob], pending: list[FakeJob], *,
            perf: FakePerf | None = None, round_s: float = 300.0) -> ClusterView:
    """A view with ``running`` jobs holding their allocations and ``pending`` in the given order."""
    free = FreeResources(cluster)
    for job in running:
        assert job.allocation is not None
        free.take(job.allocation)
    return ClusterView(now=now, cluster=cluster, free=free, running={j.job_id: j for j in running},
                       pending=pending, perf=perf or FakePerf(), round_s=round_s,
                       pending_demand=Counter(j.spec.num_gpus for j in pending))


class Wrapping(Policy):
    """A policy that forwards everything to ``inner``; subclasses check the view in ``schedule``."""

    def __init__(self, inner: Policy) -> None:
        self.inner = inner
        self.name = inner.name

    needs_rounds = property(lambda self: self.inner.needs_rounds)
    acts_without_pending = property(lambda self: self.inner.acts_without_pending)
    resource_sensitive = property(lambda self: self.inner.resource_sensitive)

    def stages(self) -> list[tuple[str, str]]:
        return self.inner.stages()

    def schedule(self, view: ClusterView, state: PassState) -> Plan:
        return self.inner.schedule(view, state)

    def on_applied(self, view: ClusterView, plan: Plan, state: PassState) -> None:
        self.inner.on_applied(view, plan, state)

    def on_rejected(self, view: ClusterView, plan: Plan, state: PassState) -> None:
        self.inner.on_rejected(view, plan, state)


class OneResize(Policy):
    """A tiny Policy: starts job ``job_id`` on ``first`` and, at the first pass where ``when(view, job)``
    holds, resizes it to ``then``; ``resized`` records (time, iterations done then)."""

    name = "one-resize"
    needs_rounds = True
    acts_without_pending = True

    def __init__(self, job_id: str, first: Allocation, then: Allocation, when) -> None:
        self.job_id, self.first, self.then, self.when = job_id, first, then, when
        self.resized: tuple[float, float] | None = None

    def schedule(self, view: ClusterView, state: PassState) -> Plan:
        plan = Plan()
        job = view.running.get(self.job_id)
        if job is None and any(j.job_id == self.job_id for j in view.pending):
            plan.start(self.job_id, self.first)
        elif job is not None and self.resized is None and self.when(view, job):
            self.resized = (view.now, job.iterations_done(view.now))
            plan.resize(self.job_id, self.then)
        return plan


class Resizes(Policy):
    """A tiny Policy: starts job ``job_id`` on ``first``, then resizes it to each ``(then, when)`` step in
    turn at the first pass where ``when(view, job)`` holds; ``resized`` records (time, iterations done)."""

    name = "resizes"
    needs_rounds = True
    acts_without_pending = True

    def __init__(self, job_id: str, first: Allocation, steps) -> None:
        self.job_id, self.first, self.steps = job_id, first, list(steps)
        self.resized: list[tuple[float, float]] = []

    def schedule(self, view: ClusterView, state: PassState) -> Plan:
        plan = Plan()
        job = view.running.get(self.job_id)
        if job is None and any(j.job_id == self.job_id for j in view.pending):
            plan.start(self.job_id, self.first)
        elif job is not None and len(self.resized) < len(self.steps):
            then, when = self.steps[len(self.resized)]
            if when(view, job):
                self.resized.append((view.now, job.iterations_done(view.now)))
                plan.resize(self.job_id, then)
        return plan
