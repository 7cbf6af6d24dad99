"""EasyScale's schedulers (papers/easyscale-elastic-training.txt §3.4, §5.2) as stages.

An EasyScale job keeps ``maxP`` logical workers (ESTs, ``JobSpec.logical_workers``) and
runs on however many GPUs, of whatever types, it holds (``min_gpus..max_gpus``).

* **Intra-job scheduler** (:class:`IntraJob`, one per policy, pure over the view's facts):
  its *companion database* maps a GPU set (GPUs per type) to the plan of Eq. 1a-1d with
  the erratum of Eq. 1c corrected (:func:`halyard.parallelism.best_est_mapping`,
  memoised in ``ClusterFacts``). Role-1: on any GPU set it applies the top plan, i.e. the
  EST-to-GPU mapping with the least overload (:meth:`IntraJob.mapped`). Role-2: it proposes
  the top-K scale-outs by homogeneous increments (k GPUs of one type) whose plan wastes at
  most ``waste_threshold`` of the GPUs' capability, is faster than the current plan and at
  most doubles the job's GPUs (the artifact's rules, REFERENCE-NUMBERS.md). Role-3: it
  applies what is granted and falls back to the previous GPUs when the job ran slower on the
  new ones (:class:`EasyScaleProposals`).
* **Inter-job scheduler**: a new job first gets its smallest proposal (:class:`SmallestProposal`
  sizes it at ``min_gpus``; :class:`EasyScalePlacement` puts it on the fastest GPU type with room),
  in arrival order, then :class:`EasyScaleProposals` grants the running jobs' proposals greedily by
  speed-up per GPU, ``(s_new / s_cur - 1) / delta_gpus + 1`` (ties: more GPUs first), one per job
  per round (a job whose GPUs changed less than ``round_s`` ago proposes nothing; the artifact's
  round is 60 s: run with ``--round-s 60``).
* ``easyscale-homo`` constrains every plan to one GPU type (the job's current one); ``easyscale-heter``
  lets plans mix types, except for models whose D2 determinism would cost 236% (§3.3, §5.1.3:
  EasyScale keeps them on one type; :func:`halyard.parallelism.needs_homogeneous`).

Rules not in the paper or its artifact, each a named option of :class:`EasyScaleOptions`:
``top_k`` (the paper says "top-K" without a K; 3), a proposal must be strictly faster than
the current plan (the artifact says "speed-up >= the current one"; an equal-speed scale-out only
holds GPUs, so ``allow_equal_speed`` is off by default), and a GPU set a job fell back from is not
proposed again for ``retry_after_rounds`` rounds (10; the paper's companion module instead corrects
its estimates, which Eq. 1 alone cannot: it has no communication term). Role-3 judges a scale-out
once, at the first pass after it (the job's rate on the new GPUs is known by then).
Co-location (§3.4, §5.3): a waiting job of higher ``priority`` (online serving) that cannot
start takes GPUs back at once from running elastic jobs of lower priority, newest first, each scaled
in by Resize to no fewer than its ``min_gpus`` (``reclaim_for_priority``); the elastic jobs grow back
by their proposals once the GPUs are free again.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from halyard.datamodel import Allocation, JobSpec, NodeAllocation
from halyard.parallelism import PlanThroughput, best_est_mapping, needs_homogeneous, spread_ests
from halyard.policies.passstate import PassState
from halyard.policies.placement import build_allocation, choose_nodes, no_fit, usable_gpus
from halyard.policies.plan import Plan, Resize
from halyard.policies.reasons import Unplaced
from halyard.policies.resources import FreeResources
from halyard.policies.stages import Adjuster, Sizing
from halyard.policies.view import ClusterView, JobInfo
from halyard.policies.yarn import OneTypeConsolidated, fastest_first

Counts = tuple[tuple[str, int], ...]  # GPUs per type, sorted by type: a key of the companion database


@dataclass(frozen=True, slots=True)
class EasyScaleOptions:
    """The intra-/inter-job schedulers' rules (REFERENCE-NUMBERS.md, EasyScale artifact)."""

    heterogeneous: bool = True
    waste_threshold: float = 0.30  # artifact: a proposal's waste <= 0.30 (of the GPUs' capability)
    max_growth: float = 2.0  # artifact: a proposal at most doubles the job's GPUs
    top_k: int = 3  # ours: the paper's "top-K" gives no K
    allow_equal_speed: bool = False  # ours: the artifact's ">=" would also grant no-gain scale-outs
    homogeneous_d2_models: bool = True  # §3.3: models that need vendor kernels stay on one GPU type
    retry_after_rounds: int = 10  # ours: a GPU set that slowed a job is not proposed again for this many rounds
    reclaim_for_priority: bool = True  # §3.4/§5.3: higher-priority (serving) jobs take GPUs back from elastic ones
    # The artifact's (simulator.py / easy_policy.py optimize_v3): a new job gets the last of its proposals, the one of
    # least speed-up -- one GPU of the slowest type it may use -- and waits while that type has no room. Off: the
    # fastest type with room (the paper gives no rule). Measured in docs/reproductions/easyscale-public-comparison.md.
    first_on_slowest: bool = False


