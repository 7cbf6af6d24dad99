"""Data stalls: how CPU cores and memory per GPU bound a job's iteration time.

Synergy §2.1 and §3.1 (papers/synergy-multi-resource-scheduling.txt): a mini-batch
is fetched from storage (unless cached in memory), pre-processed on CPU cores and
only then computed on the GPU; the three stages overlap, so an iteration takes
the longest of them:

    T(c, m) = max(T_gpu, T_cpu(c), T_fetch(m))

- ``T_gpu``: the catalog's compute time on the GPU type (no stalls);
- ``T_cpu(c) = a + b / c``: pre-processing on c cores, an Amdahl curve through
  Synergy's two sourced points per model -- the GPU-proportional share
  (3 cores: the measured iteration time ``T_prop = s* x T_gpu(V100)``) and the best
  demand (``c*`` cores reach the GPU-bound time, speed-up ``s*``); a model with
  ``s* = 1`` is pure parallel work ``3 T_prop / c``;
- ``T_fetch(m) = (1 - h(m)) x T_miss``: the cache model that optimistic profiling
  relies on (§3.1, MinIO): the cache gives a fixed hit rate per epoch,
  ``h(m) = min(1, m / m*)`` -- every item is read once per epoch and a fraction
  ``m / m*`` of the working set stays cached, where ``m*`` is Synergy's best
  memory (more memory gains nothing, so the working set is cached) -- and a miss
  costs a storage read at the job's proportional share of the server's storage
  bandwidth. ``T_miss = T_prop`` (estimate: it reproduces the caps of Synergy's
  matrices at the proportional memory for the two memory-sensitive models,
  alexnet 125 GB -> 2.0x and m5 187.5 GB -> 1.5x at 62.5 GB).

Host times do not depend on the GPU type, so a faster GPU stalls more on the
same cores. Language models carry no Synergy profile and never stall.
:meth:`~halyard.emulator.PerformanceModel.throughput_factor` normalises
``T(3, 62.5) / T(c, m)`` to 1.0 at the GPU-proportional share.
"""

from __future__ import annotations

from dataclasses import dataclass

from halyard.emulator.catalog import DataProfile


@dataclass(frozen=True, slots=True)
class HostCurve:
    """A model's host-side times at its reference batch, in seconds per iteration."""

    cpu_serial_s: float  # a
    cpu_parallel_s: float  # b (CPU-seconds spread over the cores)
    miss_s: float  # T_miss: fetching a whole batch from storage
    cache_gb: float  # m*: memory per GPU at which the hit rate is 1

    def cpu_s(self, cpus: float) -> float:
        return max(0.0, self.cpu_serial_s + self.cpu_parallel_s / max(cpus, 1e-9))

    def hit_rate(self, memory_gb: float) -> float:
        """Fixed per-epoch cache hit rate for ``memory_gb`` of memory per GPU."""
        return min(1.0, max(0.0, memory_gb) / self.cache_gb)

    def fetch_s(self, memory_gb: float) -> float:
        return (1.0 - self.hit_rate(memory_gb)) * self.miss_s


def host_curve(data: DataProfile, gpu_bound_v100_s: float, proportional_cpus: float) -> HostCurve:
    """Fit the Amdahl curve through (3 cores, ``T_prop``) and (``c*``, ``T_gpu``) on V100.

    ``T_prop = s* x T_gpu`` is Synergy's iteration time at the proportional share.
    """
    t_gpu = gpu_bound_v100_s
    t_prop = data.best_speedup * t_gpu
    c0, cs = proportional_cpus, data.best_cpus
    if data.best_speedup > 1.0 and cs > c0:
        b = (t_prop - t_gpu) / (1.0 / c0 - 1.0 / cs)
        a = t_gpu - b / cs
    else:  # no gain beyond the proportional share: pure parallel work, GPU-bound at c0
        a, b = 0.0, t_prop * c0
    # a < 0 when c* < 3 s* (m5): the curve still passes through both points and is
    # clipped at 0 far beyond c*, where T_gpu bounds the iteration anyway.
    return HostCurve(cpu_serial_s=a, cpu_parallel_s=b, miss_s=t_prop, cache_gb=data.best_memory_gb)


def stalled_iteration_s(gpu_s: float, curve: HostCurve | None, cpus: float, memory_gb: float,
                        batch_scale: float = 1.0) -> float:
    """``max(T_gpu, T_cpu(c), T_fetch(m))``; host times scale with the batch (``batch_scale``)."""
    if curve is None:
        return gpu_s
    return max(gpu_s, batch_scale * curve.cpu_s(cpus), batch_scale * curve.fetch_s(memory_gb))
