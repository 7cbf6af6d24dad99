"""ElasticFlow (Gu et al., ASPLOS'23) and ElasticFlow-LS, the baselines Crius compares against.

ElasticFlow (``loosened=False``, preset ``elasticflow``) admits a job only if a share of GPUs that
finishes it by its deadline fits beside the admitted jobs' and drops it otherwise (Crius §8.5
compares Crius-DDL against it). With deadlines loosened (preset ``elasticflow-ls``):

Crius §8.3: "ElasticFlow-LS denotes the primary ElasticFlow policy with loosened job deadline";
"it scales down small jobs when the workload is high to accommodate more jobs and maximize
throughput"; and, as every baseline, it schedules "with data profiled from data parallelism"
(§8.1). With deadlines loosened no job is refused admission, so what remains of ElasticFlow is:

1. **Minimum shares.** Jobs in deadline order (ElasticFlow's EDF admission; with loosened
   deadlines that is arrival order) each get their minimum share, ``min_gpus`` (the least
   that meets a loosened deadline), while the cluster's GPUs last; the others wait.
2. **Leftover by marginal return.** The remaining GPUs go, one doubling at a time, to the job
   whose throughput rises most per extra GPU (ElasticFlow's greedy allocation of free
   resources), up to its ``max_gpus``.
3. The plan resizes, starts and preempts jobs to match; sizes are powers of two times
   ``min_gpus``. Throughput is the data-parallel rate (one data-parallel stage keeping the
   job's global batch) on the cluster's most numerous GPU type: ElasticFlow targets
   homogeneous clusters, so it neither prefers nor avoids a type (placement is consolidated
   over all nodes).
"""

from __future__ import annotations

import heapq

from halyard.datamodel import Allocation, JobSpec, StagePlan
from halyard.policies.adaptive import with_runtime_plan
from halyard.policies.adjusting import OwnPass, described, need_rounds
from halyard.policies.crius import cell_allocation, most_numerous_type
from halyard.policies.moves import emit_in_order
from halyard.policies.passstate import PassState
from halyard.policies.placement import build_allocation, choose_nodes, usable_gpus
from halyard.policies.plan import Plan
from halyard.policies.reasons import cannot_fit
from halyard.policies.resources import OverAllocation
from halyard.policies.view import ClusterView, JobInfo


def dp_rate(view: ClusterView, spec: JobSpec, gpus: int) -> float:
    """Iterations per second of ``spec`` data parallel on ``gpus`` GPUs (its global batch kept) on
    the cluster's most numerous GPU type; 0 if no plan of them fits or the type is too small.
    Crius §8.1: baselines schedule "with data profiled from data parallelism" while the job runs
    with adaptive parallelism, so a model whose data-parallel worker does not fit still has this
    rate wherever some tensor/pipeline plan fits (:mod:`halyard.policies.adaptive`)."""
    def compute() -> float:
        ref = most_numerous_type(view)
        base = cell_allocation(view, ref, gpus)
        if base is None:
            return 0.0
        alloc = Allocation(base.nodes, stages=(StagePlan(gpus, data=gpus),))
        if not view.perf.fits_plan(spec, alloc, view.cluster) and view.perf.fitting_plan(spec, ref, gpus) is None:
            return 0.0  # no plan of these GPUs fits (a data-parallel one that does not is still the profile)
        return 1.0 / float(view.perf.job_timing(spec, alloc, view.cluster).iteration.total_s)  # type: ignore[attr-defined]
    return view.facts.memo("elasticflow/rate", (spec.model, spec.batch_size, spec.parallelism, spec.num_gpus, gpus),
                           compute)


