"""Placements at a chosen network tier: one machine, one rack, or across the network.

Dally (§4.3.2) and the Tiresias/Gandiva baselines need more than "the tightest
placement": they ask whether a job fits on one machine, on one rack, or only
across racks, and they take placements that are deliberately *not* the
tightest (Gandiva is network-agnostic). These helpers work on the usable GPUs
per node (:func:`halyard.policies.placement.usable_gpus`: free GPUs that can be
given with their GPU-proportional CPU and memory) and return
``[(node index, GPUs), ...]`` for :func:`halyard.policies.placement.build_allocation`.
"""

from __future__ import annotations

import enum
import math

import numpy as np

from halyard.datamodel import Allocation, Cluster
from halyard.policies.facts import ClusterShape
from halyard.policies.placement import fill

Picked = list[tuple[int, int]]


class Level(enum.IntEnum):
    """Dally's consolidation levels, near to far (paper §1: machine, rack, network)."""

    MACHINE = 0
    RACK = 1
    NETWORK = 2


def on_machine(avail: np.ndarray, gpus: int) -> Picked | None:
    """Best fit on one machine: the node with the fewest usable GPUs that still holds ``gpus``.

    Best fit keeps larger holes for larger jobs (Dally's reference simulator
    takes "the smallest consolidated slot available").
    """
    if avail.dtype == np.int64:  # (usable_gpus' arrays: a where and an argmin, cheaper than indexing the fits)
        masked = np.where(avail >= gpus, avail, _NO_MACHINE)
        best = int(masked.argmin())  # argmin: the first (lowest index) on ties, as below
        return None if masked[best] == _NO_MACHINE else [(best, gpus)]
    fits = np.flatnonzero(avail >= gpus)
    if not fits.size:
        return None
    return [(int(fits[np.argmin(avail[fits])]), gpus)]  # argmin: the first (lowest index) on ties


_NO_MACHINE = np.iinfo(np.int64).max  # on_machine: stands for the nodes that do not fit (more than any node's GPUs)


def on_rack(avail: np.ndarray, shape: ClusterShape, gpus: int) -> Picked | None:
    """All ``gpus`` inside one rack: the rack needing the fewest nodes, then the fullest (best fit).

    Inside the rack, nodes with the most usable GPUs are filled first.
    """
    rack_free = np.bincount(shape.rack, weights=avail, minlength=shape.n_racks)
    candidates = np.flatnonzero(rack_free >= gpus)
    if len(candidates) > RACKS_ONE_BY_ONE:
        return _on_rack_at_once(avail, shape, gpus, rack_free, candidates)
    best: tuple[int, float, int] | None = None
    chosen: Picked | None = None
    for r in candidates:
        members = shape.rack_nodes[r]
        picked = fill(members, avail[members], gpus)
        key = (len(picked), float(rack_free[r]), int(r))
        if best is None or key < best:
            best, chosen = key, picked
    return chosen


# on_rack fills each candidate rack one by one up to this many candidates, else ranks them all at once
# (_on_rack_at_once: the same choice; filling every rack of a 44-rack cluster for every multi-machine offer was a
# tenth of +staggered's time on loaded Philly).
RACKS_ONE_BY_ONE = 2


def _on_rack_at_once(avail: np.ndarray, shape: ClusterShape, gpus: int, rack_free: np.ndarray,
                     candidates: np.ndarray) -> Picked:
    """:func:`on_rack`'s choice among ``candidates`` (racks with at least ``gpus`` usable) without filling each:
    the nodes :func:`fill` takes in a rack are the fewest whose usable GPUs, largest first, reach ``gpus`` (a
    cumulative sum over each rack's sorted row), so the rack of the least (nodes, free GPUs, index) is found
    from arrays and only it is filled."""
    rows = np.append(avail, 0)[shape.rack_matrix[candidates]]
    rows = -np.sort(-rows, axis=1)
    nodes = (np.cumsum(rows, axis=1) < gpus).sum(axis=1) + 1
    best = int(candidates[np.lexsort((candidates, rack_free[candidates], nodes))[0]])
    members = shape.rack_nodes[best]
    return fill(members, avail[members], gpus)


def on_network(avail: np.ndarray, shape: ClusterShape, gpus: int) -> Picked | None:
    """``gpus`` from anywhere: the racks with the most usable GPUs first, fullest nodes first.

    That crosses as few racks as the free GPUs allow.
    """
    if int(avail.sum()) < gpus:
        return None
    rack_free = np.bincount(shape.rack, weights=avail, minlength=shape.n_racks)
    # Sort nodes by (rack free desc, rack index, node free desc, node index).
    order = np.lexsort((np.arange(avail.size), -avail, shape.rack, -rack_free[shape.rack]))
    return fill(order, avail[order], gpus, presorted=True)


def first_fit(avail: np.ndarray, gpus: int) -> Picked | None:
    """Network-agnostic: take usable GPUs node by node in index order (Gandiva, Tiresias' low-skew jobs)."""
    if int(avail.sum()) < gpus:
        return None
    picked: Picked = []
    left = gpus
    for i in np.flatnonzero(avail > 0):
        take = min(int(avail[i]), left)
        picked.append((int(i), take))
        left -= take
        if left == 0:
            break
    return picked


def level_of(picked: Picked, shape: ClusterShape) -> Level:
    """The consolidation level of a placement."""
    if len(picked) == 1:
        return Level.MACHINE
    racks = {int(shape.rack[i]) for i, _ in picked}
    return Level.RACK if len(racks) == 1 else Level.NETWORK


def spread(allocation: Allocation, cluster: Cluster) -> tuple[int, int]:
    """(racks, nodes) an allocation touches: smaller is more consolidated."""
    nodes = [cluster.node(p.node) for p in allocation.nodes if p.gpus]
    return len({n.rack_index for n in nodes}), len(nodes)


def tightest_spread(gpus: int, node_gpus: int, rack_gpus: int) -> tuple[int, int]:
    """(racks, nodes) of the tightest conceivable placement of ``gpus``."""
    return max(1, math.ceil(gpus / max(rack_gpus, 1))), max(1, math.ceil(gpus / max(node_gpus, 1)))
