"""Cost of one gradient all-reduce: the alpha-beta formulas of nccl-tests.

Source: nccl-tests PERFORMANCE.md, as quoted in REFERENCE-NUMBERS.md
("Collective cost"): a ring all-reduce moves 2(n-1)/n x S bytes per rank,
``t = 2(n-1)/n x S / B + 2(n-1) x alpha``; two levels (k GPUs per node, m
nodes) cost about ``2(k-1)/k x S / B_intra + 2(m-1)/m x (S/k) / B_inter``.
Bandwidths are in GB/s (1e9 bytes/s, the unit of :mod:`halyard.datamodel.cluster`).
"""

from __future__ import annotations

GBYTE = 1e9  # bytes per GB: cluster bandwidths are decimal GB/s


def ring_allreduce_s(size_bytes: float, n: int, bandwidth_gbyte_s: float, latency_s: float = 0.0) -> float:
    """Ring all-reduce of ``size_bytes`` over ``n`` ranks on links of ``bandwidth_gbyte_s``."""
    if n <= 1:
        return 0.0
    return 2.0 * (n - 1) / n * size_bytes / (bandwidth_gbyte_s * GBYTE) + 2.0 * (n - 1) * latency_s


def hierarchical_allreduce_s(
    size_bytes: float,
    gpus_per_node: int,
    nodes: int,
    intra_gbyte_s: float,
    nic_gbyte_s: float,
    intra_latency_s: float = 0.0,
    inter_latency_s: float = 0.0,
) -> float:
    """Two-level all-reduce: reduce-scatter/all-gather inside each node, ring across nodes.

    Each of the ``k = gpus_per_node`` GPUs of a node all-reduces its shard
    ``S/k`` across the ``m = nodes`` nodes; the k shards share the node's NIC,
    so each gets ``B_inter = nic_gbyte_s / k`` and the inter-node term
    ``2(m-1)/m x (S/k) / B_inter`` equals ``2(m-1)/m x S / nic``.
    """
    k = max(1, gpus_per_node)
    intra = ring_allreduce_s(size_bytes, k, intra_gbyte_s, intra_latency_s) if k > 1 else 0.0
    per_gpu_inter_gbyte_s = nic_gbyte_s / k
    inter = ring_allreduce_s(size_bytes / k, nodes, per_gpu_inter_gbyte_s, inter_latency_s)
    return intra + inter
