"""Synergy: resource-sensitive packing of fungible CPU cores and memory (OSDI'22).

Paper: papers/synergy-multi-resource-scheduling.txt. Three parts:

* **Optimistic profiling** (§3.1, :func:`optimistic_profile`): on a job's arrival
  its throughput is measured at a few CPU points *at full memory*, chosen by the
  paper's binary search (start at the maximum; if the step to the upper end gains
  less than 10 % search the lower half, else the upper half); the CPU points not
  measured are interpolated and the memory columns are filled in analytically by
  the cache model (a fixed hit rate per epoch: MinIO). The result is the
  resource sensitivity matrix ``W_j[c, m]`` (throughput per GPU, normalised to
  1.0 at the GPU-proportional share) and the **demand vector**: the smallest
  ``(c, m)`` per GPU that saturates throughput (§3.2). In simulation and
  emulated replay the probe is the emulator's data-stall model, reached through
  the view's performance estimator (:meth:`stalled_compute_s` and
  :meth:`cache_fetch_s`); on real agents the same function takes the
  Profile/ProfileResult exchange as its probe.
* **Mechanisms**: GPU-proportional; Synergy-GREEDY (§3.3: first fit at the
  demand vector, skip a job that does not fit); Synergy-TUNE (§4.2); Synergy-OPT
  (§4.1: the ILP over the runnable set, :mod:`halyard.policies.synergy_opt`).
* **Policies**: FIFO, SRTF, LAS and FTF (Themis finish-time fairness) pick the
  runnable set: the top jobs in priority order whose GPU demands fit the
  schedulable GPUs (§4.2); running jobs outside it are preempted (lease not
  renewed). A runnable job that already runs keeps its GPUs (§4.3: leases are
  renewed on the same server); only its CPU and memory are re-tuned.

A Synergy policy is ``resource_sensitive``: drivers run it on the performance
model with data stalls on (``controlplane.timing.performance_model_for``), so
the CPU cores and memory of each allocation set the job's iteration time. The
GPU-proportional mechanism runs on the same model, so the A/B comparisons of
the paper compare like with like.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from halyard.datamodel import Allocation, Cluster, NodeAllocation
from halyard.policies.ordering import Fifo, Las, Srtf
from halyard.policies.placement import GpuTypes, _Shape, choose_nodes
from halyard.policies.plan import Plan
from halyard.policies.resources import FreeResources, OverAllocation
from halyard.policies.stages import Ordering
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

MECHANISMS = ("proportional", "synergy-greedy", "synergy-tune", "synergy-opt")


# ----------------------------------------------------------------------------- profiling

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

    @property
    def demand_speedup(self) -> float:
        return self.speedup(self.demand_cpus, self.demand_memory_mb)


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


# ----------------------------------------------------------------------------- FTF ordering

class FinishTimeFairness:
    """Themis finish-time fairness (REFERENCE-NUMBERS "Themis finish-time fairness").

    rho = (time since submission + remaining iterations x current iteration time)
        / (isolated time so far + remaining iterations / isolated throughput),
    isolated = a 1/N share of the cluster's GPUs (N = active jobs); a job that waits
    runs at no rate, so its shared time is its wait plus its remaining ideal time.
    Highest rho first (minimise the maximum rho); preemptive, drifts with time.
    """

    name = "ftf"
    preemptive = True
    arrival_order = False
    needs_rounds = True

    def key(self, view: ClusterView) -> Callable[[JobInfo], tuple[float, float, int]]:
        now = view.now
        n = max(1, len(view.running) + len(view.pending))
        share = view.cluster.total_gpus / n

        def rho(job: JobInfo) -> tuple[float, float, int]:
            gpus = job.spec.num_gpus
            isolated_s = job.ideal_iteration_s / min(1.0, share / gpus)
            remaining = job.remaining_iterations(now)
            current_s = job.iteration_s if job.allocation is not None else job.ideal_iteration_s
            shared = (now - job.spec.submit_time) + remaining * current_s
            isolated = job.iterations_done(now) * isolated_s + remaining * isolated_s
            return (-shared / max(isolated, 1e-9), job.spec.submit_time, job.arrival_seq)

        return rho


ORDERINGS: dict[str, Callable[[], Ordering]] = {"fifo": Fifo, "srtf": Srtf, "las": Las, "ftf": FinishTimeFairness}


# ----------------------------------------------------------------------------- packing

class _Need:
    """CPU cores and memory (MB) a job takes with k GPUs on a node: ``c``/``m`` per GPU
    (None: no per-GPU figure), capped at the node's GPU-proportional share if ``cap``."""

    __slots__ = ("c", "cap", "cluster", "m")

    def __init__(self, cluster: Cluster, c: int | None, m: int | None, cap: bool) -> None:
        self.cluster, self.c, self.m, self.cap = cluster, c, m, cap

    def __call__(self, idx: int, k: int) -> tuple[int, int]:
        node = self.cluster.nodes[idx]
        c = node.proportional_cpus(k) if self.c is None else self.c * k
        m = node.proportional_memory_mb(k) if self.m is None else self.m * k
        if self.cap and self.c is not None:
            c, m = min(c, node.proportional_cpus(k)), min(m, node.proportional_memory_mb(k))
        return c, m

    def max_gpus(self, free: FreeResources, shape: _Shape) -> np.ndarray:
        """Per node, the most GPUs whose CPU and memory fit what is free (the rule is monotone in k)."""
        big = np.iinfo(np.int64).max // 4
        # proportional: cpus*k // gpus <= free  <=>  k <= ((free+1)*gpus - 1) // cpus
        by_cpu_p = ((free.cpus + 1) * shape.gpus - 1) // np.maximum(shape.cpus, 1)
        by_mem_p = ((free.memory_mb + 1) * shape.gpus - 1) // np.maximum(shape.memory_mb, 1)
        if self.c is None:
            by_cpu, by_mem = by_cpu_p, by_mem_p
        else:
            by_cpu = free.cpus // self.c if self.c > 0 else np.full_like(free.cpus, big)
            by_mem = free.memory_mb // self.m if self.m > 0 else np.full_like(free.memory_mb, big)
            if self.cap:
                by_cpu, by_mem = np.maximum(by_cpu, by_cpu_p), np.maximum(by_mem, by_mem_p)
        return np.minimum(free.gpus, np.minimum(by_cpu, by_mem))


