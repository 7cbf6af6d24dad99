"""How long one training iteration takes for a model, a placement and a cluster.

v0 of the performance model (formulas and sources: docs/performance-model.md):

- compute: the catalog's per-GPU time on the allocation's GPU type (the
  slowest type if mixed), scaled linearly by ``batch_size / reference_batch``;
- communication: one all-reduce of the model's fp32 gradients over the slowest
  tier the placement crosses (:mod:`halyard.emulator.collectives`);
- overlap: ``exposed = max(0, communication - backward_fraction x compute)``.

Link contention, data stalls and time-shifts are not modelled yet.

The simulator calls :meth:`PerformanceModel.iteration_time` at every job start,
so an allocation is reduced to a small hashable shape and results are cached
per instance (there is no module-level mutable state).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from halyard.datamodel import Allocation, Cluster, HalyardError, JobSpec, Tier
from halyard.emulator.catalog import Catalog, ModelProfile, load_catalog
from halyard.emulator.collectives import GBYTE, hierarchical_allreduce_s, ring_allreduce_s


class UnsupportedGPUError(HalyardError, ValueError):
    """The catalog has no compute profile for this model on this GPU type."""


@dataclass(frozen=True, slots=True)
class IterationTime:
    """One iteration of a data-parallel job, in seconds.

    ``communication_s`` is the whole gradient all-reduce; ``exposed_s`` the
    part of it not hidden behind backward compute; ``total_s`` =
    ``compute_s + exposed_s``; ``tier`` the slowest tier the placement crosses.
    """

    compute_s: float
    communication_s: float
    exposed_s: float
    total_s: float
    tier: Tier


# (gpu_type, gpus, fabric_gbyte_s, nic_gbyte_s, rack_index) per node name, and the
# inter-rack bandwidth (uplink / spine oversubscription) per rack index.
_NodeInfo = tuple[str, int, float, float, int]


@dataclass(frozen=True, slots=True)
class _ClusterIndex:
    cluster: Cluster
    nodes: dict[str, _NodeInfo]
    rack_gbyte_s: tuple[float, ...]
    reference_gpu: str  # the cluster's most common GPU type


# The placement reduced to what the cost depends on:
# (gpu types, gpus, nodes, max GPUs on a node, intra-node GB/s, inter-node GB/s, tier).
_Shape = tuple[str | tuple[str, ...], int, int, int, float, float, Tier]


class PerformanceModel:
    """The one performance model the simulator and the emulated agents share."""

    def __init__(self, catalog: Catalog | None = None) -> None:
        self._catalog = catalog if catalog is not None else load_catalog()
        self._models = self._catalog.models
        c = self._catalog.constants
        self._latency = {Tier.GPU: 0.0, Tier.NODE: c.node_latency_s,
                         Tier.RACK: c.rack_latency_s, Tier.SPINE: c.spine_latency_s}
        self._clusters: dict[int, _ClusterIndex] = {}
        self._timings: dict[tuple[str, int, _Shape], IterationTime] = {}
        self._tightest: dict[tuple[int, str, int], _Shape] = {}

    # ----------------------------------------------------------------- catalog
    @property
    def catalog(self) -> Catalog:
        return self._catalog

    def models(self) -> tuple[str, ...]:
        return tuple(self._models)

    def has_model(self, name: str) -> bool:
        return name in self._models

    def profile(self, name: str) -> ModelProfile:
        try:
            return self._models[name]
        except KeyError:
            raise KeyError(f"unknown model {name!r}; the catalog ({self._catalog.source}) has: "
                           f"{', '.join(sorted(self._models))}") from None

    def models_by_task(self) -> dict[str, tuple[str, ...]]:
        out: dict[str, list[str]] = {}
        for name, p in self._models.items():
            out.setdefault(p.task, []).append(name)
        return {task: tuple(names) for task, names in out.items()}

    def supports_gpu(self, model: str, gpu_type: str) -> bool:
        return self.profile(model).compute_time_s(gpu_type) is not None

    # ----------------------------------------------------------------- timing
    def iteration_time(self, spec: JobSpec, allocation: Allocation, cluster: Cluster) -> IterationTime:
        """Compute, all-reduce and exposed time of one iteration on ``allocation``."""
        index = self._clusters.get(id(cluster))
        if index is None or index.cluster is not cluster:
            index = self._index(cluster)
        nodes = index.nodes
        gpu_type: str | None = None
        types: set[str] | None = None
        n = m = kmax = 0
        intra = inter = math.inf
        rack = -1
        multi_rack = False
        for na in allocation.nodes:
            k = len(na.gpus)
            if not k:
                continue
            try:
                t, _, fabric, nic, r = nodes[na.node]
            except KeyError:
                raise KeyError(f"allocation names node {na.node!r}, which is not in cluster "
                               f"{cluster.name!r}") from None
            if gpu_type is None:
                gpu_type = t
            elif t != gpu_type:
                types = (types or {gpu_type}) | {t}
            n += k
            m += 1
            if k > kmax:
                kmax = k
            if k > 1 and fabric < intra:
                intra = fabric
            if nic < inter:
                inter = nic
            if r != rack:
                multi_rack = multi_rack or rack >= 0
                rack = r
        if gpu_type is None:
            raise ValueError("allocation holds no GPUs")
        if multi_rack:
            for r in {nodes[na.node][4] for na in allocation.nodes if na.gpus}:
                inter = min(inter, index.rack_gbyte_s[r])
            tier = Tier.SPINE
        else:
            tier = Tier.GPU if n == 1 else Tier.NODE if m == 1 else Tier.RACK
        shape: _Shape = (
            gpu_type if types is None else tuple(sorted(types)), n, m, kmax,
            intra if kmax > 1 else 0.0, inter if m > 1 else 0.0, tier,
        )
        return self._timing(spec.model, spec.batch_size, shape)

    def ideal_iteration_time(self, spec: JobSpec, gpu_type: str) -> float:
        """Compute-only seconds per iteration (Dally's "ideal" has no communication)."""
        return self._compute_s(self.profile(spec.model), gpu_type, spec.batch_size)

    def consolidated_iteration_time(
        self, spec: JobSpec, cluster: Cluster, gpu_type: str | None = None
    ) -> float:
        """Iteration time on the tightest placement of ``spec.num_gpus`` GPUs of one type.

        Whole nodes of the type are filled, largest first, inside one rack when
        one rack has enough; a job larger than the cluster's GPUs of that type
        is costed as if the cluster had more copies of its largest node.
        """
        index = self._clusters.get(id(cluster))
        if index is None or index.cluster is not cluster:
            index = self._index(cluster)
        gtype = gpu_type or spec.gpu_type or index.reference_gpu
        # The index keeps the cluster alive, so its id() is not reused while cached.
        key = (id(cluster), gtype, spec.num_gpus)
        shape = self._tightest.get(key)
        if shape is None:
            shape = self._tightest[key] = self._tightest_shape(index, gtype, spec.num_gpus)
        return self._timing(spec.model, spec.batch_size, shape).total_s

    def iterations_for(self, spec: JobSpec, cluster: Cluster) -> int:
        """``spec.iterations``, or the iterations whose consolidated run time is ``duration_s``."""
        if spec.iterations > 0:
            return spec.iterations
        if spec.duration_s is None:
            raise ValueError(f"job {spec.job_id}: neither iterations nor duration_s is set")
        return max(1, round(spec.duration_s / self.consolidated_iteration_time(spec, cluster)))

    def restart_cost_s(self, spec: JobSpec) -> float:
        """Seconds a preempted job loses on restart: fixed relaunch + checkpoint read.

        ``restart_fixed_s + gradient_bytes x checkpoint_state_factor / checkpoint_gbyte_s``.
        """
        c = self._catalog.constants
        state_bytes = self.profile(spec.model).gradient_bytes * c.checkpoint_state_factor
        return c.restart_fixed_s + state_bytes / (c.checkpoint_gbyte_s * GBYTE)

    # ----------------------------------------------------------------- internals
    def _timing(self, model: str, batch: int, shape: _Shape) -> IterationTime:
        key = (model, batch, shape)
        hit = self._timings.get(key)
        if hit is not None:
            return hit
        profile = self.profile(model)
        gpu_key, n, m, kmax, intra, inter, tier = shape
        if isinstance(gpu_key, str):
            compute = self._compute_s(profile, gpu_key, batch)
        else:  # mixed GPU types: data parallelism waits for the slowest
            compute = max(self._compute_s(profile, g, batch) for g in gpu_key)
        size = profile.gradient_bytes
        if tier is Tier.GPU:
            comm = 0.0
        elif tier is Tier.NODE:
            comm = ring_allreduce_s(size, n, intra, self._latency[Tier.NODE])
        else:
            comm = hierarchical_allreduce_s(size, kmax, m, intra, inter,
                                            self._latency[Tier.NODE], self._latency[tier])
        exposed = max(0.0, comm - profile.backward_fraction * compute)
        timing = IterationTime(compute_s=compute, communication_s=comm, exposed_s=exposed,
                               total_s=compute + exposed, tier=tier)
        self._timings[key] = timing
        return timing

    def _compute_s(self, profile: ModelProfile, gpu_type: str, batch: int) -> float:
        t = profile.compute_time_s(gpu_type)
        if t is None:
            raise UnsupportedGPUError(
                f"model {profile.name!r} has no compute profile for GPU type {gpu_type!r} "
                f"(profiled: {', '.join(profile.gpu_types)})")
        return t if batch == 0 else t * batch / profile.reference_batch

    def _index(self, cluster: Cluster) -> _ClusterIndex:
        nodes = {nd.name: (nd.gpu_type, nd.gpus, nd.fabric_gbyte_s, nd.nic_gbyte_s, nd.rack_index)
                 for nd in cluster.nodes}
        racks = tuple(r.uplink_gbyte_s / cluster.spine_oversubscription for r in cluster.racks)
        index = _ClusterIndex(cluster=cluster, nodes=nodes, rack_gbyte_s=racks,
                              reference_gpu=cluster.gpu_types[0])
        if id(cluster) in self._clusters:  # defensive: drop shapes of an object that had this id
            self._tightest = {k: v for k, v in self._tightest.items() if k[0] != id(cluster)}
        self._clusters[id(cluster)] = index
        return index

    def _tightest_shape(self, index: _ClusterIndex, gpu_type: str, n: int) -> _Shape:
        of_type = [info for info in index.nodes.values() if info[0] == gpu_type]
        if not of_type:
            raise UnsupportedGPUError(f"cluster {index.cluster.name!r} has no {gpu_type} GPUs "
                                      f"(it has: {', '.join(index.cluster.gpu_types)})")
        of_type.sort(key=lambda i: (-i[1], -i[2], -i[3]))
        best = of_type[0]
        if n == 1:
            return (gpu_type, 1, 1, 1, 0.0, 0.0, Tier.GPU)
        if n <= best[1]:
            return (gpu_type, n, 1, n, best[2], 0.0, Tier.NODE)
        by_rack: dict[int, list[_NodeInfo]] = {}
        for info in of_type:  # already largest first
            by_rack.setdefault(info[4], []).append(info)
        fits = [nodes for nodes in by_rack.values() if sum(i[1] for i in nodes) >= n]
        if fits:
            used = min((_fill(nodes, n) for nodes in fits), key=lambda u: (len(u), -min(i[3] for i in u)))
            return (gpu_type, n, len(used), used[0][1], min(i[2] for i in used),
                    min(i[3] for i in used), Tier.RACK)
        ordered = sorted(by_rack.values(), key=lambda nodes: -sum(i[1] for i in nodes))
        used = _fill([i for nodes in ordered for i in nodes], n)
        have = sum(i[1] for i in used)
        m = len(used) + (math.ceil((n - have) / best[1]) if have < n else 0)
        rack_ids = {i[4] for i in used} if have >= n else set(range(len(index.rack_gbyte_s)))
        inter = min(min(i[3] for i in used), min(index.rack_gbyte_s[r] for r in rack_ids))
        return (gpu_type, n, m, best[1], min(i[2] for i in used), inter, Tier.SPINE)


def _fill(nodes: list[_NodeInfo], n: int) -> list[_NodeInfo]:
    """The first nodes of ``nodes`` (largest first) that together hold ``n`` GPUs."""
    used: list[_NodeInfo] = []
    have = 0
    for info in nodes:
        if have >= n:
            break
        used.append(info)
        have += info[1]
    return used
