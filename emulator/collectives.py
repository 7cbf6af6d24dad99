"""Cost of a gradient all-reduce and how much of it backward compute hides.

Alpha-beta formulas (nccl-tests PERFORMANCE.md, as quoted in
REFERENCE-NUMBERS.md "Collective cost"):

- ring: each rank moves ``2(n-1)/n x S`` bytes, ``t = 2(n-1)/n x S / B + 2(n-1) x alpha``;
- two levels (k GPUs per node, m nodes): reduce-scatter/all-gather inside each
  node, a ring across nodes per shard:
  ``2(k-1)/k x S / B_intra + 2(m-1)/m x (S/k) / B_inter``;
- all-to-all (pairwise exchange; Thakur, Rabenseifner and Gropp, "Optimization of
  collective communication operations in MPICH", IJHPCA 2005, §3.4): each of ``n``
  ranks holding ``S`` bytes sends ``S/n`` to every other rank in ``n-1`` steps,
  ``t = (n-1)/n x S / B + (n-1) x alpha``; with ``k`` ranks per node the bytes to
  the node's other ``k-1`` ranks cross its fabric and those to the other ``n-k``
  leave by its one NIC, which its ``k`` ranks share;
- tree (NCCL's double binary tree): pipelined reduce then broadcast,
  ``t = 2 x S / B + 2 ceil(log2 n) x alpha`` -- the same bandwidth term as a long ring
  but a latency term logarithmic in ``n`` (estimate: NCCL 2.4 release notes and the
  double-binary-tree paper of Sanders, Speck and Traeff, 2009; REFERENCE-NUMBERS has
  no tree figure).

A collective sent as ``messages`` separate all-reduces (DDP buckets, or one per
layer in ASTRA-sim) pays the latency term once per message; the bandwidth term
depends on the total bytes only.

Bandwidths are in GB/s (1e9 bytes/s, the unit of :mod:`halyard.datamodel.cluster`).
"""

from __future__ import annotations

import math

GBYTE = 1e9  # bytes per GB: cluster bandwidths are decimal GB/s
ALGORITHMS = ("ring", "tree", "auto")


def ring_allreduce_s(size_bytes: float, n: int, bandwidth_gbyte_s: float, latency_s: float = 0.0,
                     *, messages: int = 1) -> float:
    """Ring all-reduce of ``size_bytes`` over ``n`` ranks on links of ``bandwidth_gbyte_s``."""
    if n <= 1:
        return 0.0
    return 2.0 * (n - 1) / n * size_bytes / (bandwidth_gbyte_s * GBYTE) + 2.0 * (n - 1) * latency_s * messages


def tree_allreduce_s(size_bytes: float, n: int, bandwidth_gbyte_s: float, latency_s: float = 0.0,
                     *, messages: int = 1) -> float:
    """Double-binary-tree all-reduce: ``2 S / B + 2 ceil(log2 n) x alpha`` per message."""
    if n <= 1:
        return 0.0
    return 2.0 * size_bytes / (bandwidth_gbyte_s * GBYTE) + 2.0 * math.ceil(math.log2(n)) * latency_s * messages


def allreduce_s(algorithm: str, size_bytes: float, n: int, bandwidth_gbyte_s: float, latency_s: float = 0.0,
                *, messages: int = 1) -> float:
    """``ring``, ``tree`` or ``auto`` (the faster of the two, as NCCL's tuner picks)."""
    if algorithm == "ring":
        return ring_allreduce_s(size_bytes, n, bandwidth_gbyte_s, latency_s, messages=messages)
    if algorithm == "tree":
        return tree_allreduce_s(size_bytes, n, bandwidth_gbyte_s, latency_s, messages=messages)
    if algorithm == "auto":
        return min(ring_allreduce_s(size_bytes, n, bandwidth_gbyte_s, latency_s, messages=messages),
                   tree_allreduce_s(size_bytes, n, bandwidth_gbyte_s, latency_s, messages=messages))
    raise ValueError(f"unknown all-reduce algorithm {algorithm!r} (known: {', '.join(ALGORITHMS)})")


