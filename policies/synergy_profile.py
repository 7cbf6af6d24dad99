"""Synergy's optimistic profiling (§3.1) and demand vector (§3.2).

On a job's arrival its throughput is measured at a few CPU points *at full
memory*, chosen by the paper's binary search (start at the maximum; if the step
to the upper end gains less than 10 % search the lower half, else the upper
half); the CPU points not measured are interpolated and the memory columns are
filled in analytically by the cache model (a fixed hit rate per epoch: MinIO).
The result is the resource sensitivity matrix ``W_j[c, m]`` (throughput per
GPU, normalised to 1.0 at the GPU-proportional share) and the **demand
vector**: the smallest ``(c, m)`` per GPU that saturates throughput. In
simulation and emulated replay the probe is the emulator's data-stall model,
reached through the view's performance estimator (:meth:`stalled_compute_s` and
:meth:`cache_fetch_s`); on real agents the same function takes the
Profile/ProfileResult exchange as its probe.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from halyard.policies.view import ClusterView, JobInfo

# §3.1: "If the profiled point resulted in a throughput improvement that is less than a
# fixed threshold (say 10%), then we continue binary search on the lower half".
PROFILE_GAIN_THRESHOLD = 0.10
# A point "saturates" throughput when it is within this fraction of the best measured
# throughput (estimate: measurement noise of a few-iteration profile).
SATURATION_TOLERANCE = 0.01
# Memory columns of the sensitivity matrix, as multiples of the proportional share per
# GPU: Synergy's {20.83, 62.5, 125, 187.5, 250} GB on its 62.5 GB/GPU servers
# (REFERENCE-NUMBERS "Synergy CPU/memory sensitivity").
MEMORY_COLUMNS = (1.0 / 3.0, 1.0, 2.0, 3.0, 4.0)

@dataclass(frozen=True)
class SensitivityProfile:
    """A job's resource sensitivity matrix and demand vector, per GPU.

    ``matrix[i, k]`` is the throughput with ``cpus[i]`` cores and ``memory_mb[k]``
    per GPU over the throughput at the GPU-proportional share (1.0 there).
    """

    cpus: tuple[int, ...]
    memory_mb: tuple[int, ...]
    matrix: np.ndarray
    measured: tuple[int, ...]  # CPU points actually probed (at full memory)
    demand_cpus: int  # per GPU
    demand_memory_mb: int  # per GPU
    proportional_cpus: int  # per GPU, the share W is normalised at
    proportional_memory_mb: int

    def speedup(self, cpus_per_gpu: float, memory_mb_per_gpu: float) -> float:
        """W at the largest grid point not above (cpus, memory) per GPU (0 below the grid)."""
        i = int(np.searchsorted(self.cpus, cpus_per_gpu + 1e-9, side="right")) - 1
        k = int(np.searchsorted(self.memory_mb, memory_mb_per_gpu + 1e-9, side="right")) - 1
        if i < 0 or k < 0:
            return 0.0
        return float(self.matrix[i, k])


def binary_search_points(throughput: Callable[[int], float], max_cpus: int,
                         threshold: float = PROFILE_GAIN_THRESHOLD) -> dict[int, float]:
    """The CPU points Synergy's §3.1 binary search measures, with their throughput.

    Starts at the maximum (and the minimum, one core); while the interval is wider
    than one core, measure its midpoint: if the upper end gains less than
    ``threshold`` over it, the knee is in the lower half, else in the upper half.
    """
    seen: dict[int, float] = {}

    def t(c: int) -> float:
        if c not in seen:
            seen[c] = throughput(c)
        return seen[c]

    lo, hi = 1, max(1, max_cpus)
    t(hi)
    t(lo)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if t(hi) < (1.0 + threshold) * t(mid):
            hi = mid
        else:
            lo = mid
    return seen


def optimistic_profile(iteration_s: Callable[[int], float], fetch_s: Callable[[int], float], *,
                       max_cpus: int, proportional_cpus: int, proportional_memory_mb: int,
                       threshold: float = PROFILE_GAIN_THRESHOLD,
                       tolerance: float = SATURATION_TOLERANCE) -> SensitivityProfile:
    """Synergy's optimistic profiling (§3.1) and demand vector (§3.2).

    ``iteration_s(c)``: a measured iteration with ``c`` cores per GPU at full memory
    (the probe); ``fetch_s(memory_mb)``: the cache model's seconds per iteration
    reading misses with that memory per GPU (analytic, no probe). The proportional
    CPU point is always measured too (the guarantee needs its throughput).
    """
    points = binary_search_points(lambda c: 1.0 / iteration_s(c), max_cpus, threshold)
    if proportional_cpus not in points and 1 <= proportional_cpus <= max_cpus:
        points[proportional_cpus] = 1.0 / iteration_s(proportional_cpus)
    measured = sorted(points)
    cpus = np.arange(1, max(1, max_cpus) + 1)
    # Interpolating iteration times (not throughputs) between measured points; demand
    # points are chosen among measured ones only.
    full = np.interp(cpus, measured, [1.0 / points[c] for c in measured])  # iteration s at full memory
    memory = tuple(sorted({max(1, int(proportional_memory_mb * f)) for f in MEMORY_COLUMNS}))
    fetch = np.array([fetch_s(m) for m in memory])
    seconds = np.maximum(full[:, None], fetch[None, :])
    prop_i = min(max(proportional_cpus, 1), int(cpus[-1])) - 1
    prop_s = max(float(full[prop_i]), fetch_s(proportional_memory_mb))
    matrix = prop_s / seconds
    # Saturated: within the tolerance of the best measured throughput, and never below
    # the proportional share's (so a job at its demand never runs slower than there).
    target_s = min(prop_s, 1.0 / ((1.0 - tolerance) * max(points.values())))
    demand_c = next((c for c in measured if 1.0 / points[c] <= target_s * (1.0 + 1e-12)), measured[-1])
    # Memory: the cache model is a separate bound (max), so take the smallest column
    # whose miss time stays within the target.
    demand_m = next((m for m, f in zip(memory, fetch, strict=True) if f <= target_s * (1.0 + 1e-12)), memory[-1])
    return SensitivityProfile(tuple(int(c) for c in cpus), memory, matrix, tuple(measured), int(demand_c),
                              int(demand_m), int(proportional_cpus), int(proportional_memory_mb))


def profile_job(view: ClusterView, job: JobInfo, gpu_type: str) -> SensitivityProfile:
    """Profile ``job`` on the view's performance estimator (the emulator's data-stall model)."""
    cluster = view.cluster
    node = next(n for n in cluster.nodes if n.gpu_type == gpu_type)
    spec = job.spec
    full_gb = node.memory_mb / 1000.0
    return optimistic_profile(
        lambda c: view.perf.stalled_compute_s(spec.model, gpu_type, c, full_gb, spec.batch_size),
        lambda m: view.perf.cache_fetch_s(spec.model, m / 1000.0, spec.batch_size),
        max_cpus=node.cpus, proportional_cpus=node.cpus // node.gpus,
        proportional_memory_mb=node.memory_mb // node.gpus)


def job_profile(view: ClusterView, job: JobInfo) -> SensitivityProfile:
    """``job``'s profile on its GPU type, measured once per (model, batch, type) for the whole run:
    profiling is a pure function of the performance model (:class:`ClusterFacts` memoises it)."""
    gpu_type = job.spec.gpu_type or view.cluster.gpu_types[0]
    return view.facts.memo("synergy/profile", (job.spec.model, job.spec.batch_size, gpu_type),
                           lambda: profile_job(view, job, gpu_type))