class _CapAt:
    """A held allocation capped at the GPU-proportional share per node and dimension (§4.2 revert)."""

    def __init__(self, cluster: Cluster, allocation: Allocation) -> None:
        self.cluster, self.allocation = cluster, allocation

    def __call__(self, idx: int, k: int) -> tuple[int, int]:
        node = self.cluster.nodes[idx]
        part = self.allocation.on(node.name)
        return min(part.cpus, node.proportional_cpus(k)), min(part.memory_mb, node.proportional_memory_mb(k))


class _Packer:
    """Plans one pass on a copy of the ledger: job -> allocation, nodes -> jobs."""

    def __init__(self, view: ClusterView, shape: _Shape) -> None:
        self.cluster: Cluster = view.cluster
        self.free = view.free.copy()
        self.shape = shape
        self.alloc: dict[str, Allocation] = {}
        self.on_node: list[set[str]] = [set() for _ in self.cluster.nodes]

    # rules
    def demand(self, c: int, m: int) -> _Need:
        return _Need(self.cluster, c, m, False)

    def capped(self, c: int, m: int) -> _Need:
        return _Need(self.cluster, c, m, True)

    def proportional(self) -> _Need:
        return _Need(self.cluster, None, None, False)

    def gpus_only(self) -> _Need:
        return _Need(self.cluster, 0, 0, False)

    # bookkeeping
    def hold(self, job_id: str, allocation: Allocation) -> None:
        self.alloc[job_id] = allocation
        for part in allocation.nodes:
            self.on_node[self.cluster.node(part.node).index].add(job_id)

    def drop(self, job_id: str) -> None:
        allocation = self.alloc.pop(job_id)
        self.free.give(allocation)
        for part in allocation.nodes:
            self.on_node[self.cluster.node(part.node).index].discard(job_id)

    def usable(self, need: _Need, gpu_types: GpuTypes) -> np.ndarray:
        """GPUs per node of ``gpu_types`` that can be taken with ``need``'s CPU and memory."""
        avail = need.max_gpus(self.free, self.shape)
        avail[~self.free.schedulable] = 0
        excluded = self.shape.excluded(gpu_types)
        if excluded is not None:
            avail[excluded] = 0
        return avail

    def select(self, need: _Need, gpus: int, gpu_types: GpuTypes, *, best_fit: bool
               ) -> list[tuple[int, int]] | None:
        avail = self.usable(need, gpu_types)
        single = np.flatnonzero(avail >= gpus)
        if single.size:
            if not best_fit:
                return [(int(single[0]), gpus)]
            f = self.free
            order = np.lexsort((single, f.memory_mb[single], f.cpus[single], f.gpus[single]))
            return [(int(single[order[0]]), gpus)]
        return choose_nodes(avail, self.shape, gpus)

    def build(self, picked: list[tuple[int, int]], need: _Need) -> Allocation:
        parts = []
        for idx, k in picked:
            c, m = need(idx, k)
            ids = tuple(self.free.free_gpu_ids(idx)[:k])
            parts.append(NodeAllocation(self.cluster.nodes[idx].name, ids, c, m))
        return Allocation(tuple(parts))

    def place(self, job_id: str, picked: list[tuple[int, int]], need: _Need) -> Allocation | None:
        allocation = self.build(picked, need)
        try:
            self.free.take(allocation)
        except OverAllocation:
            return None
        self.hold(job_id, allocation)
        return allocation

    def reshape(self, job_id: str, need: Callable[[int, int], tuple[int, int]]) -> bool:
        """Give a held job ``need``'s CPU and memory on its nodes (same GPUs); False if it does not fit."""
        old = self.alloc[job_id]
        parts = []
        for p in old.nodes:
            c, m = need(self.cluster.node(p.node).index, len(p.gpus))
            parts.append(NodeAllocation(p.node, p.gpus, c, m))
        new = replace(old, nodes=tuple(parts))  # keeps the stages and any time-shift grid
        if new == old:
            return True
        self.free.give(old)
        try:
            self.free.take(new)
        except OverAllocation:
            self.free.take(old)
            return False
        self.alloc[job_id] = new
        return True


