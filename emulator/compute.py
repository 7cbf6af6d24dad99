"""What one GPU computes: the catalog's models and GPU types, and a model's seconds per iteration on one
GPU, bounded by its host's CPUs and memory when data stalls are modelled.

The first part of :class:`~halyard.emulator.PerformanceModel` (docs/performance-model.md): every other
part (memory, plan search, iteration time, costs) reads the catalog through it.
"""

from __future__ import annotations

from halyard.datamodel import HalyardError, JobSpec
from halyard.emulator.catalog import Catalog, GpuSpec, ModelProfile
from halyard.emulator.collectives import GBYTE
from halyard.emulator.datastall import HostCurve, host_curve, stalled_iteration_s


class UnsupportedGPUError(HalyardError, ValueError):
    """The catalog has no compute profile for this model on this GPU type."""


class ComputeTime:
    """The catalog's lookups and the compute-only time of one GPU (cached host curves per model)."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._models = catalog.models
        self._curves: dict[str, HostCurve | None] = {}

    # ----------------------------------------------------------------- catalog
    def models(self) -> tuple[str, ...]:
        return tuple(self._models)

    def has_model(self, name: str) -> bool:
        return name in self._models

    def profile(self, name: str) -> ModelProfile:
        try:
            return self._models[name]
        except KeyError:
            raise KeyError(f"unknown model {name!r}; the catalog ({self.catalog.source}) has: "
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
        return tuple(self.catalog.gpus)

    def gpu(self, gpu_type: str) -> GpuSpec:
        try:
            return self.catalog.gpus[gpu_type]
        except KeyError:
            raise UnsupportedGPUError(f"GPU type {gpu_type!r} is not in the catalog's [gpus] table "
                                      f"(known: {', '.join(self.catalog.gpus)})") from None

    def gpu_memory_bytes(self, gpu_type: str) -> float:
        """Memory capacity of one GPU of this type."""
        return self.gpu(gpu_type).memory_bytes

    # ----------------------------------------------------------------- compute
    def compute_s(self, profile: ModelProfile, gpu_type: str, batch: int) -> float:
        """The catalog's per-GPU time of ``profile`` on ``gpu_type`` at per-GPU ``batch`` (0: the reference
        batch): linear in the batch above the batch-independent optimizer step."""
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

    def optimizer_step_s(self, model: str, gpu_type: str) -> float:
        """The batch-independent part of an iteration: one memory-bound optimizer step.

        ``optimizer_step_bytes_per_parameter x parameters / memory bandwidth``; 0 for
        a GPU type outside the ``[gpus]`` table.
        """
        p = self.profile(model)
        spec = self.catalog.gpus.get(gpu_type)
        if spec is None:
            return 0.0
        c = self.catalog.constants
        return c.optimizer_step_bytes_per_parameter * p.parameters / (spec.memory_gbyte_s * GBYTE)

    def ideal_iteration_time(self, spec: JobSpec, gpu_type: str) -> float:
        """Compute-only seconds per iteration (Dally's "ideal" has no communication)."""
        return self.compute_s(self.profile(spec.model), gpu_type, spec.batch_size)

    def throughput_matrix(self, batch: int = 0) -> dict[str, dict[str, float]]:
        """Seconds per iteration, model -> GPU type -> time on one GPU (compute only).

        ``batch`` is the per-GPU batch (0: each model's reference batch).
        Which figures are estimates: ``profile(model).estimated("compute_s.<GPU>")``.
        """
        return {name: {g: self.compute_s(p, g, batch) for g in p.compute_s}
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
                self._curves[model] = host_curve(p.data, v100, self.catalog.constants.proportional_cpus_per_gpu)
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
        return stalled_iteration_s(self.compute_s(p, gpu_type, batch), self.host_curve(model),
                                   cpus_per_gpu, memory_gb_per_gpu, scale)

    def throughput_factor(self, model: str, cpus_per_gpu: float, memory_gb_per_gpu: float,
                          gpu_type: str = "V100", batch: int = 0) -> float:
        """Throughput with these CPUs and memory per GPU over the GPU-proportional share's.

        1.0 at Synergy's proportional share (3 CPUs, 62.5 GB per GPU) on every GPU
        type; above 1 with more, below with less; 1.0 everywhere for a model that is
        not input-bound (language models).
        """
        c = self.catalog.constants
        base = self.stalled_compute_s(model, gpu_type, c.proportional_cpus_per_gpu,
                                      c.proportional_memory_gb_per_gpu, batch)
        return base / self.stalled_compute_s(model, gpu_type, cpus_per_gpu, memory_gb_per_gpu, batch)
