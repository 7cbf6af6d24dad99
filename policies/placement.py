"""First-fit consolidated placement with GPU-proportional CPU and memory.

The baseline of every paper here: put a job on as few nodes as possible, then
as few racks as possible (Tiresias' consolidation, Dally's "machine, then
rack" ladder without the delay). Each node's share of CPU cores and memory is
proportional to the GPUs taken on it (Synergy's "GPU-proportional"
allocation, §2).
"""

from __future__ import annotations

import numpy as np

from halyard.datamodel import Allocation, Cluster, NodeAllocation
from halyard.policies.resources import FreeResources
from halyard.policies.view import ClusterView, JobInfo

# The GPU types a job may be placed on: one type, a set of types, or None for any
# (:meth:`halyard.policies.ClusterView.gpu_types_for` gives a job's, memory included).
GpuTypes = str | frozenset[str] | None


class _Shape:
    """Static per-cluster arrays, computed once per cluster."""

    def __init__(self, cluster: Cluster) -> None:
        nodes = cluster.nodes
        self.gpus = np.array([n.gpus for n in nodes], dtype=np.int64)
        self.cpus = np.array([n.cpus for n in nodes], dtype=np.int64)
        self.memory_mb = np.array([n.memory_mb for n in nodes], dtype=np.int64)
        self.rack = np.array([n.rack_index for n in nodes], dtype=np.int64)
        self.n_racks = len(cluster.racks)
        self.rack_nodes = [np.array(r.node_indices, dtype=np.int64) for r in cluster.racks]
        self._types = tuple(n.gpu_type for n in nodes)
        self._excluded: dict[GpuTypes, np.ndarray] = {}
        self._largest: dict[GpuTypes, int] = {}

    def excluded(self, gpu_types: GpuTypes) -> np.ndarray | None:
        """Mask of the nodes whose GPU type is not in ``gpu_types`` (None: no restriction)."""
        if gpu_types is None:
            return None
        mask = self._excluded.get(gpu_types)
        if mask is None:
            allowed = (gpu_types,) if isinstance(gpu_types, str) else gpu_types
            mask = self._excluded[gpu_types] = np.array([t not in allowed for t in self._types], dtype=bool)
        return mask

    def max_gpus_per_node(self, gpu_types: GpuTypes) -> int:
        """GPUs of the largest node of ``gpu_types`` (any type if None; 0 if there is none)."""
        largest = self._largest.get(gpu_types)
        if largest is None:
            excluded = self.excluded(gpu_types)
            gpus = self.gpus if excluded is None else self.gpus[~excluded]
            largest = self._largest[gpu_types] = int(gpus.max()) if gpus.size else 0
        return largest


def usable_gpus(free: FreeResources, shape: _Shape, gpu_types: GpuTypes) -> np.ndarray:
    """GPUs per node of ``gpu_types`` that could be taken with their proportional CPU and memory."""
    # proportional_cpus(k) = cpus*k // gpus <= free  <=>  k <= ((free+1)*gpus - 1) // cpus
    by_cpu = ((free.cpus + 1) * shape.gpus - 1) // np.maximum(shape.cpus, 1)
    by_mem = ((free.memory_mb + 1) * shape.gpus - 1) // np.maximum(shape.memory_mb, 1)
    avail = np.minimum(free.gpus, np.minimum(by_cpu, by_mem))
    avail[~free.schedulable] = 0
    excluded = shape.excluded(gpu_types)
    if excluded is not None:
        avail[excluded] = 0
    return avail


def choose_nodes(avail: np.ndarray, shape: _Shape, gpus: int) -> list[tuple[int, int]] | None:
    """(node index, GPUs on it) on the fewest nodes, then the fewest racks."""
    single = np.flatnonzero(avail >= gpus)
    if single.size:
        return [(int(single[0]), gpus)]
    if int(avail.sum()) < gpus:
        return None
    best: list[tuple[int, int]] | None = None
    rack_free = np.bincount(shape.rack, weights=avail, minlength=shape.n_racks)
    for r in np.flatnonzero(rack_free >= gpus):
        members = shape.rack_nodes[r]
        picked = fill(members, avail[members], gpus)
        if best is None or len(picked) < len(best):
            best = picked
    if best is not None:
        return best
    return fill(np.arange(avail.size), avail, gpus)


def fill(indices: np.ndarray, avail: np.ndarray, gpus: int, *, presorted: bool = False) -> list[tuple[int, int]]:
    """Take ``gpus`` from ``indices``: nodes with the most usable GPUs first, ties by position
    (fewest nodes); with ``presorted`` in the given order, skipping nodes with nothing free."""
    order = np.arange(avail.size) if presorted else np.argsort(-avail, kind="stable")
    picked: list[tuple[int, int]] = []
    left = gpus
    for i in order:
        take = min(int(avail[i]), left)
        if take <= 0:
            if presorted:
                continue
            break
        picked.append((int(indices[i]), take))
        left -= take
        if left == 0:
            break
    return picked


def build_allocation(free: FreeResources, picked: list[tuple[int, int]]) -> Allocation:
    """Lowest free GPU ids on each node, with GPU-proportional CPU and memory."""
    parts = []
    for idx, k in picked:
        node = free.cluster.nodes[idx]
        ids = tuple(free.free_gpu_ids(idx)[:k])
        parts.append(NodeAllocation(node.name, ids, node.proportional_cpus(k), node.proportional_memory_mb(k)))
    return Allocation(tuple(parts))


class FirstFitConsolidated:
    name = "consolidated"

    def __init__(self) -> None:
        self._shapes: dict[int, tuple[Cluster, _Shape]] = {}

    def shape(self, cluster: Cluster) -> _Shape:
        entry = self._shapes.get(id(cluster))
        if entry is None or entry[0] is not cluster:
            entry = self._shapes[id(cluster)] = (cluster, _Shape(cluster))
        return entry[1]

    def place(self, view: ClusterView, job: JobInfo, gpus: int, free: FreeResources) -> Allocation | None:
        shape = self.shape(free.cluster)
        picked = choose_nodes(usable_gpus(free, shape, view.gpu_types_for(job.spec)), shape, gpus)
        return None if picked is None else build_allocation(free, picked)