def hierarchical_allreduce_s(
    size_bytes: float,
    gpus_per_node: int,
    nodes: int,
    intra_gbyte_s: float,
    nic_gbyte_s: float,
    intra_latency_s: float = 0.0,
    inter_latency_s: float = 0.0,
    *,
    messages: int = 1,
    inter_algorithm: str = "ring",
    rails: bool = False,
) -> float:
    """Two-level all-reduce: reduce-scatter/all-gather inside each node, all-reduce across nodes.

    Each of the ``k = gpus_per_node`` GPUs of a node all-reduces its shard
    ``S/k`` across the ``m = nodes`` nodes. Without ``rails`` the k shards share
    the node's one NIC, so each gets ``B_inter = nic_gbyte_s / k`` and the
    inter-node ring term ``2(m-1)/m x (S/k) / B_inter`` equals
    ``2(m-1)/m x S / nic``. With ``rails`` every GPU has its own NIC of
    ``nic_gbyte_s`` (DGX-style rail-optimised nodes, and ASTRA-sim's
    hierarchical topologies), so the shards cross in parallel.
    """
    k = max(1, gpus_per_node)
    intra = ring_allreduce_s(size_bytes, k, intra_gbyte_s, intra_latency_s, messages=messages) if k > 1 else 0.0
    per_gpu_inter_gbyte_s = nic_gbyte_s if rails else nic_gbyte_s / k
    inter = allreduce_s(inter_algorithm, size_bytes / k, nodes, per_gpu_inter_gbyte_s, inter_latency_s,
                        messages=messages)
    return intra + inter


def all_to_all_s(gpu_bytes: float, gpus: int, gpus_per_node: int, intra_gbyte_s: float, nic_gbyte_s: float,
                 latency_s: float = 0.0) -> float:
    """Pairwise-exchange all-to-all of ``gpu_bytes`` per rank over ``gpus`` ranks, ``gpus_per_node`` of them
    on the node in question: the slower of its fabric part ``(k-1)/n x S / B_intra`` and its NIC part
    ``k (n-k)/n x S / B_nic`` (the k ranks' bytes to other nodes share one NIC), plus ``(n-1)`` latencies."""
    n = gpus
    k = max(1, min(gpus_per_node, n))
    if n <= 1 or gpu_bytes <= 0.0:
        return 0.0
    intra = (k - 1) / n * gpu_bytes / (intra_gbyte_s * GBYTE) if k > 1 else 0.0
    inter = k * (n - k) / n * gpu_bytes / (nic_gbyte_s * GBYTE) if k < n else 0.0
    return max(intra, inter) + (n - 1) * latency_s


def buckets_for(size_bytes: float, bucket_bytes: float) -> int:
    """Number of equal buckets a gradient of ``size_bytes`` is all-reduced in."""
    if bucket_bytes <= 0 or size_bytes <= 0:
        return 1
    return max(1, math.ceil(size_bytes / bucket_bytes))


def exposed_s(comm_s: float, window_s: float, buckets: int = 1) -> float:
    """Communication not hidden behind ``window_s`` of compute, with ``buckets`` messages.

    The B buckets become ready evenly over the overlap window W (bucket i at
    ``i W / B``) and go out one after another, each taking ``C / B``; the last
    all-reduce ends at ``max_i (i W / B + (B - i + 1) C / B)``, so

        exposed = max(C / B, C - (1 - 1/B) W).

    With one bucket nothing overlaps (the gradient is ready only when backward
    ends); as B grows this tends to ``max(0, C - W)``, the perfect-overlap
    bound that v0 used. ``W`` is the backward pass for PyTorch DDP (the
    optimizer step waits for every bucket) or the whole iteration when layer
    i's all-reduce only has to finish before layer i's next forward (ASTRA-sim,
    Dally's simulator).
    """
    if comm_s <= 0.0:
        return 0.0
    b = max(1, buckets)
    return max(comm_s / b, comm_s - (1.0 - 1.0 / b) * window_s)
