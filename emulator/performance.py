"""How long one training iteration takes for a model, a placement and a cluster.

:class:`PerformanceModel` is the one performance model the simulator and the emulated agents share
(formulas and sources: docs/performance-model.md). It is a facade over four parts, each in its own
module and each usable alone:

- :class:`~halyard.emulator.compute.ComputeTime`: the catalog, one GPU's compute and data stalls;
- :class:`~halyard.emulator.memory.MemoryModel`: a worker's and a plan's GPU memory;
- :class:`~halyard.emulator.plan_search.PlanSearch`: which parallelism plan fits;
- :class:`~halyard.emulator.iteration_time.IterationTimeModel`: iteration time and link demands on an
  allocation (:mod:`halyard.emulator.tightest` for the consolidated placement);
- :class:`~halyard.emulator.costs.ReconfigurationCosts`: checkpoints, restarts and elastic steps.

Policies see it as :class:`halyard.policies.PerformanceEstimator`, the protocol of what they may call.
Link contention (:mod:`halyard.emulator.contention`), data stalls (:mod:`halyard.emulator.datastall`) and
elastic/pipeline costs (:mod:`halyard.emulator.elastic`) are pure functions next to these parts. Every
part caches per instance (there is no module-level mutable state).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from halyard.datamodel import Allocation, Cluster, JobSpec, StagePlan, StageProfile, Tier
from halyard.emulator.catalog import Catalog, GpuSpec, ModelProfile, load_catalog
from halyard.emulator.collectives import ALGORITHMS
from halyard.emulator.compute import ComputeTime, UnsupportedGPUError
from halyard.emulator.costs import ReconfigurationCosts
from halyard.emulator.datastall import HostCurve
from halyard.emulator.iteration_time import IterationTime, IterationTimeModel
from halyard.emulator.memory import MemoryFootprint, MemoryModel
from halyard.emulator.parallel import JobTiming
from halyard.emulator.plan_search import PlanSearch

__all__ = ["CONTENTION_MODES", "OVERLAP_MODES", "IterationTime", "MemoryFootprint", "PerformanceModel",
           "UnsupportedGPUError"]

OVERLAP_MODES = ("ddp", "layerwise")
# How jobs sharing a link split it (halyard.emulator.fabric): not at all (every job at its
# dedicated speed), fair max-min sharing (TCP-like; DESIGN.md's default) or MLTCP's unfair sharing.
CONTENTION_MODES = ("off", "fair", "mltcp")


class PerformanceModel:
    """The one performance model the simulator and the emulated agents share: its parts composed, and
    each of their answers under the name callers have always used."""

    def __init__(self, catalog: Catalog | None = None, *, allreduce: str = "ring",
                 overlap: str = "ddp", data_stalls: bool = False, contention: str = "fair",
                 communication: bool = True, start_cost_s: float = 0.0, resize_cost_s: float | None = None,
                 measured_up_demand: Mapping[str, float] | None = None) -> None:
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
        worth (docs/reproductions/easyscale-public-comparison.md); each off by default:
        ``communication=False`` makes every all-reduce, expert all-to-all and EST gradient copy
        free (the artifact's step is ``batch x maxP / compute time``); ``start_cost_s`` is charged
        once, at a job's first start (the artifact's 20 s ``rescale_time``, never reset);
        ``resize_cost_s``, when set, replaces the checkpoint-and-restart cost of a resize (the
        artifact charges nothing after the first start: 0).

        ``measured_up_demand`` (model -> GB/s; off by default): every Up phase of that model's jobs on
        every link they cross carries this demand instead of the modelled one, the phases' timing and
        the iteration time kept. It runs a workload with a traffic level measured elsewhere beside the
        model's own, to measure what the difference is worth (benchmarks/cassini_dynamic.py's
        ``--mix model-parallel-thesis-traffic``: the Cassini thesis' Fig. 4.1(c) GPT traffic)."""
        if start_cost_s < 0 or (resize_cost_s is not None and resize_cost_s < 0):
            raise ValueError(f"start_cost_s and resize_cost_s must be >= 0, got {start_cost_s}, {resize_cost_s}")
        if allreduce not in ALGORITHMS:
            raise ValueError(f"allreduce must be one of {', '.join(ALGORITHMS)}, got {allreduce!r}")
        if overlap not in OVERLAP_MODES:
            raise ValueError(f"overlap must be one of {', '.join(OVERLAP_MODES)}, got {overlap!r}")
        if contention not in CONTENTION_MODES:
            raise ValueError(f"contention must be one of {', '.join(CONTENTION_MODES)}, got {contention!r}")
        measured = dict(measured_up_demand or {})
        if any(not d > 0 for d in measured.values()):
            raise ValueError(f"measured_up_demand must map models to GB/s > 0, got {measured}")
        self._contention = contention
        self._data_stalls = data_stalls
        self.compute = ComputeTime(catalog if catalog is not None else load_catalog())
        self.memory = MemoryModel(self.compute)
        self.plans = PlanSearch(self.compute, self.memory)
        self.timing = IterationTimeModel(self.compute, allreduce=allreduce, overlap=overlap,
                                         data_stalls=data_stalls, communication=communication,
                                         measured_up_demand=measured)
        self.costs = ReconfigurationCosts(self.compute, start_cost_s=start_cost_s, resize_cost_s=resize_cost_s)

    # ----------------------------------------------------------------- options
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
        return self.timing.overlap

    @property
    def start_cost_s(self) -> float:
        """Seconds charged once, at a job's first start (0 unless built with it)."""
        return self.costs.start_cost_s

    # ----------------------------------------------------------------- catalog and compute (ComputeTime)
    @property
    def catalog(self) -> Catalog:
        return self.compute.catalog

    def models(self) -> tuple[str, ...]:
        return self.compute.models()

    def has_model(self, name: str) -> bool:
        return self.compute.has_model(name)

    def profile(self, name: str) -> ModelProfile:
        return self.compute.profile(name)

    def layers(self, model: str) -> int:
        return self.compute.layers(model)

    def reference_batch(self, model: str) -> int:
        return self.compute.reference_batch(model)

    def models_by_task(self) -> dict[str, tuple[str, ...]]:
        return self.compute.models_by_task()

    def supports_gpu(self, model: str, gpu_type: str) -> bool:
        return self.compute.supports_gpu(model, gpu_type)

    def gpu_types(self) -> tuple[str, ...]:
        return self.compute.gpu_types()

    def gpu(self, gpu_type: str) -> GpuSpec:
        return self.compute.gpu(gpu_type)

    def gpu_memory_bytes(self, gpu_type: str) -> float:
        return self.compute.gpu_memory_bytes(gpu_type)

    def throughput_matrix(self, batch: int = 0) -> dict[str, dict[str, float]]:
        return self.compute.throughput_matrix(batch)

    def optimizer_step_s(self, model: str, gpu_type: str) -> float:
        return self.compute.optimizer_step_s(model, gpu_type)

    def ideal_iteration_time(self, spec: JobSpec, gpu_type: str) -> float:
        return self.compute.ideal_iteration_time(spec, gpu_type)

    def host_curve(self, model: str) -> HostCurve | None:
        return self.compute.host_curve(model)

    def cache_hit_rate(self, model: str, memory_gb_per_gpu: float) -> float:
        return self.compute.cache_hit_rate(model, memory_gb_per_gpu)

    def cache_fetch_s(self, model: str, memory_gb_per_gpu: float, batch: int = 0) -> float:
        return self.compute.cache_fetch_s(model, memory_gb_per_gpu, batch)

    def stalled_compute_s(self, model: str, gpu_type: str, cpus_per_gpu: float, memory_gb_per_gpu: float,
                          batch: int = 0) -> float:
        return self.compute.stalled_compute_s(model, gpu_type, cpus_per_gpu, memory_gb_per_gpu, batch)

    def throughput_factor(self, model: str, cpus_per_gpu: float, memory_gb_per_gpu: float,
                          gpu_type: str = "V100", batch: int = 0) -> float:
        return self.compute.throughput_factor(model, cpus_per_gpu, memory_gb_per_gpu, gpu_type, batch)

    # ----------------------------------------------------------------- memory (MemoryModel)
    def memory_footprint(self, spec: JobSpec, gpu_type: str, gpus: int = 0) -> MemoryFootprint:
        return self.memory.memory_footprint(spec, gpu_type, gpus)

    def fits_memory(self, spec: JobSpec, gpu_type: str, gpus: int = 0) -> bool:
        return self.memory.fits_memory(spec, gpu_type, gpus)

    def plan_memory(self, spec: JobSpec, allocation: Allocation, cluster: Cluster) -> tuple[MemoryFootprint, ...]:
        return self.memory.plan_memory(spec, allocation, cluster)

    def fits_plan(self, spec: JobSpec, allocation: Allocation, cluster: Cluster) -> bool:
        return self.memory.fits_plan(spec, allocation, cluster)

    # ----------------------------------------------------------------- plan search (PlanSearch)
    def fitting_plan(self, spec: JobSpec, gpu_type: str, gpus: int) -> tuple[StagePlan, ...] | None:
        return self.plans.fitting_plan(spec, gpu_type, gpus)

    def runs_on(self, spec: JobSpec, gpu_type: str, gpus: int) -> bool:
        return self.plans.runs_on(spec, gpu_type, gpus)

    # ----------------------------------------------------------------- iteration time (IterationTimeModel)
    def tier_latency_s(self, tier: Tier) -> float:
        return self.timing.tier_latency_s(tier)

    def job_timing(self, spec: JobSpec, allocation: Allocation, cluster: Cluster) -> JobTiming:
        return self.timing.job_timing(spec, allocation, cluster)

    def iteration_time(self, spec: JobSpec, allocation: Allocation, cluster: Cluster) -> IterationTime:
        return self.timing.iteration_time(spec, allocation, cluster)

    def consolidated_iteration_time(self, spec: JobSpec, cluster: Cluster, gpu_type: str | None = None) -> float:
        return self.timing.consolidated_iteration_time(spec, cluster, gpu_type)

    def iterations_for(self, spec: JobSpec, cluster: Cluster) -> int:
        return self.timing.iterations_for(spec, cluster)

    def profile_stages(self, spec: JobSpec, allocation: Allocation, cluster: Cluster) -> tuple[StageProfile, ...]:
        return self.timing.profile_stages(spec, allocation, cluster)

    def assembled_iteration_s(self, spec: JobSpec, stages: Sequence[StageProfile]) -> float:
        return self.timing.assembled_iteration_s(spec, stages)

    # ----------------------------------------------------------------- costs (ReconfigurationCosts)
    def checkpoint_bytes(self, model: str) -> float:
        return self.costs.checkpoint_bytes(model)

    def checkpoint_s(self, spec: JobSpec) -> float:
        return self.costs.checkpoint_s(spec)

    def restore_s(self, spec: JobSpec) -> float:
        return self.costs.restore_s(spec)

    def restart_cost_s(self, spec: JobSpec) -> float:
        return self.costs.restart_cost_s(spec)

    def reconfigure_cost_s(self, spec: JobSpec) -> float:
        return self.costs.reconfigure_cost_s(spec)

    def est_step_s(self, spec: JobSpec, placement: Sequence[tuple[str, int]],
                   allreduce_exposed_s: float = 0.0) -> float:
        return self.costs.est_step_s(spec, placement, allreduce_exposed_s)

    def est_capability(self, spec: JobSpec, gpu_type: str) -> float:
        return self.costs.est_capability(spec, gpu_type)
