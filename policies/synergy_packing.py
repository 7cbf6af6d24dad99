"""Synergy's packing machinery: CPU/memory rules per GPU, and a planner over a copy of the ledger.

The mechanisms of :mod:`halyard.policies.synergy` (GPU-proportional, GREEDY,
TUNE, OPT) differ only in which rule (:class:`Need`) they place each job at and
in TUNE's revert step (:class:`CapAt`); :class:`Packer` keeps the pass's
job -> allocation and node -> jobs maps on the pass's free resources.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Iterable

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
        c, m = self.c, self.m
        if c is None:
            by_cpu, by_mem = by_cpu_p, by_mem_p
        else:
            assert m is not None, "a per-GPU demand gives both CPUs and memory"
            by_cpu = free.cpus // c if c > 0 else np.full_like(free.cpus, big)
            by_mem = free.memory_mb // m if m > 0 else np.full_like(free.memory_mb, big)
            if self.cap:
                by_cpu, by_mem = np.maximum(by_cpu, by_cpu_p), np.maximum(by_mem, by_mem_p)
        return np.minimum(free.gpus, np.minimum(by_cpu, by_mem))

    def max_gpus_at(self, free: FreeResources, shape: ClusterShape, i: int) -> int:
        """:meth:`max_gpus` of node ``i`` alone, in Python integers (the same arithmetic)."""
        fg, fc, fm = free.gpus.item(i), free.cpus.item(i), free.memory_mb.item(i)
        g, cpus, memory = shape.gpus.item(i), shape.cpus.item(i), shape.memory_mb.item(i)
        by_cpu = by_cpu_p = ((fc + 1) * g - 1) // max(cpus, 1)
        by_mem = by_mem_p = ((fm + 1) * g - 1) // max(memory, 1)
        c, m = self.c, self.m
        if c is not None:
            assert m is not None, "a per-GPU demand gives both CPUs and memory"
            big = np.iinfo(np.int64).max // 4
            by_cpu = fc // c if c > 0 else big
            by_mem = fm // m if m > 0 else big
            if self.cap:
                by_cpu, by_mem = max(by_cpu, by_cpu_p), max(by_mem, by_mem_p)
        return min(fg, by_cpu, by_mem)


class CapAt:
    """A held allocation capped at the GPU-proportional share per node and dimension (§4.2 revert)."""

    def __init__(self, cluster: Cluster, allocation: Allocation) -> None:
        self.cluster, self.allocation = cluster, allocation

    def __call__(self, idx: int, k: int) -> tuple[int, int]:
        node = self.cluster.nodes[idx]
        part = self.allocation.on(node.name)
        assert part is not None, "capped only on the nodes the allocation holds"
        return min(part.cpus, node.proportional_cpus(k)), min(part.memory_mb, node.proportional_memory_mb(k))


def node_index(view: ClusterView) -> dict[str, int]:
    """Node name -> index, made once per cluster: a re-pack looks nodes up by the hundred thousand (Cluster.node
    is a call)."""
    nodes = view.cluster.nodes
    return view.facts.memo("synergy/node-index", None, lambda: {n.name: i for i, n in enumerate(nodes)})


def capacities(view: ClusterView) -> tuple[list[int], list[int]]:
    """Each node's CPU cores and memory as lists, made once per cluster (read only): what the lean re-pack and
    ``_emit``'s ledger bound a node's free resources by."""
    shape = view.shape
    return view.facts.memo("synergy/capacity", None, lambda: (shape.cpus.tolist(), shape.memory_mb.tolist()))


class Packer:
    """Plans one pass on a copy of the ledger: job -> allocation, nodes -> jobs."""

    def __init__(self, view: ClusterView, free: FreeResources, kept: KeptShapes | None = None) -> None:
        self.cluster: Cluster = view.cluster
        self.free = free
        self.shape = view.shape
        self.index = node_index(view)
        self.alloc: dict[str, Allocation] = {}
        # Node index -> jobs with a part there (a node's set made when a job first lands on it: a pass of a
        # mechanism that places only new jobs touches a node or two of the cluster's).
        self.on_node: defaultdict[int, set[str]] = defaultdict(set)
        self._home: dict[str, Allocation] = {}  # what each held job held when the pass began
        self._kept = KeptShapes() if kept is None else kept

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
        self.alloc[job_id] = self._home[job_id] = allocation
        index, on_node = self.index, self.on_node
        for part in allocation.nodes:
            on_node[index[part.node]].add(job_id)

    def strip(self, job_id: str) -> None:
        """Give a held job's CPU and memory back; it keeps its GPUs (a re-pack's first step)."""
        self.strip_all((job_id,))

    def strip_all(self, job_ids: Iterable[str]) -> None:
        """:meth:`strip` each of ``job_ids``, the free CPU and memory summed per node first and added once."""
        n = len(self.cluster.nodes)
        cpus, memory = [0] * n, [0] * n
        alloc, index, shaped = self.alloc, self.index, self._shaped
        for job_id in job_ids:
            old = alloc[job_id]
            for p in old.nodes:
                idx = index[p.node]
                cpus[idx] += p.cpus
                memory[idx] += p.memory_mb
            alloc[job_id] = shaped(job_id, old, _ZEROS[len(old.nodes)] if len(old.nodes) < len(_ZEROS)
                                   else ((0, 0),) * len(old.nodes))
        self.free.cpus += cpus
        self.free.memory_mb += memory

    def release(self, job_id: str) -> Allocation:
        """Give a held job's whole allocation back to the pass's free resources (it is to be re-placed)."""
        allocation = self.alloc.pop(job_id)
        self.free.give(allocation)
        index, on_node = self.index, self.on_node
        for part in allocation.nodes:
            on_node[index[part.node]].discard(job_id)
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
        if not best_fit:
            first = self._first_fit(need, gpus, gpu_types)
            if first is not None:
                return [(first, gpus)]
        avail = self.usable(need, gpu_types)
        single = np.flatnonzero(avail >= gpus)
        if single.size:
            if not best_fit:
                return [(int(single[0]), gpus)]
            f = self.free
            order = np.lexsort((single, f.memory_mb[single], f.cpus[single], f.gpus[single]))
            return [(int(single[order[0]]), gpus)]
        return choose_nodes(avail, self.shape, gpus)

    def _first_fit(self, need: Need, gpus: int, gpu_types: GpuTypes) -> int | None:
        """The first node whose :meth:`usable` GPUs reach ``gpus`` (what :meth:`select` takes first), read node by
        node among those with that many GPUs free: on a loaded cluster most have fewer, and the whole array is
        needed only when no node holds the job alone. GPU-proportional places ~10,000 jobs a run on the public
        Synergy configuration; the array cost ~15 us a job, this ~9 (issue 38)."""
        free, shape = self.free, self.shape
        excluded = shape.excluded(gpu_types)
        schedulable = free.schedulable
        for i in np.flatnonzero(free.gpus >= gpus).tolist():
            if schedulable[i] and (excluded is None or not excluded[i]) and need.max_gpus_at(free, shape, i) >= gpus:
                return i
        return None

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
        index = self.index
        placed = allocation.with_resources(tuple([need(index[p.node], len(p.gpus)) for p in allocation.nodes]))
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

        The ledger moves by the differences only; an allocation is built once per shape (the one the job
        held when the pass began is reused, so an unchanged job keeps its very allocation)."""
        old = self.alloc[job_id]
        parts = old.nodes
        index = self.index
        per_c = per_m = None  # a per-GPU vector, uncapped: Need.__call__ inlined
        if type(need) is Need and not need.cap:
            per_c, per_m = need.c, need.m
        if len(parts) == 1:  # most jobs: the same steps as below, without the per-part lists
            p = parts[0]
            idx, k = index[p.node], len(p.gpus)
            c, m = (per_c * k, per_m * k) if per_c is not None and per_m is not None else need(idx, k)
            dc, dm = c - p.cpus, m - p.memory_mb
            if not (dc or dm):
                return True
            cpus, memory = self.free.cpus, self.free.memory_mb
            if dc > cpus[idx] or dm > memory[idx]:
                return False
            cpus[idx] -= dc
            memory[idx] -= dm
            self.alloc[job_id] = self._shaped(job_id, old, ((c, m),))
            return True
        idxs = [index[p.node] for p in parts]
        if per_c is not None and per_m is not None:
            wanted = tuple([(per_c * len(p.gpus), per_m * len(p.gpus)) for p in parts])
        else:
            wanted = tuple([need(idx, len(p.gpus)) for idx, p in zip(idxs, parts, strict=True)])
        held = tuple([(p.cpus, p.memory_mb) for p in parts])
        if wanted == held:
            return True  # the common case on a re-tune: build nothing
        cpus, memory = self.free.cpus, self.free.memory_mb
        for idx, (c, m), (hc, hm) in zip(idxs, wanted, held, strict=True):  # one part per node
            if c - hc > cpus[idx] or m - hm > memory[idx]:
                return False
        for idx, (c, m), (hc, hm) in zip(idxs, wanted, held, strict=True):
            cpus[idx] -= c - hc
            memory[idx] -= m - hm
        self.alloc[job_id] = self._shaped(job_id, old, wanted)
        return True

    def _shaped(self, job_id: str, old: Allocation, per_node: tuple[tuple[int, int], ...]) -> Allocation:
        """``old``'s GPUs with ``per_node`` (CPU cores, memory MB), built once per shape: kept from pass to
        pass while the job holds the same allocation at the start of the pass (everything but the CPU and
        memory of a shape comes from it), for this pass only for a job that held nothing. On the GPUs the
        job held when the pass began, the shape with that allocation's CPU and memory is that very
        allocation (an unchanged job keeps its very allocation)."""
        home = self._home.get(job_id)
        if home is None:
            return old.with_resources(per_node)
        kept = self._kept.shapes_of(job_id, home)
        if old is home or id(old) in kept.ids:  # one of the home GPUs' shapes: no key to build
            same = kept.same
        else:
            gpus = tuple([(p.node, p.gpus) for p in old.nodes])
            same = kept.same if gpus == kept.home_gpus else kept.other.setdefault(gpus, {})
        new = same.get(per_node)
        if new is None:
            new = same[per_node] = old.with_resources(per_node)
            if same is kept.same:
                kept.ids.add(id(new))  # alive while kept holds it, so the id names it alone
        return new