def placeable_types(view: ClusterView, spec: JobSpec, gpus: int) -> frozenset[str] | None:
    """The GPU types ``spec`` may be placed on at ``gpus`` GPUs keeping its global batch, or None for
    every type. Of the data-parallel profile's types (``view.gpu_types_for``), those where the
    ``gpus``-GPU data-parallel stage or some tensor/pipeline plan of ``gpus`` GPUs fits memory: a job
    shrunk below its ``N_G`` holds more samples per GPU, so a type its ``N_G``-GPU worker fits may not
    hold it (a type with fewer than ``gpus`` GPUs is kept: it is only used beside another, and
    :meth:`ElasticFlow._finalize` checks the placement it gets)."""
    def compute() -> frozenset[str] | None:
        wanted = view.gpu_types_for(spec, gpus)
        ok = frozenset(t for t in (view.facts.allowed_types(spec) if wanted is None else wanted)
                       if _plan_fits(view, spec, t, gpus))
        return None if wanted is None and len(ok) == len(view.cluster.gpu_types) else ok
    return view.facts.memo("elasticflow/types", (spec.model, spec.batch_size, spec.parallelism, spec.num_gpus,
                                                 spec.gpu_type, gpus), compute)


def _plan_fits(view: ClusterView, spec: JobSpec, gpu_type: str, gpus: int) -> bool:
    base = cell_allocation(view, gpu_type, gpus)
    if base is None:
        return True
    alloc = Allocation(base.nodes, stages=(StagePlan(gpus, data=gpus),))
    return view.perf.fits_plan(spec, alloc, view.cluster) or view.perf.fitting_plan(spec, gpu_type, gpus) is not None


