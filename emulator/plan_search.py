"""Plan search: whether some parallelism plan runs a job on GPUs of one type, and which.

Crius §8.1 runs every job with Alpa's adaptive parallelism, baselines included, so a model that does
not fit one GPU is admissible wherever some tensor/pipeline plan fits (Fig. 3: out-of-memory plans are
not). A part of :class:`~halyard.emulator.PerformanceModel`.
"""

from __future__ import annotations

from halyard.datamodel import JobSpec, StagePlan
from halyard.emulator.compute import ComputeTime
from halyard.emulator.memory import MemoryModel
from halyard.emulator.parallel import fitting_cell_plan


class PlanSearch:
    """The first plan that fits, cached per (model, batch, replicas, GPU type, GPUs)."""

    def __init__(self, compute: ComputeTime, memory: MemoryModel) -> None:
        self._compute = compute
        self._memory = memory
        self._fitting: dict[tuple[str, int, int, str, int], tuple[StagePlan, ...] | None] = {}

    def fitting_plan(self, spec: JobSpec, gpu_type: str, gpus: int) -> tuple[StagePlan, ...] | None:
        """A Cell plan of ``gpus`` GPUs of ``gpu_type`` that fits their memory, or None
        (:func:`~halyard.emulator.parallel.fitting_cell_plan`); cached like
        :meth:`~halyard.emulator.memory.MemoryModel.memory_footprint`."""
        par = spec.parallelism
        key = (spec.model, spec.batch_size, par.data if par else spec.num_gpus, gpu_type, gpus)
        if key not in self._fitting:
            self._fitting[key] = fitting_cell_plan(self._compute, spec, gpu_type, gpus)
        return self._fitting[key]

    def runs_on(self, spec: JobSpec, gpu_type: str, gpus: int) -> bool:
        """Whether ``gpus`` GPUs of ``gpu_type`` can run the job under some plan: its data-parallel
        worker fits (:meth:`~halyard.emulator.memory.MemoryModel.fits_memory`), or a tensor/pipeline
        plan does (:meth:`fitting_plan`)."""
        return self._memory.fits_memory(spec, gpu_type, gpus) or self.fitting_plan(spec, gpu_type, gpus) is not None
