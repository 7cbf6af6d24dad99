"""Free resources per node: the ledger the core enforces and policies plan on.

One class serves both: the scheduling core owns the authoritative instance and
refuses any change that would over-allocate a GPU, a CPU core or a megabyte of
memory; a policy gets a :meth:`FreeResources.copy` to try placements on. Counts
are numpy arrays indexed by ``Node.index`` so placement can be vectorised;
which GPUs are free is a bit mask per node (bit i set = GPU i free).
"""

from __future__ import annotations

import numpy as np

from halyard.datamodel import Allocation, Cluster, NodeAllocation

# One node's part of an allocation as the ledger counts it: (node index, GPUs, CPUs, memory MB, GPU bit mask).
LedgerPart = tuple[int, int, int, int, int]


class OverAllocation(ValueError):
    """A change to the ledger that would give out what is not free."""


class FreeResources:
    __slots__ = ("capacity", "cluster", "cpus", "gpu_mask", "gpus", "memory_mb", "schedulable")

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.capacity = np.array([n.gpus for n in cluster.nodes], dtype=np.int64)
        self.capacity.flags.writeable = False  # shared by every copy
        self.gpus = self.capacity.copy()
        self.cpus = np.array([n.cpus for n in cluster.nodes], dtype=np.int64)
        self.memory_mb = np.array([n.memory_mb for n in cluster.nodes], dtype=np.int64)
        self.gpu_mask = [(1 << n.gpus) - 1 for n in cluster.nodes]
        # Drained or dead nodes keep their jobs but take no new ones.
        self.schedulable = np.ones(len(cluster.nodes), dtype=bool)

    def copy(self) -> FreeResources:
        other = FreeResources.__new__(FreeResources)
        other.cluster = self.cluster
        other.capacity = self.capacity
        other.gpus = self.gpus.copy()
        other.cpus = self.cpus.copy()
        other.memory_mb = self.memory_mb.copy()
        other.gpu_mask = list(self.gpu_mask)
        other.schedulable = self.schedulable.copy()
        return other

    @property
    def total_gpus(self) -> int:
        return int(self.gpus.sum())

    @property
    def usable_free_gpus(self) -> int:
        """Free GPUs on nodes that accept new work (what a pass can hand out)."""
        return int(self.gpus[self.schedulable].sum())

    @property
    def schedulable_gpus(self) -> int:
        """GPUs on nodes that accept new work, free or not."""
        return int(self.capacity[self.schedulable].sum())

    def availability_key(self) -> tuple[bytes, bytes, bytes, bytes]:
        """What decides which GPUs are usable (free GPUs, CPUs and memory per node, and which nodes
        take work), as a hashable value: equal keys give equal ``usable_gpus``. Not the GPU ids
        (``gpu_mask``), which only say which of a node's free GPUs an allocation names."""
        return (self.gpus.tobytes(), self.cpus.tobytes(), self.memory_mb.tobytes(), self.schedulable.tobytes())

    def free_gpu_ids(self, node_index: int) -> list[int]:
        mask = self.gpu_mask[node_index]
        return [i for i in range(self.cluster.nodes[node_index].gpus) if mask >> i & 1]

    def take(self, allocation: Allocation) -> None:
        """Give out ``allocation``; all of it or, on error, none of it."""
        parts = [(self._index(p), p) for p in allocation.nodes]
        for idx, part in parts:
            self._check_take(idx, part)
        for idx, part in parts:
            self._apply(idx, part, -1)

    def give(self, allocation: Allocation) -> None:
        """Take ``allocation`` back; refuses to free what is already free."""
        parts = [(self._index(p), p) for p in allocation.nodes]
        for idx, part in parts:
            node = self.cluster.nodes[idx]
            bits = gpu_bits(part.gpus)
            if self.gpu_mask[idx] & bits:
                raise OverAllocation(f"node {node.name}: GPUs {part.gpus} are already free")
            if self.cpus[idx] + part.cpus > node.cpus or self.memory_mb[idx] + part.memory_mb > node.memory_mb:
                raise OverAllocation(f"node {node.name}: returning more CPU or memory than it has")
        for idx, part in parts:
            self._apply(idx, part, +1)

    def take_parts(self, parts: tuple[LedgerPart, ...]) -> None:
        """Give out ``parts`` without :meth:`take`'s checks: only on a policy's own copy, by a caller that built
        them from this ledger's free resources (Dally's re-auction, policies/dally_bids.py), so that no check
        can fail. The core's ledger never changes this way."""
        self._apply_parts(parts, -1)

    def give_parts(self, parts: tuple[LedgerPart, ...]) -> None:
        """Take ``parts`` back without :meth:`give`'s checks: only on a policy's own copy, for a running job's
        allocation (which the core's ledger holds as taken, so that no check can fail)."""
        self._apply_parts(parts, +1)

    def _apply_parts(self, parts: tuple[LedgerPart, ...], sign: int) -> None:
        gpus, cpus, memory_mb, mask = self.gpus, self.cpus, self.memory_mb, self.gpu_mask
        for idx, k, c, m, bits in parts:
            gpus[idx] += sign * k
            cpus[idx] += sign * c
            memory_mb[idx] += sign * m
            mask[idx] ^= bits

    def adjust(self, node_index: int, cpus: int, memory_mb: int) -> None:
        """Change a holder's CPU/memory on one node by (cpus, memory_mb) >= or < 0."""
        node = self.cluster.nodes[node_index]
        new_cpus = int(self.cpus[node_index]) - cpus
        new_mem = int(self.memory_mb[node_index]) - memory_mb
        if new_cpus < 0 or new_mem < 0:
            raise OverAllocation(f"node {node.name}: only {self.cpus[node_index]} CPUs and "
                                 f"{self.memory_mb[node_index]} MB free, asked for {cpus} and {memory_mb}")
        if new_cpus > node.cpus or new_mem > node.memory_mb:
            raise OverAllocation(f"node {node.name}: returning more CPU or memory than it has")
        self.cpus[node_index] = new_cpus
        self.memory_mb[node_index] = new_mem

    def _index(self, part: NodeAllocation) -> int:
        try:
            return self.cluster.node(part.node).index
        except KeyError as exc:
            raise OverAllocation(str(exc.args[0])) from None

    def _check_take(self, idx: int, part: NodeAllocation) -> None:
        node = self.cluster.nodes[idx]
        if any(g < 0 or g >= node.gpus for g in part.gpus):
            raise OverAllocation(f"node {node.name}: GPU index out of range in {part.gpus} "
                                 f"(node has {node.gpus})")
        bits = gpu_bits(part.gpus)
        if self.gpu_mask[idx] & bits != bits:
            busy = [g for g in part.gpus if not self.gpu_mask[idx] >> g & 1]
            raise OverAllocation(f"node {node.name}: GPUs {busy} are not free")
        if part.cpus > self.cpus[idx]:
            raise OverAllocation(f"node {node.name}: {part.cpus} CPUs asked, {self.cpus[idx]} free")
        if part.memory_mb > self.memory_mb[idx]:
            raise OverAllocation(f"node {node.name}: {part.memory_mb} MB asked, {self.memory_mb[idx]} free")

    def _apply(self, idx: int, part: NodeAllocation, sign: int) -> None:
        self.gpus[idx] += sign * len(part.gpus)
        self.cpus[idx] += sign * part.cpus
        self.memory_mb[idx] += sign * part.memory_mb
        self.gpu_mask[idx] ^= gpu_bits(part.gpus)


def gpu_bits(gpus: tuple[int, ...]) -> int:
    """The bit mask of GPU ids ``gpus`` (:attr:`FreeResources.gpu_mask`'s form)."""
    bits = 0
    for g in gpus:
        bits |= 1 << g
    return bits