# ----------------------------------------------------------------------------- the policy

class SynergyPolicy:
    """``MECHANISM:ORDERING`` -- a Synergy mechanism driven by a scheduling policy."""

    resource_sensitive = True  # run on the performance model with data stalls on
    acts_without_pending = False

    def __init__(self, mechanism: str, ordering: Ordering, *, name: str | None = None) -> None:
        if mechanism not in MECHANISMS:
            raise ValueError(f"unknown Synergy mechanism {mechanism!r} (known: {', '.join(MECHANISMS)})")
        self.mechanism = mechanism
        self.ordering = ordering
        self.name = name or f"{mechanism}:{ordering.name}"
        self._profiles: dict[tuple[str, int, str], SensitivityProfile] = {}
        self._shapes: dict[int, tuple[Cluster, _Shape]] = {}
        self.last_bound: float | None = None  # Synergy-OPT: the ILP's objective of the last pass

    @property
    def needs_rounds(self) -> bool:
        return self.ordering.needs_rounds

    # profiles are kept per (model, batch, GPU type): a job is profiled once, on arrival
    def profile(self, view: ClusterView, job: JobInfo) -> SensitivityProfile:
        gpu_type = job.spec.gpu_type or view.cluster.gpu_types[0]
        key = (job.spec.model, job.spec.batch_size, gpu_type)
        hit = self._profiles.get(key)
        if hit is None:
            hit = self._profiles[key] = profile_job(view, job, gpu_type)
        return hit

    def _cap(self, view: ClusterView, job: JobInfo) -> tuple[int, int]:
        nodes = view.cluster.nodes
        per_node = -(-job.num_gpus // max(1, len(nodes)))
        return nodes[0].cpus // per_node, nodes[0].memory_mb // per_node

    def demand(self, view: ClusterView, job: JobInfo) -> tuple[int, int]:
        """The job's demand vector per GPU, capped so that it fits the empty cluster with its GPUs
        spread over as many servers as possible (else GREEDY would skip it forever)."""
        p = self.profile(view, job)
        cap_c, cap_m = self._cap(view, job)
        return min(p.demand_cpus, cap_c), min(p.demand_memory_mb, cap_m)

    def _shape(self, cluster: Cluster) -> _Shape:
        entry = self._shapes.get(id(cluster))
        if entry is None or entry[0] is not cluster:
            entry = self._shapes[id(cluster)] = (cluster, _Shape(cluster))
        return entry[1]

    def schedule(self, view: ClusterView) -> Plan:
        plan = Plan()
        for job in view.pending:  # optimistic profiling on arrival
            self.profile(view, job)
        ranked: list[JobInfo] = [*view.running.values(), *view.pending]
        ranked.sort(key=self.ordering.key(view))
        budget = view.schedulable_gpus
        packer = _Packer(view, self._shape(view.cluster))
        runnable: list[JobInfo] = []
        new: list[JobInfo] = []
        preempted: list[str] = []
        for job in ranked:
            running = job.allocation is not None
            gpus = job.num_gpus
            if gpus <= budget:
                budget -= gpus
                runnable.append(job)
                if running:
                    packer.hold(job.job_id, job.allocation)
                else:
                    new.append(job)
            elif running:
                preempted.append(job.job_id)
                packer.free.give(job.allocation)
        for job_id in preempted:
            plan.preempt(job_id)
        if self.mechanism == "proportional":
            self._proportional(view, packer, new)
        elif self.mechanism == "synergy-greedy":
            self._greedy(view, packer, new)
        else:
            vectors = None
            if self.mechanism == "synergy-opt":
                from halyard.policies.synergy_opt import opt_vectors  # scipy only when OPT runs

                vectors, self.last_bound = opt_vectors(view, runnable, [self.profile(view, j) for j in runnable],
                                                       [self._cap(view, j) for j in runnable])
            self._tune(view, packer, runnable, new, vectors)
        self._emit(view, plan, packer, new)
        return plan

    # mechanisms ----------------------------------------------------------------

    def _proportional(self, view: ClusterView, packer: _Packer, new: Sequence[JobInfo]) -> None:
        need = packer.proportional()
        for job in new:
            picked = packer.select(need, job.num_gpus, view.gpu_types_for(job.spec), best_fit=False)
            if picked is not None:
                packer.place(job.job_id, picked, need)

    def _greedy(self, view: ClusterView, packer: _Packer, new: Sequence[JobInfo]) -> None:
        """§3.3: in priority order, first fit at the demand vector; skip a job that does not fit."""
        for job in new:
            need = packer.demand(*self.demand(view, job))
            picked = packer.select(need, job.num_gpus, view.gpu_types_for(job.spec), best_fit=False)
            if picked is not None:
                packer.place(job.job_id, picked, need)

    def _tune(self, view: ClusterView, packer: _Packer, runnable: Sequence[JobInfo], new: Sequence[JobInfo],
              vectors: dict[str, tuple[int, int]] | None) -> None:
        """§4.2, for the new runnable jobs sorted by GPU, then CPU, then memory demand (largest first):

        place at the demand vector on the server with the least free resources that
        fits it (multi-GPU: the fewest servers, CPU and memory proportional to GPUs per
        server); else (1) if the demand exceeds the proportional share, retry at the
        share (capped per dimension: never more than the demand); else (2a) take the
        servers that have the GPUs and switch jobs there holding more than their share
        back to it until the job fits at its share. Afterwards runnable jobs below their
        demand are raised back to it, in priority order, where their servers have room
        (Synergy re-tunes every round)."""
        def vector(job: JobInfo) -> tuple[int, int]:
            if vectors is not None and job.job_id in vectors:
                return vectors[job.job_id]
            return self.demand(view, job)

        order = sorted(new, key=lambda j: (-j.num_gpus, -vector(j)[0], -vector(j)[1], j.arrival_seq))
        for job in order:
            c, m = vector(job)
            gpus, gtype = job.num_gpus, view.gpu_types_for(job.spec)
            need = packer.demand(c, m)
            picked = packer.select(need, gpus, gtype, best_fit=True)
            if picked is not None and packer.place(job.job_id, picked, need):
                continue
            capped = packer.capped(c, m)
            picked = packer.select(capped, gpus, gtype, best_fit=True)
            if picked is not None and packer.place(job.job_id, picked, capped):
                continue
            picked = packer.select(packer.gpus_only(), gpus, gtype, best_fit=True)
            if picked is None:
                continue  # the GPUs are not there (a GPU type constraint): the job waits
            for idx, k in picked:
                self._release(view, packer, idx, capped(idx, k), vector)
            packer.place(job.job_id, picked, capped)
        for job in runnable:  # re-tune: raise jobs back to their demand where there is room
            if job.job_id in packer.alloc:
                c, m = vector(job)
                packer.reshape(job.job_id, packer.demand(c, m))

    def _release(self, view: ClusterView, packer: _Packer, idx: int, wanted: tuple[int, int],
                 vector: Callable[[JobInfo], tuple[int, int]]) -> None:
        """§4.2 (2a): switch jobs on node ``idx`` holding more than their share to it until ``wanted`` fits."""
        free = packer.free
        node = view.cluster.nodes[idx]

        def excess(job_id: str) -> float:
            part = packer.alloc[job_id].on(node.name)
            k = len(part.gpus)
            return (max(0, part.cpus - node.proportional_cpus(k)) / max(node.cpus, 1)
                    + max(0, part.memory_mb - node.proportional_memory_mb(k)) / max(node.memory_mb, 1))

        candidates = sorted((j for j in packer.on_node[idx] if excess(j) > 0), key=lambda j: (-excess(j), j))
        for job_id in candidates:
            if free.cpus[idx] >= wanted[0] and free.memory_mb[idx] >= wanted[1]:
                return
            packer.reshape(job_id, _CapAt(view.cluster, packer.alloc[job_id]))

    # plan ----------------------------------------------------------------------

    def _emit(self, view: ClusterView, plan: Plan, packer: _Packer, new: Sequence[JobInfo]) -> None:
        """Resource changes of running jobs (all decreases first, then increases), then starts,
        so every prefix of the plan fits the ledger."""
        changes: list[tuple[str, str, int, int, int, int]] = []
        for job_id, job in view.running.items():
            alloc = packer.alloc.get(job_id)
            if alloc is None or alloc is job.allocation:
                continue
            for old, part in zip(job.allocation.nodes, alloc.nodes, strict=True):
                if (old.cpus, old.memory_mb) != (part.cpus, part.memory_mb):
                    changes.append((job_id, part.node, old.cpus, old.memory_mb, part.cpus, part.memory_mb))
        for job_id, node, oc, om, nc, nm in changes:
            low = (min(oc, nc), min(om, nm))
            if low != (oc, om) and low != (nc, nm):
                plan.set_resources(job_id, node, *low)
            elif low == (nc, nm):
                plan.set_resources(job_id, node, nc, nm)
        for job_id, node, oc, om, nc, nm in changes:
            if (min(oc, nc), min(om, nm)) != (nc, nm):
                plan.set_resources(job_id, node, nc, nm)
        for job in new:
            alloc = packer.alloc.get(job.job_id)
            if alloc is not None:
                plan.start(job.job_id, alloc)


def make_synergy(mechanism: str, ordering: str) -> SynergyPolicy:
    return SynergyPolicy(mechanism, ORDERINGS[ordering]())


def cpus_memory_per_gpu(allocation: Allocation) -> tuple[float, float]:
    """The smallest CPU cores and memory (MB) per GPU over an allocation's nodes."""
    c = m = math.inf
    for part in allocation.nodes:
        if part.gpus:
            c = min(c, part.cpus / len(part.gpus))
            m = min(m, part.memory_mb / len(part.gpus))
    return c, m
