"""Crius: Cell-based scheduling of large models on heterogeneous GPUs (papers/crius-cell-scheduling.txt).

* **Cells** (§4.2): a job x GPU type x GPU count x pipeline stages (:class:`Cell`). Stages are
  determined by mapping GPUs to operators by FLOPs and cutting at the smallest inter-operator
  communication (:func:`determine_stages`, Fig. 7). A job's initial Cells take ``N_G/2, N_G, 2 N_G``
  GPUs (within its ``min_gpus..max_gpus``) and ``log N_G`` stage counts from 1 to ``N_G``
  (:func:`gpu_choices`, :func:`stage_choices`, §6.1).
* **Agile estimation** (§5.1, Fig. 9): a Cell's time is the best of the ``2^S`` plans assembled
  from data-parallel-only and tensor-parallel-only stages (:func:`assembled_plans`), each costed
  by the performance model (``view.perf.job_timing``: first micro-batch through all stages plus
  ``(B - 1)`` x the slowest, ``B = 4 x stages``); plans that do not fit a GPU's memory are dropped.
  :func:`estimation_accuracy` is §8.2's ``1 - |Te - Td| / Td``.
* **Algorithm 1** (§6.1): :class:`Crius` runs ``CellBasedSched`` for each pending job in arrival
  order (SchedArrival, lines 2-8; SchedDeparture resumes pending jobs, line 10): ScaleResource
  explores choices for each of the job's Cells, downscaling running jobs or moving them to
  another GPU type with at most ``search_depth`` scaling operations (default 3, §8.4); BestPerf
  takes the choice of highest estimated cluster throughput; VirtualAlloc applies it to the
  virtual state only. With no job left pending, the extra scheduling of line 12 scales running
  jobs up into idle GPUs (at most ``search_depth`` operations). FinalizeAlloc (lines 8 and 13)
  turns the virtual state into one plan: Resize / Migrate / Start with each Cell's stage plan.
* **Opportunistic execution** (§6.1): a job that finds no feasible choice blocks; jobs started
  after it while it waits are opportunistic and are suspended (SUSPENDED events) as soon as its
  minimum requirement can be met on one GPU type with them gone.

Why Crius is its own :class:`~halyard.policies.stages.Policy` and not a
:class:`~halyard.policies.stages.BatchPlacement`: the staged pass fixes the runnable set by each
job's requested size before placement, while ScaleResource decides sizes, GPU types and which
running jobs shrink or move together with the placement of each new job.

Cluster throughput (BestPerf's objective) sums each job's normalised throughput: its Cell's
estimated iterations per second over those of its requested ``N_G`` GPUs on the fastest GPU type
(summing raw iterations per second of different models would favour small models).
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, product

from sortedcontainers import SortedKeyList, SortedList

from halyard.datamodel import Allocation, JobSpec, JobState, NodeAllocation, StagePlan
from halyard.parallelism import pipeline_depths, stage_splits
from halyard.policies.adaptive import fastest_fitting
from halyard.policies.adjusting import OwnPass, act_without_pending, applied, described, need_rounds
from halyard.policies.crius_profiles import (
    ProfileRefused,
    ProfileRequest,
    ProfilesPending,
    best_assembled,
    profilings,
)
from halyard.policies.event_order import RunningFollower
from halyard.policies.facts import ClusterFacts
from halyard.policies.moves import emit_in_order
from halyard.policies.passstate import PassState
from halyard.policies.placement import build_allocation, choose_nodes, usable_gpus
from halyard.policies.plan import Plan
from halyard.policies.reasons import Unplaced, cannot_fit, never_fits
from halyard.policies.view import ClusterView, JobInfo

# §6.1 "search depth, the maximum job scaling times for generating a scheduling choice";
# §8.4 "In our simulation, we set the search depth to 3".
SEARCH_DEPTH = 3
# §5.1, Fig. 9: 2^S assembled plans. Ours: above this many stages the assembly keeps the S + 1
# plans whose first k stages are tensor-parallel (memory is tightest in the first stages under
# 1F1B, so they take TP first); 2^S plans of a 32-stage Cell are not enumerable.
MAX_FULL_ASSEMBLY_STAGES = 4
# §8.2: "With Crius's distributed profiler, the average profiling time for one parallelism is reduced to
# about 30 seconds. As Crius samples 2 parallelisms in one Cell (as discussed in §5.1), the average profiling
# time for one Cell on only one GPU is about 1 minute." What one profiling takes with Crius(profiling_s=...).
PROFILE_S_PER_PARALLELISM = 30.0


@dataclass(frozen=True, slots=True, order=True)
class Cell:
    """A job's scheduling unit (§4.2): GPU type x GPU count x pipeline stages."""

    gpu_type: str
    gpus: int
    stages: int


@dataclass(frozen=True, slots=True)
class CellEstimate:
    """A Cell's estimated iteration time and the assembled plan that achieves it."""

    cell: Cell
    iteration_s: float
    plan: tuple[StagePlan, ...]


