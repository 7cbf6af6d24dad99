"""Synergy's packing machinery: CPU/memory rules per GPU, and a planner over a copy of the ledger.

The mechanisms of :mod:`halyard.policies.synergy` (GPU-proportional, GREEDY,
TUNE, OPT) differ only in which rule (:class:`Need`) they place each job at and
in TUNE's revert step (:class:`CapAt`); :class:`Packer` keeps the pass's
job -> allocation and node -> jobs maps on the pass's free resources.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from halyard.datamodel import Allocation, Cluster, NodeAllocation
from halyard.policies.facts import ClusterShape, GpuTypes
from halyard.policies.placement import choose_nodes
from halyard.policies.resources import FreeResources, OverAllocation
from halyard.policies.view import ClusterView


class Need:
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

    def max_gpus(self, free: FreeResources, shape: ClusterShape) -> np.ndarray:
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


class CapAt:
    """A held allocation capped at the GPU-proportional share per node and dimension (§4.2 revert)."""

    def __init__(self, cluster: Cluster, allocation: Allocation) -> None:
        self.cluster, self.allocation = cluster, allocation

    def __call__(self, idx: int, k: int) -> tuple[int, int]:
        node = self.cluster.nodes[idx]
        part = self.allocation.on(node.name)
        return min(part.cpus, node.proportional_cpus(k)), min(part.memory_mb, node.proportional_memory_mb(k))


class Packer:
    """Plans one pass on a copy of the ledger: job -> allocation, nodes -> jobs."""

    def __init__(self, view: ClusterView, free: FreeResources) -> None:
        self.cluster: Cluster = view.cluster
        self.free = free
        self.shape = view.shape
        self.alloc: dict[str, Allocation] = {}
        self.on_node: list[set[str]] = [set() for _ in self.cluster.nodes]
        self._built: dict[tuple[object, ...], Allocation] = {}  # (job, GPUs, CPU/memory) -> allocation

    # rules
    def demand(self, c: int, m: int) -> Need:
        return Need(self.cluster, c, m, False)

    def capped(self, c: int, m: int) -> Need:
        return Need(self.cluster, c, m, True)

    def proportional(self) -> Need:
        return Need(self.cluster, None, None, False)

    def gpus_only(self) -> Need:
        return Need(self.cluster, 0, 0, False)

    # bookkeeping
    def hold(self, job_id: str, allocation: Allocation) -> None:
        self.alloc[job_id] = allocation
        self._built[(job_id, tuple((p.node, p.gpus) for p in allocation.nodes),
                     tuple((p.cpus, p.memory_mb) for p in allocation.nodes))] = allocation
        for part in allocation.nodes:
            self.on_node[self.cluster.node(part.node).index].add(job_id)

    def release(self, job_id: str) -> Allocation:
        """Give a held job's whole allocation back to the pass's free resources (it is to be re-placed)."""
        allocation = self.alloc.pop(job_id)
        self.free.give(allocation)
        for part in allocation.nodes:
            self.on_node[self.cluster.node(part.node).index].discard(job_id)
        return allocation

    def usable(self, need: Need, gpu_types: GpuTypes) -> np.ndarray:
        """GPUs per node of ``gpu_types`` that can be taken with ``need``'s CPU and memory."""
        avail = need.max_gpus(self.free, self.shape)
        avail[~self.free.schedulable] = 0
        excluded = self.shape.excluded(gpu_types)
        if excluded is not None:
            avail[excluded] = 0
        return avail

    def select(self, need: Need, gpus: int, gpu_types: GpuTypes, *, best_fit: bool
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

    def build(self, picked: list[tuple[int, int]], need: Need) -> Allocation:
        parts = []
        for idx, k in picked:
            c, m = need(idx, k)
            ids = tuple(self.free.free_gpu_ids(idx)[:k])
            parts.append(NodeAllocation(self.cluster.nodes[idx].name, ids, c, m))
        return Allocation(tuple(parts))

    def place_on(self, job_id: str, allocation: Allocation, need: Callable[[int, int], tuple[int, int]]
                 ) -> Allocation | None:
        """Place a job on exactly ``allocation``'s GPUs with ``need``'s CPU and memory; None if they are
        not all free or the CPU and memory do not fit (the ledger is then unchanged)."""
        parts = tuple(dataclasses.replace(p, cpus=c, memory_mb=m) for p in allocation.nodes
                      for c, m in (need(self.cluster.node(p.node).index, len(p.gpus)),))
        placed = dataclasses.replace(allocation, nodes=parts)
        try:
            self.free.take(placed)
        except OverAllocation:
            return None
        self.hold(job_id, placed)
        return placed

    def place(self, job_id: str, picked: list[tuple[int, int]], need: Need) -> Allocation | None:
        allocation = self.build(picked, need)
        try:
            self.free.take(allocation)
        except OverAllocation:
            return None
        self.hold(job_id, allocation)
        return allocation

    def reshape(self, job_id: str, need: Callable[[int, int], tuple[int, int]]) -> bool:
        """Give a held job ``need``'s CPU and memory on its nodes (same GPUs); False if it does not fit.

        The ledger moves by the differences only, and the allocation with the CPU and memory it ends at
        is built once per pass (a re-pack reshapes every running job twice: to GPUs only, then back)."""
        old = self.alloc[job_id]
        idxs = [self.cluster.node(p.node).index for p in old.nodes]
        wanted = tuple(need(idx, len(p.gpus)) for idx, p in zip(idxs, old.nodes, strict=True))
        if all((p.cpus, p.memory_mb) == cm for p, cm in zip(old.nodes, wanted, strict=True)):
            return True  # the common case on a re-tune: build nothing
        free = self.free
        for idx, p, (c, m) in zip(idxs, old.nodes, wanted, strict=True):  # one part per node
            if c - p.cpus > free.cpus[idx] or m - p.memory_mb > free.memory_mb[idx]:
                return False
        for idx, p, (c, m) in zip(idxs, old.nodes, wanted, strict=True):
            free.cpus[idx] -= c - p.cpus
            free.memory_mb[idx] -= m - p.memory_mb
        key = (job_id, tuple((p.node, p.gpus) for p in old.nodes), wanted)
        new = self._built.get(key)
        if new is None:
            new = self._built[key] = dataclasses.replace(old, nodes=tuple(
                dataclasses.replace(p, cpus=c, memory_mb=m) for p, (c, m) in zip(old.nodes, wanted, strict=True)))
        self.alloc[job_id] = new
        return True