@dataclass(frozen=True, slots=True)
class Proposal:
    """Role-2: ``delta`` more GPUs of ``gpu_type`` for ``job_id``, and what the plan promises."""

    job_id: str
    gpu_type: str
    delta: int
    speedup: float  # s_new / s_cur (estimated, corrected Eq. 1)
    score: float  # speed-up per GPU: (s_new / s_cur - 1) / delta + 1
    arrival_seq: int

    @property
    def rank(self) -> tuple[float, int, int, str]:
        """Greedy order: higher speed-up per GPU, then more GPUs (§3.4), then arrival and type."""
        return (-self.score, -self.delta, self.arrival_seq, self.gpu_type)


class IntraJob:
    """The intra-job scheduler and its companion database, over the view's memoised facts."""

    def __init__(self, options: EasyScaleOptions) -> None:
        self.options = options

    # --------------------------------------------------------------- the companion database
    @staticmethod
    def capability(view: ClusterView, spec: JobSpec, gpu_type: str) -> float:
        """EasyScale's ``C_i``: local steps (mini-batches) per second of one EST on ``gpu_type``."""
        return view.facts.memo("easyscale/capability", (spec.model, spec.batch_size, gpu_type),
                               lambda: 1.0 / view.perf.ideal_iteration_time(spec, gpu_type))

    def plan(self, view: ClusterView, spec: JobSpec, counts: Counts) -> PlanThroughput:
        """The top plan for GPU set ``counts`` (Role-1's database query), corrected Eq. 1."""
        def compute() -> PlanThroughput:
            caps = {t: self.capability(view, spec, t) for t, _ in counts}
            return best_est_mapping(dict(counts), caps, spec.logical_workers)
        return view.facts.memo("easyscale/plan", (spec.model, spec.batch_size, spec.logical_workers, counts),
                               compute)

    def waste_fraction(self, view: ClusterView, spec: JobSpec, counts: Counts) -> float:
        caps = {t: self.capability(view, spec, t) for t, _ in counts}
        return self.plan(view, spec, counts).waste_fraction(dict(counts), caps)

    # --------------------------------------------------------------- Role-1
    def mapped(self, view: ClusterView, spec: JobSpec, allocation: Allocation) -> Allocation:
        """``allocation`` with the top plan's EST-to-GPU mapping: exactly ``maxP`` ESTs, at most
        ``A_i`` on a GPU of type i, the surplus taken from the slowest GPUs first."""
        types = [view.cluster.node(p.node).gpu_type for p in allocation.nodes for _ in p.gpus]
        plan = self.plan(view, spec, counts_of(types))
        caps = {t: self.capability(view, spec, t) for t in set(types)}
        ests = spread_ests(types, plan.ests_per_gpu or {}, caps, spec.logical_workers)
        parts, k = [], 0
        for p in allocation.nodes:
            n = len(p.gpus)
            parts.append(NodeAllocation(p.node, p.gpus, p.cpus, p.memory_mb, tuple(ests[k:k + n]) if n else ()))
            k += n
        return Allocation(tuple(parts), allocation.time_shift_s, allocation.stages)

    # --------------------------------------------------------------- Role-2
    def allowed_types(self, view: ClusterView, spec: JobSpec, current: Counts) -> list[str]:
        """The GPU types a scale-out may add: the current one under ``homo`` (and for models that
        need homogeneous GPUs), else every type the job fits."""
        fit = view.gpu_types_for(spec)
        present = sorted(view.cluster.gpu_types if fit is None else fit)
        homogeneous = not self.options.heterogeneous or (
            self.options.homogeneous_d2_models and needs_homogeneous(spec.model))
        if homogeneous and current:
            return [t for t, _ in current if t in present][:1]
        return present

    def proposals(self, view: ClusterView, job: JobInfo, free_by_type: Mapping[str, int],
                  blocked: frozenset[Counts] = frozenset()) -> list[Proposal]:
        """Role-2: the top-K scale-outs of ``job`` by homogeneous increments that pass the artifact's rules."""
        spec, allocation = job.spec, job.allocation
        if allocation is None or not spec.logical_workers:
            return []
        current = counts_of([view.cluster.node(p.node).gpu_type for p in allocation.nodes for _ in p.gpus])
        held = allocation.num_gpus
        most = min(spec.gpu_range[1], spec.logical_workers, math.floor(held * self.options.max_growth))
        s_cur = self.plan(view, spec, current).throughput
        out: list[Proposal] = []
        for t in self.allowed_types(view, spec, current):
            for delta in range(1, min(free_by_type.get(t, 0), most - held) + 1):
                counts = add(current, t, delta)
                if counts in blocked:
                    continue
                s_new = self.plan(view, spec, counts).throughput
                faster = s_new > s_cur * (1 + 1e-9) or (self.options.allow_equal_speed and s_new >= s_cur * (1 - 1e-9))
                if not faster or self.waste_fraction(view, spec, counts) > self.options.waste_threshold + 1e-12:
                    continue
                speedup = s_new / s_cur
                out.append(Proposal(job.job_id, t, delta, speedup, (speedup - 1) / delta + 1, job.arrival_seq))
        out.sort(key=lambda p: p.rank)
        return out[:self.options.top_k]


