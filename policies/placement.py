"""First-fit consolidated placement with GPU-proportional CPU and memory.

The baseline of every paper here: put a job on as few nodes as possible, then
as few racks as possible (Tiresias' consolidation, Dally's "machine, then
rack" ladder without the delay). Each node's share of CPU cores and memory is
proportional to the GPUs taken on it (Synergy's "GPU-proportional"
allocation, §2).
"""

from __future__ import annotations

import numpy as np

from halyard.datamodel import Allocation, NodeAllocation
from halyard.policies.facts import ClusterShape, GpuTypes
from halyard.policies.passstate import PassState
from halyard.policies.reasons import Unplaced, cannot_fit, never_fits
from halyard.policies.resources import FreeResources
from halyard.policies.stages import DEFAULT_CANDIDATES, Placement
from halyard.policies.view import ClusterView, JobInfo


def usable_gpus(free: FreeResources, shape: ClusterShape, gpu_types: GpuTypes) -> np.ndarray:
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


def choose_nodes(avail: np.ndarray, shape: ClusterShape, gpus: int) -> list[tuple[int, int]] | None:
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


def no_fit(stage: str, view: ClusterView, job: JobInfo, gpus: int, avail: np.ndarray,
           usable: tuple[int, int] | None = None) -> Unplaced:
    """Why ``gpus`` GPUs of ``job`` found no placement in ``avail`` (usable GPUs per node).

    Never, if the cluster does not have that many GPUs of the types the job may use;
    else not now, with what is usable, Kubernetes-style ("3 usable on 2 nodes"). ``usable``: the usable
    GPUs of ``avail`` and the nodes that have any, if the caller has them.
    """
    types = view.gpu_types_for(job.spec)
    kinds = "" if types is None else f" of type {'/'.join(sorted(types)) or 'none that fits'}"
    total = view.shape.total_gpus(types)
    if gpus > total:
        return never_fits(stage, "needs {:#GPU}; the cluster has {}{}", gpus, total, kinds)
    free, nodes = (int(avail.sum()), int(np.count_nonzero(avail))) if usable is None else usable
    return cannot_fit(stage, "needs {:#GPU}{}; {} usable free on {:#node}", gpus, kinds, free, nodes)


class FirstFitConsolidated(Placement):
    """The fewest nodes, then the fewest racks, with GPU-proportional CPU and memory."""

    name = "consolidated"
    time_invariant = True  # chooses from the free resources and the job's spec alone

    def place(self, view: ClusterView, job: JobInfo, gpus: int, free: FreeResources,
              state: PassState) -> Allocation | Unplaced:
        avail = usable_gpus(free, view.shape, view.gpu_types_for(job.spec))
        picked = choose_nodes(avail, view.shape, gpus)
        return no_fit(self.name, view, job, gpus, avail) if picked is None else build_allocation(free, picked)

    def candidates(self, view: ClusterView, job: JobInfo, gpus: int, free: FreeResources, state: PassState,
                   limit: int = DEFAULT_CANDIDATES) -> list[Allocation]:
        """:meth:`place`'s choice, then every other single node that holds the job, every rack, and the
        whole cluster, ranked by (nodes, racks) touched; distinct node/GPU-count sets only."""
        shape = view.shape
        avail = usable_gpus(free, shape, view.gpu_types_for(job.spec))
        first = choose_nodes(avail, shape, gpus)
        if first is None:
            return []
        picks = [first, *([(int(i), gpus)] for i in np.flatnonzero(avail >= gpus))]
        rack_free = np.bincount(shape.rack, weights=avail, minlength=shape.n_racks)
        for r in np.flatnonzero(rack_free >= gpus):
            members = shape.rack_nodes[r]
            picks.append(fill(members, avail[members], gpus))
        picks.append(fill(np.arange(avail.size), avail, gpus))
        picks.sort(key=lambda p: (len(p), len({int(shape.rack[i]) for i, _ in p})))  # stable: `first` leads
        seen: set[tuple[tuple[int, int], ...]] = set()
        out = []
        for picked in picks:
            key = tuple(sorted(picked))
            if key not in seen:
                seen.add(key)
                out.append(build_allocation(free, picked))
                if len(out) == limit:
                    break
        return out
