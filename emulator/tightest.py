"""The cluster as the iteration-time model reads it, and the tightest placement of ``n`` GPUs of one type.

An allocation's cost depends only on a small hashable :data:`Shape`, so the model caches timings per
shape; the consolidated ("ideal") time of a job is the time of the tightest placement's shape.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from halyard.datamodel import Cluster, Tier
from halyard.emulator.compute import UnsupportedGPUError

# (gpu_type, gpus, fabric_gbyte_s, nic_gbyte_s, rack_index) per node name; the inter-rack
# bandwidth is the cluster's (Cluster.inter_rack_gbyte_s: uplinks over the spine, or switch links).
NodeInfo = tuple[str, int, float, float, int]

# The placement reduced to what the cost depends on:
# (gpu types, gpus, nodes, max GPUs on a node, intra-node GB/s, inter-node GB/s, tier).
Shape = tuple[str | tuple[str, ...], int, int, int, float, float, Tier]


@dataclass(frozen=True, slots=True)
class ClusterIndex:
    """What the cost of a placement reads of each node, built once per cluster object."""

    cluster: Cluster
    nodes: dict[str, NodeInfo]
    reference_gpu: str  # the cluster's most common GPU type
    host: dict[str, tuple[float, float]]  # node -> GPU-proportional (CPUs, memory GB) per GPU
    # GPU type -> the largest per-GPU host share among its nodes (the consolidated time's host)
    best_host: dict[str, tuple[float, float]] = field(default_factory=dict)


def index_cluster(cluster: Cluster) -> ClusterIndex:
    nodes = {nd.name: (nd.gpu_type, nd.gpus, nd.fabric_gbyte_s, nd.nic_gbyte_s, nd.rack_index)
             for nd in cluster.nodes}
    host = {nd.name: (nd.cpus / nd.gpus, nd.memory_mb / 1000.0 / nd.gpus) for nd in cluster.nodes if nd.gpus}
    return ClusterIndex(cluster=cluster, nodes=nodes, reference_gpu=cluster.gpu_types[0], host=host)


def tightest_nodes(index: ClusterIndex, gpu_type: str, n: int) -> list[tuple[str, int]] | None:
    """The tightest placement as (node, GPUs) of one type: one node if it fits, else whole
    nodes, largest first, in the rack that needs the fewest, else across racks (most GPUs
    first); None if the cluster has fewer than ``n`` GPUs of the type."""
    of_type = sorted(((name, info) for name, info in index.nodes.items() if info[0] == gpu_type),
                     key=lambda ni: (-ni[1][1], -ni[1][2], -ni[1][3], ni[0]))
    if not of_type or sum(info[1] for _, info in of_type) < n:
        return None
    if n <= of_type[0][1][1]:
        return [(of_type[0][0], n)]
    by_rack: dict[int, list[tuple[str, NodeInfo]]] = {}
    for name, info in of_type:
        by_rack.setdefault(info[4], []).append((name, info))
    candidates = [nodes for nodes in by_rack.values() if sum(i[1] for _, i in nodes) >= n]
    if candidates:
        pool = min(candidates, key=lambda nodes: (len(_fill([i for _, i in nodes], n)), nodes[0][0]))
    else:
        pool = [ni for nodes in sorted(by_rack.values(), key=lambda ns: -sum(i[1] for _, i in ns))
                for ni in nodes]
    out: list[tuple[str, int]] = []
    for name, info in pool:
        if n <= 0:
            break
        out.append((name, min(n, info[1])))
        n -= info[1]
    return out


def tightest_shape(index: ClusterIndex, gpu_type: str, n: int) -> Shape:
    """The :data:`Shape` of the tightest placement of ``n`` GPUs of ``gpu_type``; a job larger than the
    cluster's GPUs of that type is shaped as if the cluster had more copies of its largest node."""
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
    by_rack: dict[int, list[NodeInfo]] = {}
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
    rack_ids = {i[4] for i in used} if have >= n else set(range(len(index.cluster.racks)))
    inter = min(min(i[3] for i in used), index.cluster.inter_rack_gbyte_s(rack_ids))
    return (gpu_type, n, m, best[1], min(i[2] for i in used), inter, Tier.SPINE)


def _fill(nodes: list[NodeInfo], n: int) -> list[NodeInfo]:
    """The first nodes of ``nodes`` (largest first) that together hold ``n`` GPUs."""
    used: list[NodeInfo] = []
    have = 0
    for info in nodes:
        if have >= n:
            break
        used.append(info)
        have += info[1]
    return used