def counts_of(types: list[str]) -> Counts:
    seen: dict[str, int] = {}
    for t in types:
        seen[t] = seen.get(t, 0) + 1
    return tuple(sorted(seen.items()))


def add(counts: Counts, gpu_type: str, delta: int) -> Counts:
    merged = dict(counts)
    merged[gpu_type] = merged.get(gpu_type, 0) + delta
    return tuple(sorted(merged.items()))


def free_by_type(view: ClusterView, free: FreeResources) -> dict[str, int]:
    """Usable free GPUs (with their proportional CPU and memory) per GPU type."""
    avail = usable_gpus(free, view.shape, None)
    out: dict[str, int] = {}
    for node, n in zip(view.cluster.nodes, avail, strict=True):
        if n:
            out[node.gpu_type] = out.get(node.gpu_type, 0) + int(n)
    return out


# ------------------------------------------------------------------- stages
class SmallestProposal(Sizing):
    """A new job's first allocation is its smallest proposal: ``min_gpus`` (a non-elastic job: all it asks)."""

    name = "easyscale-smallest"

    def gpus(self, view: ClusterView, job: JobInfo) -> int:
        return job.spec.gpu_range[0]


class EasyScalePlacement(OneTypeConsolidated):
    """The smallest proposal's GPUs on one type, the fastest for the job that has room (fewest nodes),
    with the intra-job scheduler's EST mapping (Role-1); a job without logical workers is placed the same way."""

    name = "easyscale"

    def __init__(self, options: EasyScaleOptions | None = None) -> None:
        self.intra = IntraJob(options or EasyScaleOptions())

    def place(self, view: ClusterView, job: JobInfo, gpus: int, free: FreeResources,
              state: PassState) -> Allocation | Unplaced:
        if not (self.intra.options.first_on_slowest and job.spec.logical_workers):
            return super().place(view, job, gpus, free, state)
        slowest = fastest_first(view, job)[-1]  # EasyScaleOptions.first_on_slowest: that type or nothing
        picked = choose_nodes(usable_gpus(free, view.shape, slowest), view.shape, gpus)
        if picked is not None:
            return self.finish(view, job, build_allocation(free, picked))
        return no_fit(self.name, view, job, gpus, usable_gpus(free, view.shape, slowest))

    def finish(self, view: ClusterView, job: JobInfo, allocation: Allocation) -> Allocation:
        return self.intra.mapped(view, job.spec, allocation) if job.spec.logical_workers else allocation


@dataclass(frozen=True, slots=True)
class _Grant:
    """A scale-out in flight: the GPUs before it and the job's iteration time on them (Role-3)."""

    before: Allocation
    before_iteration_s: float
    after: Allocation
    counts: Counts