# ------------------------------------------------------------------ Cells (§4.2, §6.1)
def gpu_choices(spec: JobSpec) -> tuple[int, ...]:
    """§6.1 "Crius selects 3 available values (N_G/2, N_G, 2N_G)": those in the job's GPU range."""
    n = spec.num_gpus
    low, high = spec.gpu_range
    return tuple(sorted({c for c in (n // 2, n, 2 * n) if c >= 1 and low <= c <= high}))


def stage_choices(n_g: int, layers: int) -> tuple[int, ...]:
    """§6.1 "log N_G choices ranging from 1 to N_G": 1, 2, 4, ... up to ``N_G`` and the layer count
    (the one enumeration, :func:`~halyard.parallelism.pipeline_depths`)."""
    return pipeline_depths(n_g, layers)


def determine_stages(flops: Sequence[float], comm: Sequence[float], gpus: int,
                     stages: int) -> tuple[tuple[int, int, int], ...] | None:
    """Stage determination of a Cell (§4.2, Fig. 7): ``(first op, end op, GPUs)`` per stage.

    Each operator gets ``gpus x its share of the FLOPs`` (so every operator's elapsed time
    FLOPs / GPUs is equal); the ``stages - 1`` smallest inter-operator communications
    (``comm[i]`` between operators i and i + 1) are the cuts, ties broken towards balanced
    stages; a stage's GPUs are the mapped GPUs of its operators, rounded. None if a stage
    would get no GPU or ``stages`` exceeds the operators or GPUs.
    """
    n = len(flops)
    if len(comm) != n - 1:
        raise ValueError(f"{n} operators need {n - 1} inter-operator communications, got {len(comm)}")
    if not 1 <= stages <= min(n, gpus):
        return None
    total = float(sum(flops))
    cum = list(accumulate(gpus * f / total for f in flops))  # GPUs mapped up to and including op i
    unit = gpus / stages
    order = sorted(range(n - 1), key=lambda i: (comm[i], abs(cum[i] / unit - round(cum[i] / unit)), i))
    cuts = sorted(order[:stages - 1])
    bounds = [0, *(math.floor(cum[c] + 0.5) for c in cuts), gpus]
    ops = [0, *(c + 1 for c in cuts), n]
    out = tuple((ops[k], ops[k + 1], bounds[k + 1] - bounds[k]) for k in range(stages))
    return None if any(g < 1 for _, _, g in out) else out


def assembled_plans(stage_gpus: Sequence[int]) -> list[tuple[StagePlan, ...]]:
    """§5.1 "parallelism assembly" (Fig. 9): each stage data-parallel-only or tensor-parallel-only,
    ``2^S`` plans (duplicates of one-GPU stages removed); past :data:`MAX_FULL_ASSEMBLY_STAGES`
    stages the ``S + 1`` plans with the first k stages tensor-parallel (ours, see there)."""
    def stage(g: int, dp: bool) -> StagePlan:
        return StagePlan(g, data=g, tensor=1) if dp else StagePlan(g, data=1, tensor=g)

    n = len(stage_gpus)
    if n <= MAX_FULL_ASSEMBLY_STAGES:
        choices: Iterator[tuple[bool, ...]] = product((True, False), repeat=n)
    else:
        choices = (tuple(i >= k for i in range(n)) for k in range(n + 1))
    seen: dict[tuple[StagePlan, ...], None] = {}
    for choice in choices:
        seen.setdefault(tuple(stage(g, dp) for g, dp in zip(stage_gpus, choice, strict=True)))
    return list(seen)


def estimation_accuracy(estimated_s: float, measured_s: float) -> float:
    """§8.2: ``1 - |Te - Td| / Td``."""
    return 1.0 - abs(estimated_s - measured_s) / measured_s


def most_numerous_type(view: ClusterView) -> str:
    """The cluster's GPU type with the most GPUs (ties: the later name): where a baseline that
    ignores heterogeneity estimates a job (ElasticFlow, Pollux)."""
    return max(view.cluster.gpu_types, key=lambda t: (view.shape.total_gpus(t), t))


def cell_allocation(view: ClusterView, gpu_type: str, gpus: int) -> Allocation | None:
    """The consolidated placement a Cell is estimated on: nodes of ``gpu_type``, largest first,
    in cluster order (the single-device profiling of §5.1 assumes the type's interconnect)."""
    nodes = sorted((n for n in view.cluster.nodes if n.gpu_type == gpu_type), key=lambda n: (-n.gpus, n.index))
    parts, left = [], gpus
    for node in nodes:
        k = min(node.gpus, left)
        parts.append(NodeAllocation(node.name, tuple(range(k)), node.proportional_cpus(k),
                                    node.proportional_memory_mb(k)))
        left -= k
        if left == 0:
            return Allocation(tuple(parts))
    return None


def estimate_cell(view: ClusterView, spec: JobSpec, cell: Cell) -> CellEstimate | None:
    """Agile estimation of ``cell`` (§5.1): the best assembled plan that fits memory, or None.
    A pure function of the cluster and the model, memoised in ``view.facts``."""
    key = (spec.model, spec.batch_size, spec.parallelism, spec.num_gpus, cell)
    try:
        return view.facts.memo("crius/cell", key, lambda: _estimate(view, spec, cell))
    except ProfileRefused:
        return None  # not memoised: a later pass may get the profiling from another agent


def _estimate(view: ClusterView, spec: JobSpec, cell: Cell) -> CellEstimate | None:
    base = cell_allocation(view, cell.gpu_type, cell.gpus)
    if base is None:
        return None
    if view.facts.memo("crius/layers", spec.model, lambda: view.perf.layers(spec.model)) <= 0:
        # No layer figures: the model runs data parallel only, one Cell of its N_G GPUs.
        if cell.stages != 1 or cell.gpus != spec.num_gpus or not view.perf.fits_plan(spec, base, view.cluster):
            return None
        t = float(view.perf.job_timing(spec, base, view.cluster).iteration.total_s)  # type: ignore[attr-defined]
        return CellEstimate(cell, t, ())
    layers = _layers(view, spec)
    split = determine_stages([1.0] * layers, [1.0] * (layers - 1), cell.gpus, cell.stages)
    if split is None:
        return None
    stage_gpus = [g for _, _, g in split]
    # Two profilings (DP-only, TP-only) from the view's profile source, assembled (crius_profiles).
    found = best_assembled(view, spec, cell.gpu_type, base, stage_gpus, assembled_plans(stage_gpus))
    return None if found is None else CellEstimate(cell, found[0], found[1])


def _cells_key(spec: JobSpec) -> tuple[object, ...]:
    """What a job's Cells depend on (its size range and type constraint besides the model and batch)."""
    return (spec.model, spec.batch_size, spec.parallelism, spec.num_gpus, spec.gpu_range, spec.gpu_type)


def profile_requests(facts: ClusterFacts, spec: JobSpec) -> list[ProfileRequest]:
    """Every profiling the estimation of ``spec``'s Cells asks for (§6.1's Cells, two each, §5.1): what a
    live control plane fetches from its agents before the job's first pass."""
    return facts.memo("crius/profile-requests", _cells_key(spec), lambda: _profile_requests(facts, spec))


def _profile_requests(facts: ClusterFacts, spec: JobSpec) -> list[ProfileRequest]:
    layers = max(int(facts.memo("crius/layers", spec.model, lambda: facts.perf.layers(spec.model))), 0)
    if layers <= 0:
        return []  # data parallel only: its one Cell is costed by the model (see _estimate)
    out: dict[tuple[object, ...], ProfileRequest] = {}
    for gpu_type in facts.cluster.gpu_types:
        if spec.gpu_type is not None and gpu_type != spec.gpu_type:
            continue
        for gpus in gpu_choices(spec):
            base = cell_allocation(facts, gpu_type, gpus)  # type: ignore[arg-type]
            for s in stage_choices(spec.num_gpus, layers):
                split = determine_stages([1.0] * layers, [1.0] * (layers - 1), gpus, s) if gpus % s == 0 else None
                if base is not None and split is not None:
                    for request in profilings(spec, gpu_type, base, [g for _, _, g in split]):
                        out.setdefault(request.key, request)
    return list(out.values())


def tuned_cell(view: ClusterView, spec: JobSpec, cell: Cell, *, limit: int = 4096) -> CellEstimate | None:
    """The best plan of the Cell's whole space (every stage any DP x TP split, each costed by the
    performance model): what the Cell-guided tuner of §5.2 searches for, the ``Td`` against which
    §8.2 measures the estimate. Above ``limit`` plans every stage takes the same split."""
    base = cell_allocation(view, cell.gpu_type, cell.gpus)
    split = determine_stages([1.0] * _layers(view, spec), [1.0] * (_layers(view, spec) - 1), cell.gpus,
                             cell.stages) if base is not None else None
    if base is None or split is None:
        return None
    options = [stage_splits(g) for _, _, g in split]
    if math.prod(len(o) for o in options) <= limit:
        plans: Iterator[tuple[StagePlan, ...]] = product(*options)
    else:
        plans = (tuple(StagePlan(g, data=g // o.tensor, tensor=o.tensor) for _, _, g in split)
                 for o in options[0] if all(g % o.tensor == 0 for _, _, g in split))
    best = fastest_fitting(view, spec, base, (tuple(plan) for plan in plans))
    return None if best is None else CellEstimate(cell, *best)


def _layers(view: ClusterView, spec: JobSpec) -> int:
    """The model's layers: operators of equal FLOPs and equal output, so stages cut evenly (the
    catalog gives one ``layer_output_bytes`` for every layer)."""
    return max(int(view.facts.memo("crius/layers", spec.model, lambda: view.perf.layers(spec.model))), 1)


def job_cells(view: ClusterView, spec: JobSpec) -> dict[tuple[str, int], CellEstimate]:
    """The job's cells_set (Algorithm 1 line 5): per (GPU type, GPU count), its best-stage Cell."""
    return view.facts.memo("crius/cells", _cells_key(spec), lambda: _cells(view, spec))


def _cells(view: ClusterView, spec: JobSpec) -> dict[tuple[str, int], CellEstimate]:
    # Every type the job's constraint allows (the one type rule, ClusterFacts.allowed_types): a Cell is
    # feasible where estimate_cell finds a plan that fits its GPUs' memory (Fig. 3), whatever the
    # data-parallel worker needs (§4.2: Cells span the GPU types; §8.1 limits only the baselines to it).
    out: dict[tuple[str, int], CellEstimate] = {}
    stage_options = stage_choices(spec.num_gpus, _layers(view, spec))
    for gpu_type in view.facts.allowed_types(spec):
        for gpus in gpu_choices(spec):
            ests = [estimate_cell(view, spec, Cell(gpu_type, gpus, s)) for s in stage_options if gpus % s == 0]
            found = [e for e in ests if e is not None]
            if found:
                out[(gpu_type, gpus)] = min(found, key=lambda e: e.iteration_s)
    return out


def reference_s(view: ClusterView, spec: JobSpec) -> float:
    """Iteration time of the job's requested ``N_G`` GPUs on its fastest GPU type (normalises throughput)."""
    cells = job_cells(view, spec)
    at_n = [e.iteration_s for (_, g), e in cells.items() if g == spec.num_gpus]
    return min(at_n or [e.iteration_s for e in cells.values()] or [1.0])


# ------------------------------------------------------------------ Algorithm 1
@dataclass(frozen=True, slots=True)
class _Virtual:
    """A job's Cell in the pass's virtual allocation. Frozen: a running job's is kept from pass to pass
    (:class:`_Held`), and a pass that moves the job replaces it (:meth:`Crius._move`)."""

    job: JobInfo
    option: CellEstimate
    ref_s: float
    running: bool  # holds GPUs at the start of the pass
    original: tuple[str, int] | None  # (type, count) it holds at the start of the pass

    @property
    def throughput(self) -> float:
        return self.ref_s / self.option.iteration_s

    @property
    def key(self) -> tuple[str, int]:
        return (self.option.cell.gpu_type, self.option.cell.gpus)


# A scaling operation: (throughput lost per GPU freed, job, new GPU type, new GPU count, GPUs freed, Cell).
_Op = tuple[float, str, str, int, int, CellEstimate]


def _op_key(op: _Op) -> tuple[float, str, str, int]:
    return op[:4]


# A scale-up of line 12: ((GPU type, GPUs added), (-gain per GPU added, job, GPU type, GPU count)); the
# second is the rank, least first.
_Extra = tuple[tuple[str, int], tuple[float, str, str, int]]


@dataclass(slots=True)
class _PassVirtual:
    free: dict[str, int]
    jobs: dict[str, _Virtual] = field(default_factory=dict)
    scaled: set[str] = field(default_factory=set)
    suspended: list[str] = field(default_factory=list)
    started: list[str] = field(default_factory=list)
    # Memo of the pass: scaling operations per GPU type (:meth:`Crius._ops`) and the Cells that
    # found no choice, valid while ``version`` (bumped by every virtual change) stays the same.
    version: int = 0
    ops: dict[str, SortedKeyList] = field(default_factory=dict)
    same: dict[str, SortedKeyList] = field(default_factory=dict)  # the ops that stay on the type
    largest: dict[str, SortedList] = field(default_factory=dict)
    failed: dict[tuple[object, ...], int] = field(default_factory=dict)
    # GPU type -> (version, smallest deficit ScaleResource could not free): the greedy takes the same
    # operations whatever the deficit, so a larger one fails too while the state is unchanged.
    unfreeable: dict[str, tuple[int, int]] = field(default_factory=dict)
    # With the running jobs' operations kept from pass to pass (``base``, :class:`_RunningCells`), ``ops``,
    # ``same`` and ``largest`` hold only those of the jobs the pass starts; ``popped``: the running jobs
    # taken out of ``jobs`` for a suspension being tried, and ``excluded`` per GPU type those that were
    # out when the pass first asked for the type's operations (they stay out of them for the pass, as a
    # list built then would leave them out).
    base: _RunningCells | None = None
    popped: set[str] = field(default_factory=set)
    excluded: dict[str, frozenset[str]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Known:
    """What a job's Cells are (:func:`job_cells`, Crius-NA's filter applied) and its reference
    iteration time: functions of its spec and the cluster facts alone, so a pass reads them from the
    policy's memo by job id instead of deriving them again (a loaded queue asks for each job's many
    times a pass, and the same jobs' every pass)."""

    spec: JobSpec  # the memo holds while the job's spec is this object
    key: tuple[object, ...]  # _cells_key(spec)
    cells: dict[tuple[str, int], CellEstimate]
    ref_s: float
    need: int  # the fewest GPUs of its Cells (0: none)


@dataclass(slots=True)
class _Held:
    """A running job's Cell as its allocation makes it (:meth:`Crius._virtual`), kept while the job holds
    that allocation object, and its scaling operations (:meth:`Crius._add_ops`) once derived."""

    allocation: Allocation
    spec: JobSpec
    key: tuple[str, int]
    option: CellEstimate | None
    ref_s: float
    ops: list[_Op] | None = None
    most: int = 0


class _RunningCells(RunningFollower):
    """Each running job's Cell at the start of a pass (:class:`_Virtual`; None where its allocation is not
    one of its Cells, or its Cells' profilings are awaited), kept from pass to pass: a loaded cluster's
    ~1,000 running jobs are read again only when the core logs an event for one (policies/event_order.py),
    and the awaited ones every pass until their profilings come. ``cell_of`` reads one job
    (:meth:`Crius._running_cell`)."""

    def __init__(self, cell_of: Callable[[JobInfo, ClusterView], _Virtual | None],
                 ops_of: Callable[[ClusterView, _Virtual], tuple[list[_Op], int]] | None = None,
                 extras_of: Callable[[ClusterView, _Virtual], list[_Extra]] | None = None) -> None:
        self._cell_of = cell_of
        self._ops_of = ops_of
        self._extras_of = extras_of
        super().__init__()

    def _start(self, events: object) -> None:
        super()._start(events)
        self.cells: dict[str, _Virtual | None] = {}
        self._awaited: set[str] = set()
        self._nones = 0  # how many of ``cells`` are None
        # With ``ops_of``, each running job's scaling operations on its Cell (:meth:`Crius._job_ops`) by
        # the GPU type it runs on: all, those that stay on the type, and each job's most GPUs freed.
        self.ops: dict[str, SortedKeyList] = {}
        self.same: dict[str, SortedKeyList] = {}
        self.largest: dict[str, SortedList] = {}
        self._kept: dict[str, tuple[str, list[_Op], int]] = {}
        # With ``extras_of``, each running job's scale-ups of line 12 (:meth:`Crius._job_extras`) by (GPU
        # type, GPUs added), best first: a pass takes the first one whose added GPUs are free.
        self.extras: dict[tuple[str, int], SortedList] = {}
        self._kept_extras: dict[str, list[_Extra]] = {}

    def _holds(self, job: JobInfo) -> bool:
        return job.state is JobState.RUNNING

    def _held(self) -> int:
        return len(self.cells)

    def _learn(self, job: JobInfo, view: ClusterView) -> None:
        try:
            vj = self._cell_of(job, view)
        except ProfilesPending:  # its Cells' profilings are being asked (a restart): left as it is, for now
            vj = None
            self._awaited.add(job.job_id)
        self.cells[job.job_id] = vj
        self._nones += vj is None
        if vj is not None and self._ops_of is not None:
            gpu_type = vj.key[0]
            mine, most = self._ops_of(view, vj)
            self._kept[job.job_id] = (gpu_type, mine, most)
            ops = self.ops.setdefault(gpu_type, SortedKeyList(key=_op_key))
            same = self.same.setdefault(gpu_type, SortedKeyList(key=_op_key))
            for op in mine:
                ops.add(op)
                if op[2] == gpu_type:
                    same.add(op)
            if most:
                self.largest.setdefault(gpu_type, SortedList()).add(most)
        if vj is not None and self._extras_of is not None:
            extras = self._kept_extras[job.job_id] = self._extras_of(view, vj)
            for group, rank in extras:
                self.extras.setdefault(group, SortedList()).add(rank)

    def _forget(self, job_id: str) -> int | None:
        self._awaited.discard(job_id)
        if job_id in self.cells:
            self._nones -= self.cells.pop(job_id) is None
        kept = self._kept.pop(job_id, None)
        if kept is not None:
            gpu_type, mine, most = kept
            for op in mine:
                self.ops[gpu_type].remove(op)
                if op[2] == gpu_type:
                    self.same[gpu_type].remove(op)
            if most:
                self.largest[gpu_type].remove(most)
        for group, rank in self._kept_extras.pop(job_id, ()):
            self.extras[group].remove(rank)
        return None

    def _due(self, view: ClusterView) -> Iterable[str]:
        return tuple(self._awaited)

    def jobs(self, view: ClusterView) -> dict[str, _Virtual]:
        """The running jobs' Cells at ``view``, in the view's order (the core's start order: the order the
        pass meets them in, and so the order :meth:`Crius._finalize` places moved jobs in)."""
        self._follow(view)
        cells = self.cells
        if list(cells) != list(view.running):  # a job learned again went to the end: the view's order back
            if cells.keys() != view.running.keys():  # not expected: every change logs an event
                self._start(self._events)
                self._follow(view)
                cells = self.cells
            self.cells = cells = {job_id: cells[job_id] for job_id in view.running}
        if not self._nones:  # every value a _Virtual
            return dict(cells)  # type: ignore[arg-type]
        return {job_id: vj for job_id, vj in cells.items() if vj is not None}


class Crius(OwnPass):
    #: Keep the running jobs' Cells and scaling operations from pass to pass (:class:`_RunningCells`); off,
    #: every pass derives them again from the view (the straightforward path, which tests compare it with).
    incremental = True

    """Algorithm 1 (see the module docstring). ``search_depth``: §6.1's limit on scaling operations
    per scheduling choice (§8.7 evaluates 1-5). ``upscale``: run the extra scheduling of line 12.
    ``suspend``: suspend opportunistic jobs for the job they ran beside (§6.1); both are the
    paper's rules, on by default, and can be turned off for ablations. ``deadlines``: Crius-DDL
    (§8.5): a job with a deadline only gets Cells that finish by it, running jobs with deadlines
    are only scaled to Cells that still do, and a pending job that cannot finish by its deadline
    on its fastest Cell is dropped early (:class:`~halyard.policies.plan.Drop`).

    The ablations of §8.6 (Fig. 20), after Sia's terms: ``adaptivity=False`` (Crius-NA) never changes
    a job's GPU count -- its only Cells are of its requested ``N_G`` GPUs; ``heterogeneity=False``
    (Crius-NH) never changes a running job's GPU type -- ScaleResource and the extra scheduling only
    resize a job on the type it runs on (a new job still takes the Cell of highest throughput).
    ``tune``: a started, resized or moved job runs its Cell with the Cell-guided tuner's plan (§5.2,
    :func:`tuned_cell`) rather than the estimate's assembled plan.

    ``profiling_s`` (off at 0, the default; the paper's figure is :data:`PROFILE_S_PER_PARALLELISM`):
    the seconds one profiling takes. A job's Cells of a GPU type are usable only once its profilings
    on that type are done, one after another on one device of the type, the types in parallel (§6.1:
    "Crius requires a single device to profile the job on each kind of GPU, profilings on
    heterogeneous GPUs are done in parallel"): ``submit + profiling_s x`` its profilings on the type.
    Meanwhile the job waits (pending, so line 12 does not run) and round passes (every ``round_s``,
    §7's five minutes) look again.

    ``extra_with_pending`` (off by default): when line 12 runs. The text of §6.1 says "If there are no
    pending jobs, the algorithm triggers extra scheduling to allocate released resources to running
    jobs", which the default follows; the pseudocode's SchedDeparture runs line 12 after line 10 with
    no condition. With the option, line 12 also runs while a job is left pending, so running jobs
    scale up into GPUs that no pending job's Cell can use now. The GPUs it gives are taken back as any
    running job's are: ScaleResource may downscale those jobs for a pending job's Cell (within the
    search depth), and a blocked job's opportunistic jobs are suspended for it as before."""

    def __init__(self, *, search_depth: int = SEARCH_DEPTH, upscale: bool = True, suspend: bool = True,
                 deadlines: bool = False, adaptivity: bool = True, heterogeneity: bool = True,
                 tune: bool = True, profiling_s: float = 0.0, extra_with_pending: bool = False,
                 name: str = "crius") -> None:
        if search_depth < 0:
            raise ValueError(f"search_depth must be >= 0, got {search_depth}")
        if not (profiling_s >= 0.0 and math.isfinite(profiling_s)):
            raise ValueError(f"profiling_s must be a finite number of seconds >= 0, got {profiling_s}")
        self.profiling_s = profiling_s
        self.extra_with_pending = extra_with_pending
        self.name = name
        self.search_depth = search_depth
        self.upscale = upscale
        self.suspend = suspend
        self.deadlines = deadlines
        self.adaptivity = adaptivity
        self.tune = tune
        self.heterogeneity = heterogeneity
        # Opportunistic job -> the blocked job it runs beside (learned in on_applied only).
        self._opportunistic: dict[str, str] = {}
        # Memo of derived facts per job (:meth:`_of`) and per running job's allocation (:meth:`_virtual`),
        # valid for one ClusterFacts (one core's cluster and performance model); pure functions of it.
        self._facts: ClusterFacts | None = None
        self._known: dict[str, _Known] = {}
        self._held: dict[str, _Held] = {}
        self._running = self._new_running()
        self._profiling = False  # the last applied pass left a job with a GPU type still profiling (profiling_s > 0)

    @property
    def needs_rounds(self) -> bool:
        """With ``profiling_s``, a job waiting for its profilings becomes schedulable with time alone."""
        return self._profiling or need_rounds(self.adjusters)

    @property
    def acts_without_pending(self) -> bool:
        """The extra scheduling of line 12 runs when no job is pending (SchedDeparture)."""
        return self.upscale or act_without_pending(self.adjusters)

    def stages(self) -> list[tuple[str, str]]:
        out = [("policy", self.name), ("search-depth", str(self.search_depth))]
        if self.profiling_s > 0:
            out.append(("profiling-s", f"{self.profiling_s:g}"))
        return [*out, *described(self.adjusters)]

    # ---------------------------------------------------------------- the pass
    @property
    def honours(self) -> frozenset[str]:
        return frozenset({"deadline"}) if self.deadlines else frozenset()

    @property
    def relies_on(self) -> frozenset[str]:
        return self.honours  # Crius-DDL's deadline admission and early drop

    def profile_requests(self, spec: JobSpec, facts: ClusterFacts) -> list[ProfileRequest]:
        """The profilings estimating ``spec``'s Cells takes (§5.1): a live control plane asks its agents
        for them before the job's first pass (:func:`profile_requests`)."""
        return profile_requests(facts, spec)

    def own_pass(self, view: ClusterView, state: PassState) -> Plan:
        """Algorithm 1 (adjusters, if any, run after it: :class:`~halyard.policies.adjusting.OwnPass`). A
        pending job whose Cells' profilings are still awaited from the agents (a live control plane only)
        waits with that reason while the others are scheduled, and a running job whose Cells are awaited
        (after a restart) is left as it is; the answers run the next pass. A miss anywhere else makes the
        whole pass wait (the net below)."""
        try:
            return self._schedule(view, state)
        except ProfilesPending as exc:
            plan = Plan()
            for job in view.pending:
                plan.wait(job.job_id, cannot_fit(self.name, "waiting for Cell profiles from the agents ({})", exc))
            return plan

    def _schedule(self, view: ClusterView, state: PassState) -> Plan:
        plan = Plan()
        v = self._virtual(view)
        blocked: str | None = None
        opportunistic: list[tuple[str, str]] = []
        profiling = False  # a pending job waits for its Cells' profilings: it is pending for line 12 too
        rounds = False  # a pending job has a GPU type still profiling (profiling_s): round passes look again
        reasons: dict[tuple[int, int], Unplaced] = {}
        memo = self._known  # _of's, read here first: a loaded queue's jobs are all in it
        free_at: tuple[int, int] = (-1, 0)  # (v.version, GPUs free in v) as last summed
        for job in view.pending:  # SchedArrival / SchedDeparture: arrival order
            try:
                kept = memo.get(job.job_id)
                if kept is not None and kept.spec is job.spec:
                    known = kept
                else:
                    known = self._of(view, job)
                    memo = self._known
                cells = known.cells if self.profiling_s == 0 else self._cells(view, job.spec)
            except ProfilesPending as exc:  # its profilings are being asked: the other jobs go on
                profiling = True
                plan.wait(job.job_id, cannot_fit(self.name, "waiting for Cell profiles from the agents ({})", exc))
                continue
            # a type still profiling becomes usable with time alone: ask for round passes to look again
            rounds = rounds or (self.profiling_s > 0 and bool(self._ready_at(view, job.spec)))
            if self.deadlines and cells and not self._meets(view, job, min(e.iteration_s for e in cells.values())):
                plan.drop(job.job_id, "cannot finish before its deadline on its fastest Cell")
                continue
            if not cells and self.profiling_s > 0 and (ready := self._ready_at(view, job.spec)):
                profiling = True
                plan.wait(job.job_id, cannot_fit(self.name, "profiling its Cells until t={:g}", min(ready.values())))
                continue
            if not cells:
                plan.wait(job.job_id, never_fits(self.name, "no Cell of {:#GPU} fits any GPU type of the cluster",
                                                 "/".join(map(str, gpu_choices(job.spec)))))
                continue
            # a job of the same Cells already found no choice in this virtual state: so does this one
            if v.failed.get(known.key) != v.version and self._cell_based_sched(view, v, job, known, cells):
                if blocked is not None:
                    opportunistic.append((job.job_id, blocked))
                continue
            if blocked is None and self.suspend and self._suspend_for(view, v, job):
                continue
            if blocked is None:
                blocked = job.job_id
            need = known.need if self.profiling_s == 0 else min(g for _, g in cells)
            if free_at[0] != v.version:
                free_at = (v.version, sum(v.free.values()))
            said = (need, free_at[1])
            why = reasons.get(said)
            if why is None:  # one Unplaced (immutable) for every job of the pass told the same
                why = reasons[said] = cannot_fit(self.name, "needs {:#GPU} of one type; no Cell fits with up to "
                                                 "{} jobs scaled ({} free)", need, self.search_depth, said[1])
            plan.wait(job.job_id, why)
        if self.upscale and not profiling and (blocked is None or self.extra_with_pending):
            self._extra(view, v)  # line 12: extra scheduling for released resources
        self._finalize(view, v, plan)
        state.put("crius/opportunistic", (tuple(opportunistic), tuple(v.suspended)))
        state.put("crius/profiling", rounds)
        return plan

    def on_applied(self, view: ClusterView, plan: Plan, state: PassState) -> None:
        started, _ = state.get("crius/opportunistic", ((), ()))
        self._profiling = bool(state.get("crius/profiling", False))
        starts = set(plan.starts())
        gone = plan.stops()
        waiting = {j.job_id for j in view.pending} - starts
        self._opportunistic.update((job_id, blocked) for job_id, blocked in started if job_id in starts)
        # An opportunistic job is one no longer once it stops or the job it ran beside starts.
        self._opportunistic = {job_id: blocked for job_id, blocked in self._opportunistic.items()
                               if blocked in waiting and job_id not in gone
                               and (job_id in view.running or job_id in starts)}
        applied(self.adjusters, view, plan, state)

    def _cells(self, view: ClusterView, spec: JobSpec) -> dict[tuple[str, int], CellEstimate]:
        """The job's Cells this policy may choose: all of :func:`job_cells`, or (Crius-NA) those of
        its requested ``N_G`` GPUs."""
        cells = job_cells(view, spec)
        if not self.adaptivity:
            cells = view.facts.memo("crius/na-cells", _cells_key(spec),
                                    lambda: {k: e for k, e in cells.items() if k[1] == spec.num_gpus})
        if self.profiling_s > 0 and self._ready_at(view, spec):
            return {k: e for k, e in cells.items() if k[0] not in self._ready_at(view, spec)}
        return cells

    def _of(self, view: ClusterView, job: JobInfo) -> _Known:
        """The job's :class:`_Known`, from the memo (ProfilesPending, as :func:`job_cells`, if its Cells'
        profilings are still awaited: nothing is kept then)."""
        if view.facts is not self._facts:  # (inline: _of runs once per waiting job and pass)
            self._memo_for(view)
        known = self._known.get(job.job_id)
        if known is None or known.spec is not job.spec:
            spec = job.spec
            cells = job_cells(view, spec)
            if not self.adaptivity:
                cells = view.facts.memo("crius/na-cells", _cells_key(spec),
                                        lambda: {k: e for k, e in cells.items() if k[1] == spec.num_gpus})
            if len(self._known) > 2 * (len(view.pending) + len(view.running)) + 1024:  # forget ended jobs
                present = {j.job_id for j in view.pending} | set(view.running)
                self._known = {j: k for j, k in self._known.items() if j in present}
                self._held = {j: h for j, h in self._held.items() if j in present}
            known = self._known[job.job_id] = _Known(spec, _cells_key(spec), cells, reference_s(view, spec),
                                                     min((g for _, g in cells), default=0))
        return known

    def _cells_of(self, view: ClusterView, job: JobInfo) -> dict[tuple[str, int], CellEstimate]:
        """:meth:`_cells` of a job of the view, from the memo (with ``profiling_s`` they change with
        time: derived again)."""
        if self.profiling_s > 0:
            return self._cells(view, job.spec)
        return self._of(view, job).cells

    def _ready_at(self, view: ClusterView, spec: JobSpec) -> dict[str, float]:
        """With ``profiling_s``: the GPU types whose profilings of ``spec`` are not done at ``view.now``,
        each with when they will be (``submit + profiling_s x`` the job's profilings on the type)."""
        per_type = view.facts.memo("crius/profilings-per-type", _cells_key(spec), lambda: Counter(
            r.gpu_type for r in profile_requests(view.facts, spec)))
        done = {t: spec.submit_time + self.profiling_s * n for t, n in per_type.items()}
        return {t: at for t, at in done.items() if at > view.now}

    # ---------------------------------------------------------------- virtual state
    def _memo_for(self, view: ClusterView) -> None:
        """Forget the per-job memos when the view's facts are not those they were derived from (another
        core's cluster or performance model)."""
        if view.facts is not self._facts:
            self._facts, self._known, self._held = view.facts, {}, {}
            self._running = self._new_running()

    def _new_running(self) -> _RunningCells:
        """The running jobs' Cells kept from pass to pass, and their scaling operations too where those
        depend on the Cells alone (no deadlines: they depend on the time; no profiling time: the Cells
        of a type come with time)."""
        keep_ops = not self.deadlines and self.profiling_s == 0
        return _RunningCells(self._running_cell, self._job_ops if keep_ops else None,
                             self._job_extras if keep_ops else None)

    def _virtual(self, view: ClusterView) -> _PassVirtual:
        avail = usable_gpus(view.free, view.shape, None)
        free = {t: 0 for t in view.cluster.gpu_types}
        for node, n in zip(view.cluster.nodes, avail.tolist(), strict=True):
            free[node.gpu_type] += int(n)
        v = _PassVirtual(free)
        self._memo_for(view)
        if self.incremental and view.events is not None and view.jobs is not None:
            v.jobs = self._running.jobs(view)
            if self._running._ops_of is not None:
                v.base = self._running
            return v
        for job in view.running.values():  # every running job read again (a view built by hand has no event log)
            try:
                vj = self._running_cell(job, view)
            except ProfilesPending:  # its Cells' profilings are being asked (a restart): left as it is
                continue
            if vj is not None:
                v.jobs[job.job_id] = vj
        return v

    def _running_cell(self, job: JobInfo, view: ClusterView) -> _Virtual | None:
        """A running job's Cell as its allocation makes it (None: the allocation is not one of its Cells,
        as when another policy started it: left as it is); ProfilesPending while its Cells' profilings
        are awaited."""
        alloc = job.allocation
        if alloc is None:
            return None
        held = self._held.get(job.job_id)
        if held is None or held.allocation is not alloc or held.spec is not job.spec:
            types = {view.cluster.node(p.node).gpu_type for p in alloc.nodes if p.gpus}
            if len(types) != 1:
                return None
            key = (next(iter(types)), alloc.num_gpus)
            option = job_cells(view, job.spec).get(key)
            held = _Held(alloc, job.spec, key, option, self._of(view, job).ref_s)
            self._held[job.job_id] = held
        if held.option is None:
            return None
        return _Virtual(job, held.option, held.ref_s, True, held.key)

    def _cell_based_sched(self, view: ClusterView, v: _PassVirtual, job: JobInfo, known: _Known | None = None,
                          cells: dict[tuple[str, int], CellEstimate] | None = None) -> bool:
        """Lines 14-20: ScaleResource, BestPerf, VirtualAlloc; False if no choice is feasible. ``known`` and
        ``cells``: the job's :meth:`_of` and :meth:`_cells_of`, where the caller has them."""
        if known is None:
            known = self._of(view, job)
        same = known.key
        if v.failed.get(same) == v.version:  # a job of the same Cells already found no choice
            return False
        ref = known.ref_s
        if cells is None:
            cells = self._cells_of(view, job)
        best: tuple[float, int, tuple[str, int], list[tuple[str, CellEstimate]]] | None = None
        for key, option in cells.items():
            if self.deadlines and not self._meets(view, job, option.iteration_s):
                continue
            ops = self._scale_resource(view, v, key[0], key[1] - v.free[key[0]], exclude=job.job_id)
            if ops is None:
                continue
            gain = ref / option.iteration_s - sum(v.jobs[j].throughput - ref_of(v, j, o) for j, o in ops)
            rank = (-gain, len(ops), key)
            if best is None or rank < (best[0], best[1], best[2]):
                best = (-gain, len(ops), key, ops)
        if best is None:
            v.failed[same] = v.version
            return False
        _, _, key, ops = best
        for job_id, option in ops:
            self._move(v, job_id, option)
        v.free[key[0]] -= key[1]
        v.jobs[job.job_id] = started = _Virtual(job, cells[key], ref, False, None)
        self._add_ops(view, v, started)
        v.started.append(job.job_id)
        v.version += 1
        return True

    def _scale_resource(self, view: ClusterView, v: _PassVirtual, gpu_type: str, deficit: int,
                        exclude: str) -> list[tuple[str, CellEstimate]] | None:
        """ScaleResource (§6.1 "Scaling training jobs"): free ``deficit`` GPUs of ``gpu_type`` by
        downscaling running jobs on it or moving them to another type with room, at most
        ``search_depth`` operations, least throughput lost per GPU freed first. [] if nothing is
        needed, None if the depth does not suffice."""
        if deficit <= 0:
            return []
        if self.search_depth == 0:
            return None
        asked = deficit
        known = v.unfreeable.get(gpu_type)
        if known is not None and known[0] == v.version and deficit >= known[1]:
            return None
        if self._ops(view, v, gpu_type) < deficit:  # even the largest ``search_depth`` operations free too little
            return None
        # no room elsewhere: every move would be skipped below, so only the operations on the type
        same = not any(n > 0 for t, n in v.free.items() if t != gpu_type)
        ops: list[tuple[str, CellEstimate]] = []
        used: set[str] = set()
        room = dict(v.free)
        out = v.excluded.get(gpu_type, frozenset())
        for _, job_id, t, g, _, option in self._candidates(v, gpu_type, same):
            if deficit <= 0 or len(ops) == self.search_depth:
                break
            if (job_id in used or job_id == exclude or job_id in v.scaled or job_id not in v.jobs or job_id in out
                    or (t != gpu_type and g > room[t])):
                continue
            vj = v.jobs[job_id]
            used.add(job_id)
            if t == gpu_type:
                deficit -= vj.key[1] - g
            else:
                room[t] -= g
                deficit -= vj.key[1]
            ops.append((job_id, option))
        if deficit > 0:
            v.unfreeable[gpu_type] = (v.version, asked if known is None or known[0] != v.version
                                      else min(asked, known[1]))
            return None
        return ops

    def _ops(self, view: ClusterView, v: _PassVirtual, gpu_type: str) -> int:
        """Make ready every single scaling operation that frees GPUs of ``gpu_type`` (:meth:`_candidates`)
        and answer an upper bound of what ``search_depth`` of them free (the largest operation of each
        of the ``search_depth`` jobs that free most). Built once per type and pass, or kept from pass to
        pass (``v.base``); a job started later is added (:meth:`_add_ops`), scaled or suspended ones
        skipped. A bound over operations the pass will skip is looser, never wrong."""
        depth = self.search_depth
        if v.base is not None:
            if gpu_type not in v.excluded:
                v.excluded[gpu_type] = frozenset(v.popped)
            kept, added = v.base.largest.get(gpu_type), v.largest.get(gpu_type)
            tops = (list(kept[-depth:]) if kept and depth else []) + (list(added[-depth:]) if added and depth else [])
            return sum(sorted(tops)[-depth:]) if depth else 0
        if gpu_type not in v.ops:
            # Each running job's operations, as _add_ops makes them, kept with its allocation while it holds
            # it (they depend on its Cells and its Cell alone; with deadlines on the time too: made again);
            # sorted once. Operation keys are unique (job, type, GPUs), so the order is _add_ops' order.
            ops: list[_Op] = []
            largest: list[int] = []
            for vj in v.jobs.values():
                if vj.key[0] == gpu_type and vj.job.job_id not in v.scaled:
                    held = self._held.get(vj.job.job_id) if vj.running and not self.deadlines else None
                    if held is None or held.option is not vj.option:
                        mine, most = self._job_ops(view, vj)
                    else:
                        if held.ops is None:
                            held.ops, held.most = self._job_ops(view, vj)
                        mine, most = held.ops, held.most
                    ops.extend(mine)
                    if most:
                        largest.append(most)
            v.ops[gpu_type] = SortedKeyList(ops, key=_op_key)
            v.same[gpu_type] = SortedKeyList((op for op in ops if op[2] == gpu_type), key=_op_key)
            v.largest[gpu_type] = SortedList(largest)
        largest = v.largest[gpu_type]
        return sum(largest[-depth:]) if depth else 0

    @staticmethod
    def _candidates(v: _PassVirtual, gpu_type: str, same: bool) -> Iterable[_Op]:
        """The operations :meth:`_ops` made ready, least throughput lost per GPU freed first (``same``: only
        those that keep the job on ``gpu_type``): the kept ones merged with the pass's own."""
        mine = (v.same if same else v.ops).get(gpu_type)
        if v.base is None:
            return mine if mine is not None else ()
        kept = (v.base.same if same else v.base.ops).get(gpu_type, ())
        return heapq.merge(kept, mine, key=_op_key) if mine else kept

    def _meets(self, view: ClusterView, job: JobInfo, iteration_s: float) -> bool:
        """Whether ``job`` finishes by its deadline at ``iteration_s`` from now (no deadline: yes)."""
        deadline = job.spec.deadline
        return deadline is None or view.now + job.remaining_iterations(view.now) * iteration_s <= deadline

    def _add_ops(self, view: ClusterView, v: _PassVirtual, vj: _Virtual) -> None:
        """A job the pass starts: its operations join those of its GPU type (once built, without ``base``)."""
        gpu_type = vj.key[0]
        if v.base is not None:
            v.ops.setdefault(gpu_type, SortedKeyList(key=_op_key))
            v.same.setdefault(gpu_type, SortedKeyList(key=_op_key))
            v.largest.setdefault(gpu_type, SortedList())
        ops = v.ops.get(gpu_type)
        if ops is None:
            return
        mine, most = self._job_ops(view, vj)
        for op in mine:
            ops.add(op)
            if op[2] == gpu_type:
                v.same[gpu_type].add(op)
        if most:
            v.largest[gpu_type].add(most)

    def _job_ops(self, view: ClusterView, vj: _Virtual) -> tuple[list[_Op], int]:
        """The scaling operations of one job on its Cell, and the most GPUs one of them frees."""
        gpu_type, held = vj.key
        out: list[_Op] = []
        most = 0
        for (t, g), option in self._cells_of(view, vj.job).items():
            if t != gpu_type and not self.heterogeneity:
                continue  # Crius-NH: a job keeps its GPU type
            freed = held - g if t == gpu_type else held
            if freed > 0 and (not self.deadlines or self._meets(view, vj.job, option.iteration_s)):
                loss = max(vj.throughput - vj.ref_s / option.iteration_s, 0.0)
                out.append((loss / freed, vj.job.job_id, t, g, freed, option))
                most = max(most, freed)
        return out, most

    def _move(self, v: _PassVirtual, job_id: str, option: CellEstimate) -> None:
        vj = v.jobs[job_id]
        v.free[vj.key[0]] += vj.key[1]
        v.free[option.cell.gpu_type] -= option.cell.gpus
        v.jobs[job_id] = _Virtual(vj.job, option, vj.ref_s, vj.running, vj.original)
        v.scaled.add(job_id)
        v.version += 1

    def _suspend_for(self, view: ClusterView, v: _PassVirtual, job: JobInfo) -> bool:
        """Opportunistic execution (§6.1): suspend the jobs that started opportunistically while
        ``job`` waited (latest first) once its minimum requirement fits on one GPU type without them."""
        if not self._opportunistic:
            return False
        for (gpu_type, gpus), _ in sorted(self._cells_of(view, job).items(), key=lambda kv: (kv[0][1], kv[0][0])):
            victims = [vj for j, vj in v.jobs.items() if self._opportunistic.get(j) == job.job_id and vj.running
                       and vj.key[0] == gpu_type and j not in v.scaled]
            victims.sort(key=lambda vj: -vj.job.arrival_seq)
            room, chosen = v.free[gpu_type], []
            for vj in victims:
                if room >= gpus:
                    break
                room += vj.key[1]
                chosen.append(vj.job.job_id)
            if room < gpus:
                continue
            popped = {job_id: v.jobs.pop(job_id) for job_id in chosen}
            v.popped.update(chosen)
            v.version += 1
            v.free[gpu_type] += sum(vj.key[1] for vj in popped.values())
            if self._cell_based_sched(view, v, job):
                v.suspended.extend(chosen)
                return True
            v.jobs.update(popped)
            v.popped.difference_update(chosen)
            v.free[gpu_type] -= sum(vj.key[1] for vj in popped.values())
            v.version += 1
        return False

    def _extra(self, view: ClusterView, v: _PassVirtual) -> None:
        """Algorithm 1 line 12: scale running jobs up into idle GPUs, the largest throughput gain
        per GPU first, at most ``search_depth`` operations."""
        if v.base is not None:
            self._extra_kept(view, v, v.base)
            return
        for _ in range(self.search_depth):
            best: tuple[float, str, str, int] | None = None
            for job_id, vj in v.jobs.items():
                if job_id in v.scaled:
                    continue
                for (t, g), option in self._cells_of(view, vj.job).items():
                    if t != vj.key[0] and not self.heterogeneity:
                        continue  # Crius-NH
                    extra = g - vj.key[1] if t == vj.key[0] else g
                    if extra <= 0 or extra > v.free[t]:
                        continue
                    gain = vj.ref_s / option.iteration_s - vj.throughput
                    if gain <= 0:
                        continue
                    rank = (-gain / max(g - vj.key[1], 1), job_id, t, g)
                    if best is None or rank < best:
                        best = rank
            if best is None:
                return
            _, job_id, t, g = best
            self._move(v, job_id, self._cells_of(view, v.jobs[job_id].job)[(t, g)])

    def _extra_kept(self, view: ClusterView, v: _PassVirtual, base: _RunningCells) -> None:
        """:meth:`_extra` over the scale-ups kept from pass to pass: the best of each (GPU type, GPUs
        added) group whose GPUs are free, skipping jobs scaled or suspended in the pass, and those of
        the jobs the pass started, derived here."""
        for _ in range(self.search_depth):
            best: tuple[float, str, str, int] | None = None
            for (t, extra), ranks in base.extras.items():
                if extra > v.free[t]:
                    continue
                for rank in ranks:
                    job_id = rank[1]
                    if job_id not in v.scaled and job_id in v.jobs:
                        if best is None or rank < best:
                            best = rank
                        break
            for job_id in v.started:
                if job_id not in v.scaled:
                    for (t, extra), rank in self._job_extras(view, v.jobs[job_id]):
                        if extra <= v.free[t] and (best is None or rank < best):
                            best = rank
            if best is None:
                return
            _, job_id, t, g = best
            self._move(v, job_id, self._cells_of(view, v.jobs[job_id].job)[(t, g)])

    def _job_extras(self, view: ClusterView, vj: _Virtual) -> list[_Extra]:
        """The scale-ups line 12 may give one job on its Cell (:meth:`_extra`'s rule): each Cell with more
        GPUs, of higher throughput, on its type or (not Crius-NH) another."""
        out: list[_Extra] = []
        gpu_type, held = vj.key
        for (t, g), option in self._cells_of(view, vj.job).items():
            if t != gpu_type and not self.heterogeneity:
                continue  # Crius-NH
            extra = g - held if t == gpu_type else g
            if extra <= 0:
                continue
            gain = vj.ref_s / option.iteration_s - vj.throughput
            if gain > 0:
                out.append(((t, extra), (-gain / max(g - held, 1), vj.job.job_id, t, g)))
        return out

    # ---------------------------------------------------------------- FinalizeAlloc
    def _run_plan(self, view: ClusterView, vj: _Virtual) -> tuple[StagePlan, ...]:
        """The plan a job runs its Cell with: the Cell-guided tuner's best plan of the Cell (§5.2; the
        estimate of §5.1 ranks Cells, the tuner then searches the Cell's space for the plan the job
        trains with, 96.2% of the optimum in §8.2), or the estimate's plan with ``tune=False``."""
        option = vj.option
        if not self.tune or not option.plan:
            return option.plan
        spec = vj.job.spec
        key = (spec.model, spec.batch_size, spec.parallelism, spec.num_gpus, option.cell)
        tuned = view.facts.memo("crius/tuned", key, lambda: tuned_cell(view, spec, option.cell))
        return option.plan if tuned is None else tuned.plan

    def _finalize(self, view: ClusterView, v: _PassVirtual, plan: Plan) -> None:
        """Lines 8 and 13: one plan from the virtual allocation: suspensions, then resized or moved
        running jobs (their old GPUs given back first), then new jobs, on consolidated nodes.

        The core applies a plan's actions in order, so each move or start is emitted once the GPUs
        it takes are free after the actions before it; a cycle of moves that cannot be ordered is
        left out (those jobs keep their Cells, the jobs that needed their GPUs wait)."""
        free = view.free.copy()
        for job_id in v.suspended:
            plan.suspend(job_id)  # §6.1: suspended, not preempted (its own event kind and count)
            free.give(view.running[job_id].allocation)  # type: ignore[arg-type]
        order = free.copy()  # the core's view as the actions are applied
        # Only _move changes a job's Cell, and it marks the job scaled: the others need no look.
        scaled = v.scaled
        moved = ([vj for j, vj in v.jobs.items() if j in scaled and vj.running and vj.key != vj.original]
                 if scaled else [])
        for vj in moved:
            free.give(vj.job.allocation)  # type: ignore[arg-type]
        todo: list[tuple[_Virtual, Allocation]] = []
        for vj in moved + [v.jobs[j] for j in v.started]:
            cell = vj.option.cell
            picked = choose_nodes(usable_gpus(free, view.shape, cell.gpu_type), view.shape, cell.gpus)
            if picked is None:  # fragmented CPU/memory: the job keeps what it had, or waits
                if not vj.running:
                    plan.wait(vj.job.job_id, cannot_fit(self.name, "its Cell of {:#GPU} of type {} does not fit the "
                                                        "free nodes' CPU and memory", cell.gpus, cell.gpu_type))
                continue
            alloc = Allocation(build_allocation(free, picked).nodes, stages=self._run_plan(view, vj))
            free.take(alloc)
            todo.append((vj, alloc))
        emit_in_order(plan, order, [(vj.job, alloc) for vj, alloc in todo], self.name)


def ref_of(v: _PassVirtual, job_id: str, option: CellEstimate) -> float:
    """A job's normalised throughput on ``option``."""
    return v.jobs[job_id].ref_s / option.iteration_s