class KeptShapes:
    """The allocations a :class:`Packer` built, per job, for a caller that keeps them from pass to pass.

    A round re-packs the same running jobs to the same shapes: to GPUs only, then back (usually to where
    they were). A job's shapes are kept while it starts the pass on the same allocation object (its
    stages, workers and time-shift are then those of every shape made from it); :meth:`keep` bounds
    them to the jobs still running. Allocations are values: a kept one changes nothing but the work."""

    def __init__(self) -> None:
        self._of: dict[str, _Shapes] = {}

    def shapes_of(self, job_id: str, home: Allocation) -> _Shapes:
        """The shapes built for ``job_id`` from ``home`` (its allocation when the pass began)."""
        entry = self._of.get(job_id)
        if entry is None or entry.home is not home:
            entry = self._of[job_id] = _Shapes(home)
        return entry

    def keep(self, job_ids: Collection[str]) -> None:
        """Forget the shapes of every job but ``job_ids``."""
        for job_id in [j for j in self._of if j not in job_ids]:
            del self._of[job_id]


class _Shapes:
    """One job's kept shapes (:class:`KeptShapes`): on the GPUs of ``home`` by (CPU cores, memory MB) per node
    (``home`` itself for its own), with the ids of those objects (kept alive here, so an id names one of
    them) so that a shape of them is known without building its GPUs' key; and on other GPUs by that key."""

    __slots__ = ("home", "home_gpus", "ids", "other", "same")

    def __init__(self, home: Allocation) -> None:
        self.home = home
        self.home_gpus = tuple([(p.node, p.gpus) for p in home.nodes])
        self.same: dict[tuple[tuple[int, int], ...], Allocation] = {
            tuple([(p.cpus, p.memory_mb) for p in home.nodes]): home}
        self.ids = {id(home)}
        self.other: dict[tuple[object, ...], dict[tuple[tuple[int, int], ...], Allocation]] = {}


# The stripped (no CPU, no memory) per-node resources of an allocation on 1..7 nodes.
_ZEROS = tuple(((0, 0),) * n for n in range(8))