@dataclass
class EasyScaleProposals(Adjuster):
    """The inter-job scheduler's rounds: fall back from scale-outs that slowed a job (Role-3), then
    grant the running jobs' proposals greedily by speed-up per GPU, one per job per round."""

    honours = frozenset({"priority"})  # co-location: higher-priority jobs take GPUs back (§3.4, §5.3)
    relies_on = frozenset({"logical_workers"})  # a job without ESTs gets no proposals: it never scales

    options: EasyScaleOptions = field(default_factory=EasyScaleOptions)
    name: str = "easyscale-heter"
    acts_without_pending: ClassVar[bool] = True
    needs_rounds: ClassVar[bool] = True
    # Learned from applied plans only: scale-outs not yet judged, and GPU sets that slowed a job.
    _grants: dict[str, _Grant] = field(default_factory=dict)
    _blocked: dict[str, dict[Counts, float]] = field(default_factory=dict)  # GPU set -> until when

    def __post_init__(self) -> None:
        self.intra = IntraJob(self.options)

    def adjust(self, view: ClusterView, plan: Plan, free: FreeResources, state: PassState) -> None:
        touched = plan.touched()
        if self.options.reclaim_for_priority:
            self._reclaim(view, plan, free, touched)
        granted: dict[str, _Grant] = state.setdefault("easyscale/granted", dict)
        fallen: dict[str, Counts] = state.setdefault("easyscale/fallen", dict)
        judged: list[str] = state.setdefault("easyscale/judged", list)
        for job_id, grant in sorted(self._grants.items()):
            judged.append(job_id)
            job = view.running.get(job_id)
            if job is None or job_id in touched or job.allocation != grant.after:
                continue
            if job.iteration_s > grant.before_iteration_s * (1 + 1e-9):  # Role-3: slower, fall back
                free.give(grant.after)
                free.take(grant.before)
                plan.resize(job_id, grant.before)
                fallen[job_id] = grant.counts
                touched.add(job_id)
        left = free_by_type(view, free)
        if not any(left.values()):
            return
        proposals: list[Proposal] = []
        for job in sorted(view.running.values(), key=lambda j: j.arrival_seq):
            last = job.last_assignment_time
            # (a relative margin: replay's clock carries an offset, so exactly one round may read 59.999...)
            if job.job_id in touched or (last is not None and view.now - last < view.round_s * (1 - 1e-6)):
                continue
            blocked = frozenset(c for c, until in self._blocked.get(job.job_id, {}).items() if until > view.now)
            proposals += self.intra.proposals(view, job, left, blocked)
        proposals.sort(key=lambda p: p.rank)
        for p in proposals:
            if p.job_id in touched or left.get(p.gpu_type, 0) < p.delta:
                continue
            job = view.running[p.job_id]
            grown = self._grow(view, job, p, free)
            if grown is None:
                continue
            plan.resize(p.job_id, grown)
            touched.add(p.job_id)
            left[p.gpu_type] -= p.delta
            current = counts_of([view.cluster.node(n.node).gpu_type for n in grown.nodes for _ in n.gpus])
            granted[p.job_id] = _Grant(job.allocation, job.iteration_s, grown, current)  # type: ignore[arg-type]

    def _reclaim(self, view: ClusterView, plan: Plan, free: FreeResources, touched: set[str]) -> None:
        """Co-location (§3.4 inter-job scheduler, §5.3): a waiting job of higher priority (online
        serving) that the pass could not start takes GPUs back from elastic jobs of lower priority,
        newest first, each scaled in by Resize down to its ``min_gpus``; it starts in the same pass.
        An elastic job may give GPUs to several such jobs in one pass (one Resize, its last size)."""
        started = set(plan.starts())
        urgent = sorted((j for j in view.pending if j.spec.priority > 0 and j.job_id not in started),
                        key=lambda j: (-j.spec.priority, j.arrival_seq))
        current: dict[str, Allocation] = {}  # elastic jobs scaled in by this pass: their allocation now
        where: dict[str, int] = {}  # ... and the index of their Resize in the plan
        for job in urgent:
            need = job.spec.gpu_range[0]
            types = view.gpu_types_for(job.spec)
            short = need - int(usable_gpus(free, view.shape, types).sum())
            shrunk: list[tuple[str, Allocation, Allocation]] = []
            for victim in sorted(view.running.values(), key=lambda j: -j.arrival_seq):
                if short <= 0:
                    break
                held = current.get(victim.job_id, victim.allocation)
                if (not victim.spec.logical_workers or victim.spec.priority >= job.spec.priority or held is None
                        or (victim.job_id in touched and victim.job_id not in current)):
                    continue
                smaller = self._shrink(view, victim.spec, held, short, types)
                if smaller is not None:
                    shrunk.append((victim.job_id, held, smaller))
                    short -= held.num_gpus - smaller.num_gpus
            if short > 0:
                continue  # elastic jobs cannot make room: it waits with the staged pass's reason
            for job_id, held, smaller in shrunk:
                free.give(held)
                free.take(smaller)
                current[job_id] = smaller
                if job_id in where:
                    plan.replace(where[job_id], Resize(job_id, smaller))
                else:
                    where[job_id] = len(plan.actions)
                    plan.resize(job_id, smaller)
                touched.add(job_id)
            picked = choose_nodes(usable_gpus(free, view.shape, types), view.shape, need)
            if picked is None:
                continue
            allocation = build_allocation(free, picked)
            free.take(allocation)
            plan.start(job.job_id, allocation)
            plan.unplaced.pop(job.job_id, None)
            touched.add(job.job_id)

    def _shrink(self, view: ClusterView, spec: JobSpec, allocation: Allocation, want: int,
                types: frozenset[str] | None) -> Allocation | None:
        """``allocation`` with up to ``want`` fewer GPUs (of ``types``; last nodes first), ``min_gpus`` kept."""
        spare = allocation.num_gpus - spec.gpu_range[0]
        if spare <= 0:
            return None
        left = min(spare, want)
        parts: list[NodeAllocation] = []
        for n in reversed(allocation.nodes):
            node = view.cluster.node(n.node)
            drop = 0 if types is not None and node.gpu_type not in types else min(left, len(n.gpus))
            left -= drop
            keep = n.gpus[:len(n.gpus) - drop]
            if keep:
                parts.append(NodeAllocation(n.node, keep, node.proportional_cpus(len(keep)),
                                            node.proportional_memory_mb(len(keep))))
        if sum(len(p.gpus) for p in parts) == allocation.num_gpus:
            return None
        return self.intra.mapped(view, spec, Allocation(tuple(reversed(parts))))

    def _grow(self, view: ClusterView, job: JobInfo, p: Proposal, free: FreeResources) -> Allocation | None:
        """The job's GPUs plus ``p.delta`` free GPUs of ``p.gpu_type``: on nodes it already uses first,
        then the fewest nodes; taken from ``free``; mapped by Role-1."""
        allocation = job.allocation
        assert allocation is not None
        avail = usable_gpus(free, view.shape, p.gpu_type)
        mine = [view.cluster.node(n.node).index for n in allocation.nodes]
        picked: list[tuple[int, int]] = []
        left = p.delta
        for i in mine:
            take = min(int(avail[i]), left)
            if take > 0:
                picked.append((i, take))
                avail[i] -= take
                left -= take
        if left:
            rest = choose_nodes(avail, view.shape, left)
            if rest is None:
                return None
            picked += rest
        added = build_allocation(free, picked)
        free.take(added)
        merged = {n.node: NodeAllocation(n.node, n.gpus, n.cpus, n.memory_mb) for n in allocation.nodes}
        for n in added.nodes:
            old = merged.get(n.node)
            merged[n.node] = n if old is None else NodeAllocation(
                n.node, old.gpus + n.gpus, old.cpus + n.cpus, old.memory_mb + n.memory_mb)
        order = [*allocation.node_names, *(n.node for n in added.nodes if n.node not in allocation.node_names)]
        return self.intra.mapped(view, job.spec, Allocation(tuple(merged[k] for k in order)))

    def on_applied(self, view: ClusterView, plan: Plan, state: PassState) -> None:
        resized = plan.resized()
        for job_id in [*resized, *state.get("easyscale/judged", [])]:
            self._grants.pop(job_id, None)
        for job_id, grant in state.get("easyscale/granted", {}).items():
            self._grants[job_id] = grant
        until = view.now + self.options.retry_after_rounds * view.round_s
        for job_id, counts in state.get("easyscale/fallen", {}).items():
            self._blocked.setdefault(job_id, {})[counts] = until
        # Forget jobs that left.
        live = set(view.running) | resized
        for job_id in [j for j in self._grants if j not in live]:
            del self._grants[job_id]
        for job_id in [j for j in self._blocked if j not in live]:
            del self._blocked[job_id]


def easyscale_homo() -> EasyScaleProposals:
    return EasyScaleProposals(EasyScaleOptions(heterogeneous=False), name="easyscale-homo")


def easyscale_heter() -> EasyScaleProposals:
    return EasyScaleProposals(EasyScaleOptions(heterogeneous=True), name="easyscale-heter")

