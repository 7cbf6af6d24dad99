"""GPU memory: what one worker of a job needs (weights, gradients, optimizer state, activations,
reserve) against a GPU type's capacity, for a data-parallel worker and per stage of a plan.

A part of :class:`~halyard.emulator.PerformanceModel` (docs/performance-model.md, "Memory").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from halyard.datamodel import Allocation, Cluster, JobSpec
from halyard.emulator.compute import ComputeTime
from halyard.emulator.parallel import accumulation_steps, plan_memory


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
    (:meth:`MemoryModel.memory_footprint`). ``batch`` is the per-GPU batch
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


class MemoryModel:
    """Footprints of a worker and of a plan's stages (cached per model, batch, plan and GPU type)."""

    def __init__(self, compute: ComputeTime) -> None:
        self._compute = compute
        self._footprints: dict[tuple[str, int, int, int, str, int], MemoryFootprint] = {}

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
        p = self._compute.profile(spec.model)
        data = max((gpus or spec.num_gpus) // (tensor * pipeline), 1)
        key = (spec.model, spec.batch_size, tensor, pipeline, gpu_type, min(data, p.experts) if p.experts else 1)
        hit = self._footprints.get(key)
        if hit is None:
            hit = self._footprints[key] = self._footprint(*key)
        return hit

    def _footprint(self, model: str, batch_size: int, tensor: int, pipeline: int, gpu_type: str,
                   data: int) -> MemoryFootprint:
        p = self._compute.profile(model)
        c = self._compute.catalog.constants
        capacity = self._compute.gpu_memory_bytes(gpu_type)
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

    def plan_memory(self, spec: JobSpec, allocation: Allocation, cluster: Cluster) -> tuple[MemoryFootprint, ...]:
        """Memory per GPU of each pipeline stage under the job's plan, on the stage's smallest GPU.

        State ``state_bytes_per_parameter x parameters / (stages x tensor)``; activations of the
        micro-batches a stage keeps in flight under 1F1B (``min(B, stages - i)`` for stage i,
        Narayanan et al. SC'21 §2.2), each ``parallelism.data x batch / data`` samples of the
        stage's layers divided over its tensor shards. For a uniform plan stage 0 needs what
        :meth:`memory_footprint` says.
        """
        return plan_memory(self._compute, spec, allocation, cluster)

    def fits_plan(self, spec: JobSpec, allocation: Allocation, cluster: Cluster) -> bool:
        """Whether every GPU of ``allocation`` holds its stage's share of the job (:meth:`plan_memory`)."""
        return all(f.fits for f in self.plan_memory(spec, allocation, cluster))
