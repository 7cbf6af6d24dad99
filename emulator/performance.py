"""How long one training iteration takes for a model, a placement and a cluster.

The performance model (formulas and sources: docs/performance-model.md):

- compute: the catalog's per-GPU time on the allocation's GPU type (the
  slowest type if mixed); a batch other than the reference scales the part of
  the time above the optimizer step linearly;
- communication: the model's fp32 gradients all-reduced in DDP buckets over
  the slowest tier the placement crosses (:mod:`halyard.emulator.collectives`);
- overlap: buckets become ready during backward and go out one after another:
  ``exposed = max(C/B, C - (1 - 1/B) x backward)``;
- memory: weights, gradients and optimizer state plus activations, against
  the GPU type's capacity (:meth:`PerformanceModel.fits_memory`).

Link contention (:mod:`halyard.emulator.contention`), data stalls
(:mod:`halyard.emulator.datastall`) and elastic/pipeline costs
(:mod:`halyard.emulator.elastic`) are pure functions next to this class.

The simulator calls :meth:`PerformanceModel.iteration_time` at every job start,
so an allocation is reduced to a small hashable shape and results are cached
per instance (there is no module-level mutable state).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from halyard.datamodel import Allocation, Cluster, HalyardError, JobSpec, NodeAllocation, StagePlan, StageProfile, Tier
from halyard.emulator.catalog import Catalog, GpuSpec, ModelProfile, load_catalog
from halyard.emulator.collectives import (
    ALGORITHMS,
    GBYTE,
    allreduce_s,
    buckets_for,
    exposed_s,
    hierarchical_allreduce_s,
)
from halyard.emulator.datastall import HostCurve, host_curve, stalled_iteration_s
from halyard.emulator.elastic import determinism_factor, est_step_s
from halyard.emulator.parallel import (
    JobTiming,
    accumulation_steps,
    assembled_iteration_s,
    data_parallel_expert_s,
    data_parallel_timing,
    fitting_cell_plan,
    is_data_parallel,
    plan_memory,
    plan_timing,
    profile_plan,
)

OVERLAP_MODES = ("ddp", "layerwise")
# How jobs sharing a link split it (halyard.emulator.fabric): not at all (every job at its
# dedicated speed), fair max-min sharing (TCP-like; DESIGN.md's default) or MLTCP's unfair sharing.
CONTENTION_MODES = ("off", "fair", "mltcp")


class UnsupportedGPUError(HalyardError, ValueError):
    """The catalog has no compute profile for this model on this GPU type."""


@dataclass(frozen=True, slots=True)
class IterationTime:
    """One iteration of a data-parallel job, in seconds.

    ``communication_s`` is the whole gradient all-reduce; ``exposed_s`` the
    part of it not hidden behind backward compute; ``total_s`` =
    ``compute_s + exposed_s``; ``tier`` the slowest tier the placement crosses.
    """

    compute_s: float
    communication_s: float
    exposed_s: float
    total_s: float
    tier: Tier


@dataclass(frozen=True, slots=True)
class MemoryFootprint:
    """GPU memory one worker of a job needs, in bytes.

    ``state_bytes`` = weights + gradients + optimizer state
    (``state_bytes_per_parameter x parameters``, divided over tensor and
    pipeline shards); ``activation_bytes`` = the catalog's activations at the
    reference batch scaled to the job's per-GPU batch (divided over tensor
    shards) -- per micro-batch when ``micro_batches`` > 1; ``reserve_bytes`` =
    CUDA context, workspaces and fragmentation.

    ``micro_batches`` is 1 unless the job runs at its model's reference batch
    (``batch_size`` 0) and those activations do not fit: the per-GPU batch then
    runs as that many micro-batches with gradient accumulation
    (:meth:`PerformanceModel.memory_footprint`). ``batch`` is the per-GPU batch
    the footprint is for (the reference batch when the job leaves it at 0).
    """

    state_bytes: float
    activation_bytes: float
    reserve_bytes: float
    capacity_bytes: float
    micro_batches: int = 1
    batch: int = 0

    @property
    def total_bytes(self) -> float:
        return self.state_bytes + self.activation_bytes + self.reserve_bytes

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes


# (gpu_type, gpus, fabric_gbyte_s, nic_gbyte_s, rack_index) per node name; the inter-rack
# bandwidth is the cluster's (Cluster.inter_rack_gbyte_s: uplinks over the spine, or switch links).
_NodeInfo = tuple[str, int, float, float, int]


@dataclass(frozen=True, slots=True)
class _ClusterIndex:
    cluster: Cluster
    nodes: dict[str, _NodeInfo]
    reference_gpu: str  # the cluster's most common GPU type
    host: dict[str, tuple[float, float]]  # node -> GPU-proportional (CPUs, memory GB) per GPU
    # GPU type -> the largest per-GPU host share among its nodes (the consolidated time's host)
    best_host: dict[str, tuple[float, float]] = field(default_factory=dict)


# The placement reduced to what the cost depends on:
# (gpu types, gpus, nodes, max GPUs on a node, intra-node GB/s, inter-node GB/s, tier).
_Shape = tuple[str | tuple[str, ...], int, int, int, float, float, Tier]


class PerformanceModel:
    """The one performance model the simulator and the emulated agents share."""

    def __init__(self, catalog: Catalog | None = None, *, allreduce: str = "ring",
                 overlap: str = "ddp", data_stalls: bool = False, contention: str = "fair",
                 communication: bool = True, start_cost_s: float = 0.0, resize_cost_s: float | None = None) -> None:
        """``allreduce``: ``ring`` (default; two-level across nodes), ``tree`` or ``auto``
        for the all-reduce between nodes (inside a node it is always a ring).
        ``overlap``: ``ddp`` (buckets overlap backward only; default) or
        ``layerwise`` (each layer's all-reduce may run until its next forward,
        as in ASTRA-sim and Dally's simulator). ``data_stalls``: bound compute by
        the CPU cores and memory per GPU of the allocation (Synergy; off by
        default, see docs/performance-model.md "Data stalls" for why). ``contention``:
        how jobs sharing a NIC or rack uplink slow each other (``CONTENTION_MODES``;
        the drivers apply it through :class:`halyard.emulator.fabric.Fabric`).

        Three options that take the model towards EasyScale's public simulator (sUntvoOk/
        EasyScale_info_for_SC23 ``simulator/simulator.py``), to measure what its simpler model is
        worth (docs/easyscale-public-comparison.md); each off by default:
        ``communication=False`` makes every all-reduce, expert all-to-all and EST gradient copy
        free (the artifact's step is ``batch x maxP / compute time``); ``start_cost_s`` is charged
        once, at a job's first start (the artifact's 20 s ``rescale_time``, never reset);
        ``resize_cost_s``, when set, replaces the checkpoint-and-restart cost of a resize (the
        artifact charges nothing after the first start: 0)."""
        if start_cost_s < 0 or (resize_cost_s is not None and resize_cost_s < 0):
            raise ValueError(f"start_cost_s and resize_cost_s must be >= 0, got {start_cost_s}, {resize_cost_s}")
        self._communication = communication
        self.start_cost_s = start_cost_s
        self._resize_cost_s = resize_cost_s
        if allreduce not in ALGORITHMS:
            raise ValueError(f"allreduce must be one of {', '.join(ALGORITHMS)}, got {allreduce!r}")
        if overlap not in OVERLAP_MODES:
            raise ValueError(f"overlap must be one of {', '.join(OVERLAP_MODES)}, got {overlap!r}")
        if contention not in CONTENTION_MODES:
            raise ValueError(f"contention must be one of {', '.join(CONTENTION_MODES)}, got {contention!r}")
        self._contention = contention
        self._allreduce = allreduce
        self._overlap = overlap
        self._data_stalls = data_stalls
        self._curves: dict[str, HostCurve | None] = {}
        self._stalled: dict[tuple[str, int, _Shape, float, float], IterationTime] = {}
        self._catalog = catalog if catalog is not None else load_catalog()
        self._models = self._catalog.models
        c = self._catalog.constants
        self._latency = {Tier.GPU: 0.0, Tier.NODE: c.node_latency_s,
                         Tier.RACK: c.rack_latency_s, Tier.SPINE: c.spine_latency_s}
        self._clusters: dict[int, _ClusterIndex] = {}
        self._timings: dict[tuple[str, int, _Shape], IterationTime] = {}
        self._tightest: dict[tuple[int, str, int], _Shape] = {}
        self._footprints: dict[tuple[str, int, int, int, str], MemoryFootprint] = {}
        self._plans: dict[tuple[object, ...], JobTiming] = {}
        self._fitting: dict[tuple[object, ...], tuple[StagePlan, ...] | None] = {}

    # ----------------------------------------------------------------- catalog
    @property
    def data_stalls(self) -> bool:
        """Whether compute is bounded by the CPU/memory data-stall model."""
        return self._data_stalls

    @property
    def contention(self) -> str:
        """How jobs sharing a link slow each other: ``off``, ``fair`` or ``mltcp``."""
        return self._contention

    @property
    def overlap(self) -> str:
        """How the gradient all-reduce overlaps compute: ``ddp`` or ``layerwise``."""
        return self._overlap

    def tier_latency_s(self, tier: Tier) -> float:
        """Latency of one collective step at ``tier`` (the catalog's node/rack/spine constants)."""
        return self._latency[tier]

    @property
    def catalog(self) -> Catalog:
        return self._catalog

    def models(self) -> tuple[str, ...]:
        return tuple(self._models)

    def has_model(self, name: str) -> bool:
        return name in self._models

    def profile(self, name: str) -> ModelProfile:
        try:
            return self._models[name]
        except KeyError:
            raise KeyError(f"unknown model {name!r}; the catalog ({self._catalog.source}) has: "
                           f"{', '.join(sorted(self._models))}") from None

    def layers(self, model: str) -> int:
        """The layers a tensor or pipeline plan of ``model`` splits; 0 when the catalog gives none."""
        profile = self.profile(model)
        return int(profile.layers) if profile.layer_output_bytes > 0 else 0

    def reference_batch(self, model: str) -> int:
        """The catalog's per-GPU batch of ``model``: what a job with ``batch_size`` 0 trains."""
        return int(self.profile(model).reference_batch)

    def models_by_task(self) -> dict[str, tuple[str, ...]]:
        out: dict[str, list[str]] = {}
        for name, p in self._models.items():
            out.setdefault(p.task, []).append(name)
        return {task: tuple(names) for task, names in out.items()}

    def supports_gpu(self, model: str, gpu_type: str) -> bool:
        return self.profile(model).compute_time_s(gpu_type) is not None

    def gpu_types(self) -> tuple[str, ...]:
        """GPU types of the catalog's ``[gpus]`` table (memory and speed known)."""
        return tuple(self._catalog.gpus)

    def gpu(self, gpu_type: str) -> GpuSpec:
        try:
            return self._catalog.gpus[gpu_type]
        except KeyError:
            raise UnsupportedGPUError(f"GPU type {gpu_type!r} is not in the catalog's [gpus] table "
                                      f"(known: {', '.join(self._catalog.gpus)})") from None

    def throughput_matrix(self, batch: int = 0) -> dict[str, dict[str, float]]:
        """Seconds per iteration, model -> GPU type -> time on one GPU (compute only).

        ``batch`` is the per-GPU batch (0: each model's reference batch).
        Which figures are estimates: ``profile(model).estimated("compute_s.<GPU>")``.
        """
        return {name: {g: self._compute_s(p, g, batch) for g in p.compute_s}
                for name, p in self._models.items()}

    # ----------------------------------------------------------------- data stalls
    def host_curve(self, model: str) -> HostCurve | None:
        """The model's host-side (CPU, cache) times, or None if it is not input-bound."""
        if model not in self._curves:
            p = self.profile(model)
            if p.data is None:
                self._curves[model] = None
            else:
                v100 = p.compute_time_s("V100")
                if v100 is None:
                    raise UnsupportedGPUError(f"model {model!r}: the data-stall curve is anchored on V100")
                self._curves[model] = host_curve(p.data, v100, self._catalog.constants.proportional_cpus_per_gpu)
        return self._curves[model]

    def cache_hit_rate(self, model: str, memory_gb_per_gpu: float) -> float:
        """Per-epoch cache hit rate with ``memory_gb_per_gpu`` of memory (1.0 if not input-bound)."""
        curve = self.host_curve(model)
        return 1.0 if curve is None else curve.hit_rate(memory_gb_per_gpu)

    def cache_fetch_s(self, model: str, memory_gb_per_gpu: float, batch: int = 0) -> float:
        """Seconds per iteration reading the batch's cache misses from storage (the cache model,
        ``(1 - h(m)) x T_miss`` scaled by the batch; 0 if the model is not input-bound).
        What optimistic profiling fills the memory columns of the sensitivity matrix with."""
        curve = self.host_curve(model)
        if curve is None:
            return 0.0
        p = self.profile(model)
        return (batch or p.reference_batch) / p.reference_batch * curve.fetch_s(memory_gb_per_gpu)

    def stalled_compute_s(self, model: str, gpu_type: str, cpus_per_gpu: float, memory_gb_per_gpu: float,
                          batch: int = 0) -> float:
        """``max(T_gpu, T_cpu(c), T_fetch(m))`` for one GPU of ``gpu_type`` (datastall module)."""
        p = self.profile(model)
        scale = (batch or p.reference_batch) / p.reference_batch
        return stalled_iteration_s(self._compute_s(p, gpu_type, batch), self.host_curve(model),
                                   cpus_per_gpu, memory_gb_per_gpu, scale)

    def throughput_factor(self, model: str, cpus_per_gpu: float, memory_gb_per_gpu: float,
                          gpu_type: str = "V100", batch: int = 0) -> float:
        """Throughput with these CPUs and memory per GPU over the GPU-proportional share's.

        1.0 at Synergy's proportional share (3 CPUs, 62.5 GB per GPU) on every GPU
        type; above 1 with more, below with less; 1.0 everywhere for a model that is
        not input-bound (language models).
        """
        c = self._catalog.constants
        base = self.stalled_compute_s(model, gpu_type, c.proportional_cpus_per_gpu,
                                      c.proportional_memory_gb_per_gpu, batch)
        return base / self.stalled_compute_s(model, gpu_type, cpus_per_gpu, memory_gb_per_gpu, batch)

    # ----------------------------------------------------------------- memory
    def gpu_memory_bytes(self, gpu_type: str) -> float:
        """Memory capacity of one GPU of this type."""
        return self.gpu(gpu_type).memory_bytes

    def memory_footprint(self, spec: JobSpec, gpu_type: str, gpus: int = 0) -> MemoryFootprint:
        """Memory one GPU of ``gpu_type`` needs to run ``spec`` (per worker) on ``gpus`` GPUs (0: its own
        ``num_gpus``).

        State is ``state_bytes_per_parameter x parameters / (tensor x pipeline)``, of a GShard MoE
        model only its share of the experts over the ``gpus / (tensor x pipeline)`` data-parallel
        replicas (:meth:`~halyard.emulator.catalog.ModelProfile.held_parameters`);
        activations are ``activation_bytes x batch / reference_batch / tensor``
        (1F1B pipelining keeps about one stage's worth per in-flight micro-batch,
        which the per-stage split cancels; docs/performance-model.md).

        Micro-batch fallback: a job left at its model's reference batch
        (``batch_size`` 0, what trace loaders produce) whose activations do not
        fit runs the batch as ``k`` micro-batches with gradient accumulation,
        ``k`` the smallest number (at most the batch) for which state + the
        largest micro-batch's activations (``ceil(batch / k)`` samples) + reserve
        fits. Its iteration time is unchanged: compute is linear in the batch
        above the batch-independent optimizer step, which runs once per
        iteration, and so does the gradient all-reduce, so ``k`` micro-batches
        of ``b / k`` cost what one batch of ``b`` does. An explicit
        ``batch_size`` is the user's per-GPU batch and must fit as given (a real
        job would run out of memory), so it never gets micro-batches. If no
        ``k`` fits, the footprint is the one at ``k`` = the batch (one sample per
        micro-batch: the least the job could run with) and ``fits`` is False.

        Cached per (model, batch, tensor, pipeline, GPU type, experts held): the
        scheduling core asks at every submission and for every allocation it
        validates, and policies ask per pending job and pass.
        """
        par = spec.parallelism
        tensor, pipeline = (par.tensor, par.pipeline) if par else (1, 1)
        p = self.profile(spec.model)
        data = max((gpus or spec.num_gpus) // (tensor * pipeline), 1)
        key = (spec.model, spec.batch_size, tensor, pipeline, gpu_type, min(data, p.experts) if p.experts else 1)
        hit = self._footprints.get(key)
        if hit is None:
            hit = self._footprints[key] = self._footprint(*key)
        return hit

    def _footprint(self, model: str, batch_size: int, tensor: int, pipeline: int, gpu_type: str,
                   data: int) -> MemoryFootprint:
        p = self.profile(model)
        c = self._catalog.constants
        capacity = self.gpu_memory_bytes(gpu_type)
        batch = batch_size or p.reference_batch
        state = c.state_bytes_per_parameter * p.held_parameters(data) / (tensor * pipeline)
        reserve = c.framework_reserve_bytes
        per_sample = p.activation_bytes / p.reference_batch / tensor
        micro = accumulation_steps(state + reserve, per_sample, batch, capacity) if batch_size == 0 else 1
        return MemoryFootprint(state_bytes=state, activation_bytes=per_sample * math.ceil(batch / micro),
                               reserve_bytes=reserve, capacity_bytes=capacity, micro_batches=micro, batch=batch)

    def fits_memory(self, spec: JobSpec, gpu_type: str, gpus: int = 0) -> bool:
        """Whether one worker of ``spec`` on ``gpus`` GPUs (0: ``num_gpus``) fits in the memory of a
        ``gpu_type`` GPU (with micro-batches where the fallback of :meth:`memory_footprint` applies)."""
        return self.memory_footprint(spec, gpu_type, gpus).fits

    # ----------------------------------------------------------------- timing
    def job_timing(self, spec: JobSpec, allocation: Allocation, cluster: Cluster) -> JobTiming:
        """The one answer for a job on an allocation: its iteration time and its Up/Down demand
        on every NIC and rack uplink it crosses, under its data, tensor, pipeline or hybrid plan
        (``spec.parallelism``, ``allocation.stages``; :mod:`halyard.emulator.parallel`).

        The simulator's pacer, the fabric and the emulated agents all call this, so the phases
        the fabric charges a job for are the ones its iteration time was computed with. Plans
        other than data parallelism are cached per (model, batch, plan, GPUs per node).
        """
        if (spec.parallelism is None and not allocation.stages) or is_data_parallel(spec, allocation):
            timing = self.iteration_time(spec, allocation, cluster)
            if len(allocation.nodes) < 2 or timing.communication_s <= 0.0:
                return JobTiming(timing, ())  # no NIC crossed (a part without GPUs holds no link either)
            dp_key = (id(cluster), spec.model, timing, tuple(p.node for p in allocation.nodes if p.gpus))
            hit = self._plans.get(dp_key)
            if hit is None:
                hit = self._plans[dp_key] = data_parallel_timing(self, spec, allocation, cluster, timing)
            return hit
        key = (id(cluster), spec.model, spec.batch_size, spec.parallelism, allocation.stages,
               spec.num_gpus if spec.parallelism is None else 0,  # a Cell's global batch (parallel._replicas)
               tuple((p.node, len(p.gpus)) for p in allocation.nodes if p.gpus))
        hit = self._plans.get(key)
        if hit is None:
            if self._clusters.get(id(cluster)) is None or self._clusters[id(cluster)].cluster is not cluster:
                self._index(cluster)  # keeps the cluster alive, so its id() stays unique while cached
            hit = self._plans[key] = plan_timing(self, spec, allocation, cluster)
        return hit

    def plan_memory(self, spec: JobSpec, allocation: Allocation, cluster: Cluster) -> tuple[MemoryFootprint, ...]:
        """Memory per GPU of each pipeline stage under the job's plan, on the stage's smallest GPU.

        State ``state_bytes_per_parameter x parameters / (stages x tensor)``; activations of the
        micro-batches a stage keeps in flight under 1F1B (``min(B, stages - i)`` for stage i,
        Narayanan et al. SC'21 §2.2), each ``parallelism.data x batch / data`` samples of the
        stage's layers divided over its tensor shards. For a uniform plan stage 0 needs what
        :meth:`memory_footprint` says.
        """
        return plan_memory(self, spec, allocation, cluster)

    def fitting_plan(self, spec: JobSpec, gpu_type: str, gpus: int) -> tuple[StagePlan, ...] | None:
        """A Cell plan of ``gpus`` GPUs of ``gpu_type`` that fits their memory, or None
        (:func:`~halyard.emulator.parallel.fitting_cell_plan`); cached like :meth:`memory_footprint`."""
        par = spec.parallelism
        key = (spec.model, spec.batch_size, par.data if par else spec.num_gpus, gpu_type, gpus)
        if key not in self._fitting:
            self._fitting[key] = fitting_cell_plan(self, spec, gpu_type, gpus)
        return self._fitting[key]

    def runs_on(self, spec: JobSpec, gpu_type: str, gpus: int) -> bool:
        """Whether ``gpus`` GPUs of ``gpu_type`` can run the job under some plan: its data-parallel
        worker fits (:meth:`fits_memory`), or a tensor/pipeline plan does (:meth:`fitting_plan`).
        Crius §8.1 runs every job with Alpa's adaptive parallelism, baselines included, so a model
        that does not fit one GPU is admissible wherever some plan fits (Fig. 3: OOM plans are not)."""
        return self.fits_memory(spec, gpu_type, gpus) or self.fitting_plan(spec, gpu_type, gpus) is not None

    def profile_stages(self, spec: JobSpec, allocation: Allocation, cluster: Cluster) -> tuple[StageProfile, ...]:
        """One profiling of the plan ``allocation.stages`` (Crius §5.1, Fig. 9), per stage: what an
        agent's ``ProfileResult`` carries (:func:`~halyard.emulator.parallel.profile_plan`)."""
        return profile_plan(self, spec, allocation, cluster)

    def assembled_iteration_s(self, spec: JobSpec, stages: Sequence[StageProfile]) -> float:
        """Iteration time of the plan assembled from profiled ``stages`` (Crius §5.1's assembly; equal
        to :meth:`job_timing` of that plan on the profiled GPUs)."""
        return assembled_iteration_s(self, spec, stages)

    def fits_plan(self, spec: JobSpec, allocation: Allocation, cluster: Cluster) -> bool:
        """Whether every GPU of ``allocation`` holds its stage's share of the job (:meth:`plan_memory`)."""
        return all(f.fits for f in self.plan_memory(spec, allocation, cluster))

    def iteration_time(self, spec: JobSpec, allocation: Allocation, cluster: Cluster) -> IterationTime:
        """Compute, all-reduce and exposed time of one iteration on ``allocation``.

        Data parallel here; a tensor, pipeline or hybrid plan is :meth:`job_timing`'s iteration.
        """
        if (spec.parallelism is not None or allocation.stages) and not is_data_parallel(spec, allocation):
            return self.job_timing(spec, allocation, cluster).iteration
        index = self._clusters.get(id(cluster))
        if index is None or index.cluster is not cluster:
            index = self._index(cluster)
        nodes = index.nodes
        gpu_type: str | None = None
        types: set[str] | None = None
        n = m = kmax = 0
        intra = inter = math.inf
        rack = -1
        multi_rack = False
        for na in allocation.nodes:
            k = len(na.gpus)
            if not k:
                continue
            try:
                t, _, fabric, nic, r = nodes[na.node]
            except KeyError:
                raise KeyError(f"allocation names node {na.node!r}, which is not in cluster "
                               f"{cluster.name!r}") from None
            if gpu_type is None:
                gpu_type = t
            elif t != gpu_type:
                types = (types or {gpu_type}) | {t}
            n += k
            m += 1
            if k > kmax:
                kmax = k
            if k > 1 and fabric < intra:
                intra = fabric
            if nic < inter:
                inter = nic
            if r != rack:
                multi_rack = multi_rack or rack >= 0
                rack = r
        if gpu_type is None:
            raise ValueError("allocation holds no GPUs")
        if multi_rack:
            inter = min(inter, index.cluster.inter_rack_gbyte_s({nodes[na.node][4] for na in allocation.nodes
                                                                 if na.gpus}))
            tier = Tier.SPINE
        else:
            tier = Tier.GPU if n == 1 else Tier.NODE if m == 1 else Tier.RACK
        shape: _Shape = (
            gpu_type if types is None else tuple(sorted(types)), n, m, kmax,
            intra if kmax > 1 else 0.0, inter if m > 1 else 0.0, tier,
        )
        if self._data_stalls:
            cpus = mem = math.inf
            for na in allocation.nodes:
                k = len(na.gpus)
                if not k:
                    continue
                if na.cpus == 0 and na.memory_mb == 0:  # the allocation does not say: proportional share
                    c, g = index.host[na.node]
                else:
                    c, g = na.cpus / k, na.memory_mb / 1000.0 / k
                cpus, mem = min(cpus, c), min(mem, g)
            timing = self._timing_stalled(spec.model, spec.batch_size, shape, cpus, mem)
        else:
            timing = self._timing(spec.model, spec.batch_size, shape)
        if allocation.logical_workers > n:
            timing = self._time_sliced(spec, allocation, nodes, timing)
        if spec.logical_workers:
            timing = self._deterministic(spec, timing, heterogeneous=types is not None)
        return timing

    @staticmethod
    def _deterministic(spec: JobSpec, timing: IterationTime, heterogeneous: bool) -> IterationTime:
        """An EasyScale job trains bit-for-bit reproducibly (D1; D1+D2 on mixed GPU types), which
        slows its compute by :func:`halyard.emulator.elastic.determinism_factor` (§5.1.3)."""
        compute = timing.compute_s * determinism_factor(spec.model, heterogeneous)
        return IterationTime(compute_s=compute, communication_s=timing.communication_s,
                             exposed_s=timing.exposed_s, total_s=compute + timing.exposed_s, tier=timing.tier)

    def _time_sliced(self, spec: JobSpec, allocation: Allocation, nodes: dict, timing: IterationTime) -> IterationTime:
        """One global step of a job whose GPUs time-slice several logical workers each
        (EasyScale §3.2): GPU g runs its ``A_g`` ESTs' local steps one after another, each
        the per-GPU batch's compute on its type (data stalls included: the one-worker compute
        scaled by the same factor), copying gradients behind the next EST
        (:func:`halyard.emulator.elastic.est_step_s`); the all-reduce, once per step, overlaps
        the last EST's backward as it would a single worker's, so it shows as before."""
        ideal = {t: self.ideal_iteration_time(spec, t) for t in {nodes[p.node][0] for p in allocation.nodes if p.gpus}}
        stall = timing.compute_s / max(ideal.values())
        compute = [ideal[nodes[p.node][0]] * stall for p in allocation.nodes for _ in p.workers]
        ests = [a for p in allocation.nodes for a in p.workers]
        copy = (self.profile(spec.model).gradient_bytes / (self._catalog.constants.gradient_copy_gbyte_s * GBYTE)
                if self._communication else 0.0)
        local = est_step_s(compute, ests, [copy] * len(ests))
        return IterationTime(compute_s=local, communication_s=timing.communication_s, exposed_s=timing.exposed_s,
                             total_s=local + timing.exposed_s, tier=timing.tier)

    def ideal_iteration_time(self, spec: JobSpec, gpu_type: str) -> float:
        """Compute-only seconds per iteration (Dally's "ideal" has no communication)."""
        return self._compute_s(self.profile(spec.model), gpu_type, spec.batch_size)

    def consolidated_iteration_time(
        self, spec: JobSpec, cluster: Cluster, gpu_type: str | None = None
    ) -> float:
        """Iteration time on the tightest placement of ``spec.num_gpus`` GPUs of one type.

        Whole nodes of the type are filled, largest first, inside one rack when
        one rack has enough; a job larger than the cluster's GPUs of that type
        is costed as if the cluster had more copies of its largest node.
        """
        index = self._clusters.get(id(cluster))
        if index is None or index.cluster is not cluster:
            index = self._index(cluster)
        gtype = gpu_type or spec.gpu_type or index.reference_gpu
        # The index keeps the cluster alive, so its id() is not reused while cached.
        key = (id(cluster), gtype, spec.num_gpus)
        shape = self._tightest.get(key)
        if shape is None:
            shape = self._tightest[key] = self._tightest_shape(index, gtype, spec.num_gpus)
        if spec.parallelism is not None and not is_data_parallel(spec, None):
            nodes = self._tightest_nodes(index, gtype, spec.num_gpus)
            if nodes is not None:  # else (larger than the cluster) costed as data parallel, below
                allocation = Allocation(tuple(NodeAllocation(name, tuple(range(k)), 0, 0) for name, k in nodes))
                return self.job_timing(spec, allocation, cluster).iteration.total_s
        if self._data_stalls:
            best = index.best_host.get(gtype)
            if best is None:  # once per GPU type: this was a scan of every node per call
                best = index.best_host[gtype] = max(
                    (h for name, h in index.host.items() if index.nodes[name][0] == gtype), key=lambda h: (h[0], h[1]))
            cpus, mem = best
            return self._timing_stalled(spec.model, spec.batch_size, shape, cpus, mem).total_s
        return self._timing(spec.model, spec.batch_size, shape).total_s

    def iterations_for(self, spec: JobSpec, cluster: Cluster) -> int:
        """``spec.iterations``, or the iterations whose consolidated run time is ``duration_s``."""
        if spec.iterations > 0:
            return spec.iterations
        if spec.duration_s is None:
            raise ValueError(f"job {spec.job_id}: neither iterations nor duration_s is set")
        return max(1, round(spec.duration_s / self.consolidated_iteration_time(spec, cluster)))

    # ----------------------------------------------------------------- elastic and pipeline costs
    def checkpoint_bytes(self, model: str) -> float:
        """Weights and optimizer state: ``gradient_bytes x checkpoint_state_factor``."""
        return self.profile(model).gradient_bytes * self._catalog.constants.checkpoint_state_factor

    def checkpoint_s(self, spec: JobSpec) -> float:
        """Writing an on-demand checkpoint at ``checkpoint_gbyte_s`` (the read bandwidth; estimate)."""
        return self.checkpoint_bytes(spec.model) / (self._catalog.constants.checkpoint_gbyte_s * GBYTE)

    def restore_s(self, spec: JobSpec) -> float:
        """Reading the checkpoint back: ``checkpoint_bytes / checkpoint_gbyte_s``."""
        return self.checkpoint_bytes(spec.model) / (self._catalog.constants.checkpoint_gbyte_s * GBYTE)

    def reconfigure_cost_s(self, spec: JobSpec) -> float:
        """A migration or resize: checkpoint on demand, then restart (EasyScale §3.2); ``resize_cost_s``
        instead when the model was built with it."""
        if self._resize_cost_s is not None:
            return self._resize_cost_s
        return self.checkpoint_s(spec) + self.restart_cost_s(spec)

    def est_step_s(self, spec: JobSpec, placement: Sequence[tuple[str, int]],
                   allreduce_exposed_s: float = 0.0) -> float:
        """EasyScale: one global step of ESTs time-sliced on ``placement`` = [(GPU type, ESTs), ...].

        Each EST computes the job's per-GPU batch (``ideal_iteration_time`` on its GPU
        type); gradient copies run at ``gradient_copy_gbyte_s`` behind the next EST
        (:func:`halyard.emulator.elastic.est_step_s`).
        """
        copy = self.profile(spec.model).gradient_bytes / (self._catalog.constants.gradient_copy_gbyte_s * GBYTE)
        return est_step_s([self.ideal_iteration_time(spec, g) for g, _ in placement], [a for _, a in placement],
                          [copy] * len(placement), allreduce_exposed_s)

    def est_capability(self, spec: JobSpec, gpu_type: str) -> float:
        """EasyScale's ``C_i``: mini-batches per second of one EST on ``gpu_type``."""
        return 1.0 / self.ideal_iteration_time(spec, gpu_type)

    def restart_cost_s(self, spec: JobSpec) -> float:
        """Seconds a preempted job loses on restart: fixed relaunch + checkpoint read.

        ``restart_fixed_s + gradient_bytes x checkpoint_state_factor / checkpoint_gbyte_s``.
        """
        c = self._catalog.constants
        state_bytes = self.profile(spec.model).gradient_bytes * c.checkpoint_state_factor
        return c.restart_fixed_s + state_bytes / (c.checkpoint_gbyte_s * GBYTE)

    # ----------------------------------------------------------------- internals
    def _timing(self, model: str, batch: int, shape: _Shape) -> IterationTime:
        key = (model, batch, shape)
        hit = self._timings.get(key)
        if hit is not None:
            return hit
        profile = self.profile(model)
        gpu_key, n, m, kmax, intra, inter, tier = shape
        if isinstance(gpu_key, str):
            compute = self._compute_s(profile, gpu_key, batch)
        else:  # mixed GPU types: data parallelism waits for the slowest
            compute = max(self._compute_s(profile, g, batch) for g in gpu_key)
        overhead = self._catalog.tier_overhead.get(model)
        if overhead is not None:  # Dally §4.2.1: the tier's exposed-communication % applied to compute
            exposed = 0.0 if tier is Tier.GPU else compute * overhead[tier - Tier.NODE]
            timing = IterationTime(compute_s=compute, communication_s=exposed, exposed_s=exposed,
                                   total_s=compute + exposed, tier=tier)
            self._timings[key] = timing
            return timing
        size = profile.reduced_gradient_bytes(n)
        buckets = buckets_for(size, self._catalog.constants.ddp_bucket_bytes)
        if not self._communication:
            timing = IterationTime(compute_s=compute, communication_s=0.0, exposed_s=0.0, total_s=compute, tier=tier)
            self._timings[key] = timing
            return timing
        if tier is Tier.GPU:
            comm = 0.0
        elif tier is Tier.NODE:
            comm = allreduce_s("ring", size, n, intra, self._latency[Tier.NODE], messages=buckets)
        else:
            comm = hierarchical_allreduce_s(size, kmax, m, intra, inter,
                                            self._latency[Tier.NODE], self._latency[tier],
                                            messages=buckets, inter_algorithm=self._allreduce)
        window = compute if self._overlap == "layerwise" else profile.backward_fraction * compute
        exposed = exposed_s(comm, window, buckets)
        # A GShard MoE model's all-to-alls sit between its layers' computations: never hidden.
        expert = data_parallel_expert_s(self, model, batch, n, kmax, intra, inter, self._latency[tier])
        timing = IterationTime(compute_s=compute, communication_s=comm + expert, exposed_s=exposed + expert,
                               total_s=compute + exposed + expert, tier=tier)
        self._timings[key] = timing
        return timing

    def optimizer_step_s(self, model: str, gpu_type: str) -> float:
        """The batch-independent part of an iteration: one memory-bound optimizer step.

        ``optimizer_step_bytes_per_parameter x parameters / memory bandwidth``; 0 for
        a GPU type outside the ``[gpus]`` table.
        """
        p = self.profile(model)
        spec = self._catalog.gpus.get(gpu_type)
        if spec is None:
            return 0.0
        c = self._catalog.constants
        return c.optimizer_step_bytes_per_parameter * p.parameters / (spec.memory_gbyte_s * GBYTE)

    def _timing_stalled(self, model: str, batch: int, shape: _Shape, cpus: float, mem: float) -> IterationTime:
        key = (model, batch, shape, cpus, mem)
        hit = self._stalled.get(key)
        if hit is not None:
            return hit
        base = self._timing(model, batch, shape)
        curve = self.host_curve(model)
        timing = base
        if curve is not None:
            p = self.profile(model)
            scale = (batch or p.reference_batch) / p.reference_batch
            host = scale * max(curve.cpu_s(cpus), curve.fetch_s(mem))
            if host > base.compute_s:  # the GPU waits for input; the all-reduce may hide in the wait
                total = max(host, base.total_s)
                timing = IterationTime(compute_s=host, communication_s=base.communication_s,
                                       exposed_s=total - host, total_s=total, tier=base.tier)
        self._stalled[key] = timing
        return timing

    def _compute_s(self, profile: ModelProfile, gpu_type: str, batch: int) -> float:
        t = profile.compute_time_s(gpu_type)
        if t is None:
            raise UnsupportedGPUError(
                f"model {profile.name!r} has no compute profile for GPU type {gpu_type!r} "
                f"(profiled: {', '.join(profile.gpu_types)})")
        if batch == 0 or batch == profile.reference_batch:
            return t
        # Linear beyond a fixed overhead: the optimizer step does not grow with the batch.
        fixed = min(t, self.optimizer_step_s(profile.name, gpu_type))
        return fixed + (t - fixed) * batch / profile.reference_batch

    def _index(self, cluster: Cluster) -> _ClusterIndex:
        nodes = {nd.name: (nd.gpu_type, nd.gpus, nd.fabric_gbyte_s, nd.nic_gbyte_s, nd.rack_index)
                 for nd in cluster.nodes}
        host = {nd.name: (nd.cpus / nd.gpus, nd.memory_mb / 1000.0 / nd.gpus) for nd in cluster.nodes if nd.gpus}
        index = _ClusterIndex(cluster=cluster, nodes=nodes,
                              reference_gpu=cluster.gpu_types[0], host=host)
        if id(cluster) in self._clusters:  # defensive: drop shapes of an object that had this id
            self._tightest = {k: v for k, v in self._tightest.items() if k[0] != id(cluster)}
        self._clusters[id(cluster)] = index
        return index

    def _tightest_nodes(self, index: _ClusterIndex, gpu_type: str, n: int) -> list[tuple[str, int]] | None:
        """The tightest placement as (node, GPUs) of one type: one node if it fits, else whole
        nodes, largest first, in the rack that needs the fewest, else across racks (most GPUs
        first); None if the cluster has fewer than ``n`` GPUs of the type."""
        of_type = sorted(((name, info) for name, info in index.nodes.items() if info[0] == gpu_type),
                         key=lambda ni: (-ni[1][1], -ni[1][2], -ni[1][3], ni[0]))
        if not of_type or sum(info[1] for _, info in of_type) < n:
            return None
        if n <= of_type[0][1][1]:
            return [(of_type[0][0], n)]
        by_rack: dict[int, list[tuple[str, _NodeInfo]]] = {}
        for name, info in of_type:
            by_rack.setdefault(info[4], []).append((name, info))
        candidates = [nodes for nodes in by_rack.values() if sum(i[1] for _, i in nodes) >= n]
        if candidates:
            pool = min(candidates, key=lambda nodes: (len(_fill([i for _, i in nodes], n)), nodes[0][0]))
        else:
            pool = [ni for nodes in sorted(by_rack.values(), key=lambda ns: -sum(i[1] for _, i in ns))
                    for ni in nodes]
        out: list[tuple[str, int]] = []
        for name, info in pool:
            if n <= 0:
                break
            out.append((name, min(n, info[1])))
            n -= info[1]
        return out

    def _tightest_shape(self, index: _ClusterIndex, gpu_type: str, n: int) -> _Shape:
        of_type = [info for info in index.nodes.values() if info[0] == gpu_type]
        if not of_type:
            raise UnsupportedGPUError(f"cluster {index.cluster.name!r} has no {gpu_type} GPUs "
                                      f"(it has: {', '.join(index.cluster.gpu_types)})")
        of_type.sort(key=lambda i: (-i[1], -i[2], -i[3]))
        best = of_type[0]
        if n == 1:
            return (gpu_type, 1, 1, 1, 0.0, 0.0, Tier.GPU)
        if n <= best[1]:
            return (gpu_type, n, 1, n, best[2], 0.0, Tier.NODE)
        by_rack: dict[int, list[_NodeInfo]] = {}
        for info in of_type:  # already largest first
            by_rack.setdefault(info[4], []).append(info)
        fits = [nodes for nodes in by_rack.values() if sum(i[1] for i in nodes) >= n]
        if fits:
            used = min((_fill(nodes, n) for nodes in fits), key=lambda u: (len(u), -min(i[3] for i in u)))
            return (gpu_type, n, len(used), used[0][1], min(i[2] for i in used),
                    min(i[3] for i in used), Tier.RACK)
        ordered = sorted(by_rack.values(), key=lambda nodes: -sum(i[1] for i in nodes))
        used = _fill([i for nodes in ordered for i in nodes], n)
        have = sum(i[1] for i in used)
        m = len(used) + (math.ceil((n - have) / best[1]) if have < n else 0)
        rack_ids = {i[4] for i in used} if have >= n else set(range(len(index.cluster.racks)))
        inter = min(min(i[3] for i in used), index.cluster.inter_rack_gbyte_s(rack_ids))
        return (gpu_type, n, m, best[1], min(i[2] for i in used), inter, Tier.SPINE)


def _fill(nodes: list[_NodeInfo], n: int) -> list[_NodeInfo]:
    """The first nodes of ``nodes`` (largest first) that together hold ``n`` GPUs."""
    used: list[_NodeInfo] = []
    have = 0
    for info in nodes:
        if have >= n:
            break
        used.append(info)
        have += info[1]
    return used