class ElasticFlow(OwnPass):
    """ElasticFlow (module docstring). ``loosened`` (ElasticFlow-LS) ignores deadlines; otherwise a
    job's minimum share is the least power-of-two multiple of ``min_gpus`` that finishes it by its
    deadline, running (admitted) jobs keep theirs first, pending jobs are admitted in deadline
    order, and a pending job that cannot be admitted is dropped (ElasticFlow's admission control).
    Adjusters, if any, run after its pass (:class:`~halyard.policies.adjusting.OwnPass`)."""

    def __init__(self, *, loosened: bool = True, name: str = "elasticflow-ls") -> None:
        self.name = name
        self.loosened = loosened

    @property
    def acts_without_pending(self) -> bool:
        return True  # released GPUs go to running jobs (step 2)

    @property
    def needs_rounds(self) -> bool:
        return need_rounds(self.adjusters)

    def stages(self) -> list[tuple[str, str]]:
        return [("policy", self.name), *described(self.adjusters)]

    @property
    def honours(self) -> frozenset[str]:
        return frozenset() if self.loosened else frozenset({"deadline"})

    @property
    def relies_on(self) -> frozenset[str]:
        return self.honours | {"elastic"}  # shares between min_gpus and max_gpus

    def own_pass(self, view: ClusterView, state: PassState) -> Plan:
        plan = Plan()
        if self.loosened:
            jobs: list[JobInfo] = sorted([*view.running.values(), *view.pending], key=lambda j: j.arrival_seq)
        else:  # admitted (running) jobs first, then earliest deadline first
            jobs = sorted([*view.running.values(), *view.pending], key=lambda j: (
                j.allocation is None, j.spec.deadline if j.spec.deadline is not None else float("inf"), j.arrival_seq))
        budget = view.schedulable_gpus
        size: dict[str, int] = {}
        for job in jobs:  # 1. minimum shares in deadline order
            low = job.spec.gpu_range[0] if self.loosened else self._minimum_share(view, job)
            if low and low <= budget and dp_rate(view, job.spec, low) > 0:
                size[job.job_id] = low
                budget -= low
            elif not self.loosened and job.allocation is None and job.spec.deadline is not None:
                plan.drop(job.job_id, f"admission: no share of up to {job.spec.gpu_range[1]} GPUs meets its deadline "
                                      f"beside the admitted jobs ({budget} GPUs left)")
            elif job.allocation is None:
                plan.wait(job.job_id, cannot_fit(self.name, "its minimum share of {:#GPU} does not fit beside "
                                                 "the earlier jobs' ({} left)", low, budget))
        by_id = {j.job_id: j for j in jobs}
        heap = [h for h in (self._offer(view, by_id[j], g) for j, g in size.items()) if h is not None]
        heapq.heapify(heap)
        while heap and budget > 0:  # 2. leftover, largest marginal return per GPU first
            _, _, job_id, g = heapq.heappop(heap)
            if g > budget:
                continue
            budget -= g
            size[job_id] = 2 * g
            offer = self._offer(view, by_id[job_id], 2 * g)
            if offer is not None:
                heapq.heappush(heap, offer)
        self._finalize(view, plan, jobs, size)
        return plan

    @staticmethod
    def _minimum_share(view: ClusterView, job: JobInfo) -> int:
        """The least power-of-two multiple of ``min_gpus`` that finishes the job by its deadline at
        the data-parallel rate (``min_gpus`` without a deadline; 0 if none does)."""
        low, high = job.spec.gpu_range
        deadline = job.spec.deadline
        if deadline is None:
            return low
        left = job.remaining_iterations(view.now)
        g = low
        while g <= high:
            rate = dp_rate(view, job.spec, g)
            if rate > 0 and view.now + left / rate <= deadline:
                return g
            g *= 2
        return 0

    @staticmethod
    def _offer(view: ClusterView, job: JobInfo, g: int) -> tuple[float, int, str, int] | None:
        """Doubling ``job`` from ``g`` GPUs: (-rate gained per extra GPU, normalised to its minimum
        share's rate, arrival, job, g), or None past ``max_gpus`` or without a gain."""
        if 2 * g > job.spec.gpu_range[1]:
            return None
        base = dp_rate(view, job.spec, job.spec.gpu_range[0])
        gain = (dp_rate(view, job.spec, 2 * g) - dp_rate(view, job.spec, g)) / base / g
        return (-gain, job.arrival_seq, job.job_id, g) if gain > 0 else None

    def _finalize(self, view: ClusterView, plan: Plan, jobs: list[JobInfo], size: dict[str, int]) -> None:
        free = view.free.copy()
        for job in view.running.values():
            if job.job_id not in size:
                plan.preempt(job.job_id)
                free.give(job.allocation)  # type: ignore[arg-type]
        order = free.copy()
        changed = [j for j in jobs if j.job_id in size and (j.allocation is None or j.num_gpus != size[j.job_id])]
        for job in changed:
            if job.allocation is not None:
                free.give(job.allocation)
        targets: list[tuple[JobInfo, Allocation]] = []
        for job in sorted(changed, key=lambda j: size[j.job_id]):  # shrinking jobs' GPUs go first
            g = size[job.job_id]
            types = placeable_types(view, job.spec, g)
            picked = choose_nodes(usable_gpus(free, view.shape, types), view.shape, g)
            alloc = None if picked is None else with_runtime_plan(  # Crius §8.1: adaptive parallelism at run time
                view, job.spec, Allocation(build_allocation(free, picked).nodes, stages=(StagePlan(g, data=g),)))
            if alloc is not None and not view.perf.fits_plan(job.spec, alloc, view.cluster):
                alloc = None  # mixed with a type too small for its share of the global batch
            if alloc is None:
                if job.allocation is None:
                    plan.wait(job.job_id, cannot_fit(self.name, "its {:#GPU} are fragmented over the nodes or fit "
                                                                "no free GPUs' memory", g)
                              if types is None or types else
                              cannot_fit(self.name, "no GPU type holds its global batch on {:#GPU}", g))
                else:
                    try:
                        free.take(job.allocation)  # it keeps its size
                    except OverAllocation:  # a smaller job took its GPUs: it waits a pass
                        plan.preempt(job.job_id)
                        order.give(job.allocation)
                continue
            free.take(alloc)
            targets.append((job, alloc))
        emit_in_order(plan, order, targets, self.name)
