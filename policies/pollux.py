"""Pollux (Qiao et al., OSDI'21): goodput-optimised re-allocation of every job's GPUs each pass.

The Cassini thesis' second baseline (papers/cassini-mltcp-network-interleaving.txt §4.5.1:
"It periodically queries jobs and reassigns GPUs to maximize the overall goodput of the
cluster. Pollux also models migration costs and avoids frequent job migrations"). One pass:

1. **Speedups.** For every active job (running and pending) and every GPU count it may hold
   (0, and its ``gpu_range`` within the schedulable GPUs), ``SPEEDUP_j(a)``: its best goodput
   on ``a`` GPUs over its best goodput on the fair share ``a_f = ceil(G / J)`` (clamped to its
   range), with the goodput of :mod:`halyard.policies.pollux_model` (§3: throughput x
   statistical efficiency, the batch chosen per allocation). Throughput is Halyard's performance
   model (``view.perf.job_timing``) on the tightest placement of ``a`` GPUs of the cluster's most
   numerous type, at the batch's per-GPU share: the same model the fabric runs.
2. **Re-allocation penalty.** A running job offered another count has that speedup multiplied by
   ``REALLOC_FACTOR`` (§4, PolluxSched), its ``R_j`` the re-allocations (resizes, migrations, preemptions)
   this policy's applied plans gave it.
3. **Search.** Pollux searches allocations with a genetic algorithm (§4, PolluxSched); ours is exact and
   deterministic: with ``p = -1`` the fitness is a decreasing function of
   ``sum_j 1 / (SPEEDUP_j + floor)``, so the best GPU count per job under ``sum_j a_j <= G`` is a
   multiple-choice knapsack, solved by dynamic programming over GPUs (:func:`allocate`). Ties go
   to the job's current count, then to fewer GPUs, then to earlier arrivals. It searches counts,
   not nodes (Pollux's GA also chooses nodes): the counts are then placed one job at a time by
   ``placement`` (consolidated first-fit, so ``+cassini`` ranks its candidates) in the order the
   core applies them, a job whose count does not change keeps its GPUs, and a count that finds no
   placement is searched again without it (:meth:`Pollux._settle`), so the counts a pass settles
   on are placeable, as the paper's search over job x node replica counts gives (docs/pollux.md).
4. Starts, resizes and preemptions in an order the core can apply (:func:`emit_in_order`),
   then the adjusters (``pollux+cassini``: Cassini's time-shifts).

**What runs.** Halyard's jobs train their submitted global batch ``M0`` (``num_gpus x
batch_size``): the data model has no batch on an allocation, and a job's progress is counted
in iterations of ``M0``. An elastic job runs on its new count as one data-parallel stage that
keeps ``M0`` (a Cell plan, as ElasticFlow's resizes), so its throughput at ``M0`` is exactly
what the fabric charges. The batch Pollux chooses above ``M0`` is used to rank allocations (the
paper's rule) but not executed; :attr:`Pollux.adapt_batch` False ranks with ``M0`` only (ours,
off by default). ``penalize_starts`` (ours, off) penalises a pending job's first start as well.
docs/pollux.md says what each changes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from halyard.datamodel import Allocation, JobSpec, StagePlan
from halyard.policies.adaptive import with_runtime_plan
from halyard.policies.adjusting import OwnPass, adjust, applied, described, rejected
from halyard.policies.crius import cell_allocation, most_numerous_type
from halyard.policies.moves import emit_in_order
from halyard.policies.passstate import PassState
from halyard.policies.placement import FirstFitConsolidated
from halyard.policies.plan import Plan
from halyard.policies.pollux_model import (
    SPEEDUP_FLOOR,
    batch_candidates,
    best_goodput,
    noise_for,
    noise_scale,
    realloc_factor,
)
from halyard.policies.reasons import Unplaced, cannot_fit
from halyard.policies.resources import FreeResources
from halyard.policies.stages import Adjuster, Placement
from halyard.policies.view import ClusterView, JobInfo, allocation_of

# GPU counts tried per elastic job: every count of its range when the range has at most this many,
# else powers of two inside it plus both ends (ours: keeps the knapsack small on large ranges).
MAX_DENSE_COUNTS = 16


def counts_for(low: int, high: int, gpus: int, current: int = 0) -> list[int]:
    """The GPU counts a job of range ``low..high`` may get on ``gpus`` GPUs (0 first, ascending). A running
    job's ``current`` count is always one of them, even off the powers of two of a large range or above
    ``gpus`` (its nodes stopped taking work but keep it): otherwise the search must move or stop it."""
    high = min(high, gpus)
    if low > high:
        counts = {0}
    elif high - low + 1 <= MAX_DENSE_COUNTS:
        counts = {0, *range(low, high + 1)}
    else:
        counts = {0, low, high, *(1 << k for k in range(high.bit_length()) if low < 1 << k < high)}
    return sorted(counts | {current})


def gpu_budget(view: ClusterView) -> int:
    """The GPUs the search shares out: those of nodes that take new work, plus those running jobs hold on
    nodes that do not (drained or silent nodes keep their jobs, :class:`FreeResources`), which they keep
    at their current count (:func:`held_elsewhere`)."""
    held = sum(len(part.gpus) for job in view.running.values() if held_elsewhere(view, job)
               for part in allocation_of(job).nodes
               if not view.free.schedulable[view.cluster.node(part.node).index])
    return view.schedulable_gpus + held


def held_elsewhere(view: ClusterView, job: JobInfo) -> bool:
    """Whether a running job holds GPUs on a node that takes no new work. Such a job is offered only 0 or
    its current count: :func:`gpu_budget` counts its held GPUs only at that count, so any other count
    would promise GPUs no node can give (a 4-GPU job there sized 8 left a pending job waiting)."""
    return job.allocation is not None and any(
        not view.free.schedulable[view.cluster.node(part.node).index] for part in job.allocation.nodes)


def allocate(costs: Sequence[Sequence[float]], sizes: Sequence[Sequence[int]], gpus: int,
             preferred: Sequence[int]) -> list[int]:
    """The multiple-choice knapsack of step 3: for each job the index of one of its options
    (``sizes[j][i]`` GPUs at ``costs[j][i]``) minimising the total cost with at most ``gpus`` GPUs.

    Dynamic programming over the GPU budget, job by job. Deterministic: options are tried with
    ``preferred[j]`` first, then in order, and only a strictly lower cost replaces an earlier one,
    so equal totals keep the earlier choice (the caller orders options and jobs as it wants ties
    broken). Every job must have an option of 0 GPUs."""
    n = len(costs)
    best = np.zeros(gpus + 1)  # best[b]: least cost of the jobs so far within b GPUs
    choice = np.zeros((n, gpus + 1), dtype=np.int64)
    for j in range(n):
        order = [preferred[j], *(i for i in range(len(costs[j])) if i != preferred[j])]
        new = np.full(gpus + 1, np.inf)
        pick = np.zeros(gpus + 1, dtype=np.int64)
        for i in order:
            g = sizes[j][i]
            if g > gpus:
                continue
            trial = best[: gpus + 1 - g] + costs[j][i]
            better = trial < new[g:]
            new[g:][better] = trial[better]
            pick[g:][better] = i
        if not np.isfinite(new).all():
            raise ValueError(f"job {j} has no option of 0 GPUs")
        best, choice[j] = new, pick
    out = [0] * n
    b = gpus
    for j in range(n - 1, -1, -1):
        out[j] = int(choice[j][b])
        b -= sizes[j][out[j]]
    return out


class Pollux(OwnPass):
    """Pollux (module docstring). ``placement`` places each count (``+cassini`` wraps it);
    ``adjusters`` run after the pass (Cassini's time-shifts) on what it left free."""

    needs_rounds = True  # phi_t grows with progress: speedups drift with time alone (§4: periodic)
    relies_on = frozenset({"elastic"})  # re-allocation changes the GPU count of elastic jobs only (resizable)
    acts_without_pending = True  # re-allocates running jobs with nothing waiting

    def __init__(self, *, name: str = "pollux", adapt_batch: bool = True, penalize_starts: bool = False,
                 explore_doubling: bool = False, placement: Placement | None = None,
                 adjusters: tuple[Adjuster, ...] = ()) -> None:
        """``penalize_starts``: apply REALLOC_FACTOR to a pending job's first GPUs too, as the
        reference simulator does (its passes are periodic; ours also run at an arrival, where the
        factor at age 0 is 0 and would forbid the start: docs/pollux.md). Off by default.
        ``explore_doubling``: a job may get at most twice the largest GPU count it has run on (1
        before it first runs), the reference simulator's cap on a job whose throughput it has not
        profiled (adaptdl ``simulator/simulator.py`` ``get_pollux_job_info``: ``max_replicas =
        min(max(2 * job.max_profiled_replicas, 1), ...)``); Halyard knows every count's throughput
        from its performance model, so the default offers the whole range. Off by default."""
        self.name = name
        self.adapt_batch = adapt_batch
        self.penalize_starts = penalize_starts
        self.explore_doubling = explore_doubling
        # Job id -> the largest GPU count an applied plan gave it (explore_doubling's profile).
        self._largest: dict[str, int] = {}
        self.placement: Placement = placement if placement is not None else FirstFitConsolidated()
        self.adjusters = adjusters
        # Job id -> re-allocations (R_j of REALLOC_FACTOR) from the plans the core applied.
        self._reallocations: dict[str, int] = {}

    def stages(self) -> list[tuple[str, str]]:
        batch = "adaptive batch" if self.adapt_batch else "submitted batch"
        return [("policy", f"{self.name} (goodput, p=-1, {batch})"), ("placement", self.placement.name),
                *described(self.adjusters)]

    def on_applied(self, view: ClusterView, plan: Plan, state: PassState) -> None:
        self.placement.on_applied(view, plan, state)
        for job_id in plan.moves().keys() | plan.stops():  # one re-allocation per job a pass moves or stops
            self._reallocations[job_id] = self._reallocations.get(job_id, 0) + 1
        if self.explore_doubling:
            for job_id, alloc in (plan.starts() | plan.moves()).items():
                self._largest[job_id] = max(self._largest.get(job_id, 0), alloc.num_gpus)
        live = view.running.keys() | {j.job_id for j in view.pending}
        if len(self._reallocations) > 2 * len(live) + 16:  # forget ended jobs
            self._reallocations = {k: v for k, v in self._reallocations.items() if k in live}
        if len(self._largest) > 2 * len(live) + 16:
            self._largest = {k: v for k, v in self._largest.items() if k in live}
        applied(self.adjusters, view, plan, state)

    def on_rejected(self, view: ClusterView, plan: Plan, state: PassState) -> None:
        self.placement.on_rejected(view, plan, state)
        rejected(self.adjusters, view, plan, state)

    # ------------------------------------------------------------------ the goodput model
    def goodput(self, view: ClusterView, job: JobInfo, gpus: int) -> tuple[float, int]:
        """Best goodput of ``job`` on ``gpus`` GPUs now, and the global batch reaching it (§3, the goodput)."""
        spec = job.spec
        m0 = _global_batch(view, spec)
        noise = noise_for(spec.model)
        total = max(job.iterations_total, 1)
        phi = noise_scale(noise, job.iterations_done(view.now) / total)
        largest = int(m0 * noise.max_batch_scale) if self.adapt_batch and _data_parallel(spec) else m0
        rates = {}
        for m in batch_candidates(m0, largest):
            rate = _throughput(view, spec, gpus, m)
            if rate > 0.0:
                rates[m] = rate
        return best_goodput(rates, phi, m0)

    def speedups(self, view: ClusterView, job: JobInfo, counts: Sequence[int], fair: int) -> list[float]:
        """``SPEEDUP_j(a)`` for each count (§4, PolluxSched), re-allocation penalty applied to a running job's
        other counts; 0 for 0 GPUs and for a count on which no batch fits."""
        low, high = job.spec.gpu_range if resizable(view, job.spec) else (job.spec.num_gpus,) * 2
        base, _ = self.goodput(view, job, min(max(fair, low), high))
        if base <= 0.0:  # no batch fits its fair share: measure from the smallest count that holds one
            base = next((g for g in (self.goodput(view, job, a)[0] for a in sorted(counts) if a > 0) if g > 0.0), 0.0)
        current = job.num_gpus if job.allocation is not None else 0
        factor = 1.0
        if current or self.penalize_starts:
            factor = realloc_factor(max(view.now - job.spec.submit_time, 0.0),
                                    self._reallocations.get(job.job_id, 0))
        out = []
        for a in counts:
            if a == 0 or base <= 0.0:
                out.append(0.0)
                continue
            s = self.goodput(view, job, a)[0] / base
            out.append(s if a == current else s * factor)
        return out

    # ------------------------------------------------------------------ the pass
    def schedule(self, view: ClusterView, state: PassState) -> Plan:
        plan = Plan()
        jobs: list[JobInfo] = sorted([*view.running.values(), *view.pending], key=lambda j: j.arrival_seq)
        free = view.free.copy()
        if jobs:
            sizes, refused = self._settle(view, jobs)
            free = self._finalize(view, plan, jobs, sizes, state, refused)
        return adjust(self.adjusters, view, plan, free, state)

    def _options(self, view: ClusterView, jobs: list[JobInfo]) -> tuple[list[list[float]], list[list[int]], int]:
        """Step 1-2: each job's GPU counts and their knapsack costs ``1 / (SPEEDUP + floor)``, and the budget."""
        gpus = gpu_budget(view)
        fair = max(1, math.ceil(gpus / len(jobs)))
        costs, options = [], []
        for job in jobs:
            low, high = job.spec.gpu_range if resizable(view, job.spec) else (job.spec.num_gpus,) * 2
            current = _current(job)
            if self.explore_doubling and resizable(view, job.spec):
                high = max(low, min(high, 2 * self._largest.get(job.job_id, 0) or 1))
            counts = [0, current] if held_elsewhere(view, job) else counts_for(low, high, gpus, current)
            speed = self.speedups(view, job, counts, fair)
            runnable = [i for i, s in enumerate(speed) if i == 0 or s > 0.0]
            options.append([counts[i] for i in runnable])
            costs.append([1.0 / (speed[i] + SPEEDUP_FLOOR) for i in runnable])
        return costs, options, gpus

    def _sizes(self, view: ClusterView, jobs: list[JobInfo]) -> dict[str, int]:
        """Step 3 without placement: each job's GPU count as the knapsack chooses it."""
        costs, options, gpus = self._options(view, jobs)
        picks = allocate(costs, options, gpus, _preferred(jobs, options))
        return {job.job_id: options[j][picks[j]] for j, job in enumerate(jobs)}

    def _settle(self, view: ClusterView, jobs: list[JobInfo]) -> tuple[dict[str, int], dict[str, Unplaced]]:
        """Step 3: counts the pass can place (docs/pollux.md, "Placeable counts"). Solve the knapsack, place
        its counts in the order the core applies them (:meth:`_place`, on a scratch pass state); each job
        whose count found no placement on the GPUs the earlier placements left keeps only the options that
        placement could take there (and 0 and its current count, which need no GPUs), and the knapsack is
        solved again, until every count is placed. Each round removes the failed count of at least one job,
        so it ends (at worst every job at 0 or its current count). Returns the counts and, per job, why a
        count of it was refused (its wait reason when it ends with 0)."""
        costs, options, gpus = self._options(view, jobs)
        refused: dict[str, Unplaced] = {}
        while True:
            picks = allocate(costs, options, gpus, _preferred(jobs, options))
            size = {job.job_id: options[j][picks[j]] for j, job in enumerate(jobs)}
            _, _, _, stuck = self._place(view, jobs, size, PassState())
            if not stuck:
                return size, refused
            index = {job.job_id: j for j, job in enumerate(jobs)}
            for job, there, why in stuck:
                j = index[job.job_id]
                refused[job.job_id] = why
                keep = [i for i, g in enumerate(options[j])
                        if g in (0, _current(job)) or (g != size[job.job_id] and not isinstance(
                            self.placement.place(view, job, g, there.copy(), PassState()), Unplaced))]
                options[j] = [options[j][i] for i in keep]
                costs[j] = [costs[j][i] for i in keep]

    def _place(self, view: ClusterView, jobs: list[JobInfo], size: dict[str, int], state: PassState
               ) -> tuple[list[str], FreeResources, list[tuple[JobInfo, Allocation]],
                          list[tuple[JobInfo, FreeResources, Unplaced]]]:
        """Place the changed counts in the order the core applies them: preemptions, then shrinking jobs,
        then the rest by (count, arrival); each job gives back what it holds and is placed on what the
        earlier ones left, so every target applies in this order (no cycle of moves). Returns the jobs
        preempted, the free resources after them, the targets in order, and the jobs whose count found no
        placement, with the resources they found (their own given back) and why."""
        free = view.free.copy()
        preempted = [job.job_id for job in view.running.values() if size[job.job_id] == 0]
        for job_id in preempted:
            free.give(allocation_of(view.running[job_id]))
        order = free.copy()
        changed = [j for j in jobs if size[j.job_id] and (j.allocation is None or j.num_gpus != size[j.job_id])]
        targets: list[tuple[JobInfo, Allocation]] = []
        stuck: list[tuple[JobInfo, FreeResources, Unplaced]] = []
        for job in sorted(changed, key=lambda j: (size[j.job_id] >= _current(j), size[j.job_id], j.arrival_seq)):
            g = size[job.job_id]
            if job.allocation is not None:
                free.give(job.allocation)
            placed = self.placement.place(view, job, g, free, state)
            if isinstance(placed, Unplaced):
                stuck.append((job, free.copy(), placed))
                if job.allocation is not None:
                    free.take(job.allocation)  # it keeps what it holds (given back just above)
                continue
            if resizable(view, job.spec):
                placed = Allocation(placed.nodes, stages=(StagePlan(g, data=g),))  # keeps M0 (module doc)
            placed = with_runtime_plan(view, job.spec, placed)
            free.take(placed)
            targets.append((job, placed))
        return preempted, order, targets, stuck

    def _finalize(self, view: ClusterView, plan: Plan, jobs: list[JobInfo], size: dict[str, int],
                  state: PassState, refused: dict[str, Unplaced] | None = None) -> FreeResources:
        """Step 4: preempt, place the changed counts in the order they apply, and emit them. A count that
        still finds no placement (``_settle`` placed it on a scratch state) leaves a pending job waiting
        and a running one where it is."""
        preempted, order, targets, stuck = self._place(view, jobs, size, state)
        for job_id in preempted:
            plan.preempt(job_id)
        for job, _, why in stuck:
            if job.allocation is None:
                plan.wait(job.job_id, why)
        for job in jobs:
            if job.allocation is None and size[job.job_id] == 0:
                why = (refused or {}).get(job.job_id) or cannot_fit(
                    self.name, "the goodput search gives it no GPUs this pass ({} schedulable)", view.schedulable_gpus)
                plan.wait(job.job_id, why)
        emit_in_order(plan, order, targets, self.name)
        return order


def _current(job: JobInfo) -> int:
    """The GPUs a job holds now (0 when pending)."""
    return job.num_gpus if job.allocation is not None else 0


def _preferred(jobs: list[JobInfo], options: list[list[int]]) -> list[int]:
    """Each job's option tried first by the knapsack (its current count: ties keep it)."""
    return [counts.index(_current(job)) if _current(job) in counts else 0
            for job, counts in zip(jobs, options, strict=True)]


def _data_parallel(spec: JobSpec) -> bool:
    par = spec.parallelism
    return par is None or (par.tensor == 1 and par.pipeline == 1)


def resizable(view: ClusterView, spec: JobSpec) -> bool:
    """Whether Pollux may give ``spec`` another GPU count than ``num_gpus``: an elastic data-parallel
    job whose model has layer figures, so a one-stage plan keeps its global batch on any count
    (a model without them runs plain data parallelism, whose global batch follows the GPU count,
    so it is sized at ``num_gpus`` only; docs/pollux.md)."""
    if not (spec.elastic and _data_parallel(spec)):
        return False
    return view.facts.memo("pollux/layers", spec.model, lambda: view.perf.layers(spec.model)) > 0


def _global_batch(view: ClusterView, spec: JobSpec) -> int:
    """``M0``: the job's submitted global batch, replicas x per-GPU batch (the model's reference
    batch when the job gives none)."""
    per_gpu = spec.batch_size or view.facts.memo("pollux/reference", spec.model,
                                                 lambda: view.perf.reference_batch(spec.model))
    replicas = spec.parallelism.data if spec.parallelism is not None else spec.num_gpus
    return max(1, replicas * per_gpu)


def _throughput(view: ClusterView, spec: JobSpec, gpus: int, batch: int) -> float:
    """Samples per second of ``spec`` training global batch ``batch`` on ``gpus`` GPUs: its iteration
    time from the performance model on the tightest placement of the cluster's most numerous GPU
    type, as it would run (an elastic data-parallel job as one stage keeping its global batch,
    else its own plan); 0 when the cluster lacks the GPUs or no plan of them fits memory."""
    key = (spec.model, spec.batch_size, spec.parallelism, spec.num_gpus, spec.elastic, gpus, batch)

    def compute() -> float:
        base = cell_allocation(view, most_numerous_type(view), gpus)
        if base is None:
            return 0.0
        submitted = spec.parallelism.data if spec.parallelism is not None else spec.num_gpus
        m0 = _global_batch(view, spec)
        if resizable(view, spec):  # one stage keeping the global batch: submitted replicas' worth
            alloc, replicas = Allocation(base.nodes, stages=(StagePlan(gpus, data=gpus),)), submitted
        else:  # its own plan: the data degree follows the GPU count
            alloc, replicas = base, (gpus if spec.parallelism is None else submitted)
        if batch == m0:
            trial, per_gpu = spec, m0 / submitted
            alloc = with_runtime_plan(view, spec, alloc)  # as it runs (a model-parallel plan if it needs one)
            if not view.perf.fits_plan(spec, alloc, view.cluster):
                return 0.0  # no plan of these GPUs holds the job (a Cell of too few GPUs for its global batch)
        else:
            per_gpu = math.ceil(batch / replicas)
            trial = dataclasses.replace(spec, batch_size=per_gpu)
            if not view.perf.fits_plan(trial, alloc, view.cluster):
                return 0.0  # a batch larger than memory holds is not a choice (the model's limit)
        step = float(view.perf.job_timing(trial, alloc, view.cluster).iteration.total_s)  # type: ignore[attr-defined]
        return replicas * per_gpu / step if step > 0.0 else 0.0

    return view.facts.memo("pollux/throughput", key, compute)
