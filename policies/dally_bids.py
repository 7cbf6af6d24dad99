"""The bids of one ``+reauction`` pass (``Dally._reauction``, policies/dally.py), made cheap without changing one
answer: what each bid is offered, the machine it takes, and what it gives back and takes from the pass's copy of
the free resources.

On loaded Philly (20,000 jobs compressed 8x) a lease end re-auctions about 24 jobs a pass, nine in ten of which take
back the GPUs they held, and the bids were most of ``dally``'s CPU (issue 38). Three exact shortcuts, on with
``Dally.shortcuts`` (tests/test_dally_clustersim.py compares the event logs and plans of both paths on drawn
workloads):

* **Each GPU-type set's offer is kept through the pass** (:class:`KeptOffers`): worked out whole once per set and
  pass (:func:`~halyard.policies.placement.usable_gpus`), then only at the nodes a bid took from
  (:class:`~halyard.policies.dally_staggered.NodeOffer`, the same integer arithmetic on the same numbers); and
  **from one lease end to the next** (:meth:`KeptOffers.carry`), then worked out again only at the nodes whose
  free figures differ from those the last re-auction left (tests/test_dally_bids.py).
* **A bid's machine is found by bisection** (:meth:`KeptOffers.machine`). Algorithm 1 lines 5-8 take the best fit,
  :func:`~halyard.policies.topology.on_machine`: the node with the fewest usable GPUs that still holds the demand,
  the lowest index on ties. With every node's ``usable x nodes + index`` in a sorted list, that node is the first
  key at or above ``demand x nodes`` (a key orders by usable GPUs, then index, as the best fit does), so a bid is
  one ``bisect`` instead of three numpy calls, and a take moves the keys of the nodes it took from.
* **A bid's take is trusted** (:class:`HeldParts`, :meth:`FreeResources.take_parts`). What a bid takes was built
  from this very ledger's offer (the lowest free GPU ids of nodes whose usable GPUs hold it, with their
  GPU-proportional CPU and memory, which ``usable_gpus`` vouches fit), so :meth:`FreeResources.take`'s checks cannot
  fail; and what a lease end gives back is a running job's allocation, taken in the core's ledger, so
  :meth:`FreeResources.give`'s cannot either. Each running job's allocation is kept as node indices and GPU bit
  masks while it holds it, so that whether a bid takes back exactly what it held (``build_allocation`` would build an
  equal allocation: the job keeps it, unbuilt) is one mask comparison per node.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection

import numpy as np

from halyard.datamodel import Allocation, Cluster
from halyard.policies.dally_stages import OfferSummary
from halyard.policies.dally_staggered import NodeOffer
from halyard.policies.facts import ClusterShape, GpuTypes
from halyard.policies.resources import FreeResources, LedgerPart, gpu_bits
from halyard.policies.topology import Picked

Lists = tuple[list[int], list[int], list[int], list[int]]  # the shape's GPUs, CPUs, memory and rack per node
# An offer carried to the next pass: its usable GPUs, best-fit keys (None: not made) and excluded nodes (None: none).
Carried = tuple[np.ndarray, list[int] | None, list[bool] | None]


class KeptOffers:
    """The usable GPUs of each GPU-type set on one ``+reauction`` pass's ``free`` (what ``usable_gpus`` gives), and
    with ``best_fit`` their best-fit keys (module docstring), kept as the pass's bids take GPUs. Only while nothing
    but :meth:`took` changes ``free`` (``+hoard``'s bids do: the pass drops it then).

    ``carried``: the last pass's (:meth:`carry`), whose offers and keys as its bids left them are brought up to this
    ``free`` at the nodes where it differs from that pass's (its free GPUs, CPUs, memory or schedulable flag),
    instead of worked out whole and sorted at every lease end (a fifth of the re-auction on loaded Philly, where a
    lease end's ledger differs at about six of 352 nodes from the last one's; issue 38)."""

    __slots__ = ("best_fit", "carried", "fits", "free", "lists", "misses", "n", "offers", "shape", "summaries")

    def __init__(self, free: FreeResources, shape: ClusterShape, lists: Lists, best_fit: bool,
                 carried: CarriedOffers | None = None) -> None:
        self.free, self.shape, self.lists = free, shape, lists
        # (the last pass's offers, for this one's shape and kind of fit only)
        self.carried = carried if carried is not None and carried.shape is shape and carried.best_fit is best_fit \
            else None
        self.best_fit = best_fit  # (False with ``+first-fit``: cluster-sim's machine, not the best fit)
        self.n = len(lists[0])
        # (a re-auction's bids read only the usable GPUs: neither an offer's sums by rack and in all nor its best
        # node are kept, KeptOffer's upkeep being half of the kept offers' cost)
        self.offers: dict[GpuTypes, NodeOffer] = {}
        self.fits: dict[GpuTypes, list[int]] = {}  # GPU-type set -> sorted ``usable x n + index`` of every node
        self.summaries: dict[GpuTypes, OfferSummary] = {}  # GPU-type set -> its offer's summary, until a take
        self.misses: dict[tuple[GpuTypes, int], tuple[float, float]] = {}  # :meth:`miss`'s, until a take

    def of(self, types: GpuTypes) -> np.ndarray:
        """``usable_gpus(free, shape, types)`` now (read it before the next take)."""
        offer = self.offers.get(types)
        if offer is None:
            kept = None if self.carried is None else self.carried.offers.pop(types, None)
            if kept is None:
                offer = self.offers[types] = NodeOffer(self.free, self.shape, types, self.lists)
            else:
                offer = self.offers[types] = self._brought(types, *kept)
        return offer.avail

    def _brought(self, types: GpuTypes, avail: np.ndarray, keys: list[int] | None,
                 excluded: list[bool] | None) -> NodeOffer:
        """The carried offer of ``types`` (``avail``, and its best-fit keys if it had them) brought up to ``free``:
        worked out again, with :meth:`NodeOffer.usable_at`'s arithmetic, at every node whose figures differ from
        those the carried pass left (so it equals ``usable_gpus`` of ``free``, and the keys its sorted keys)."""
        carried, free, n = self.carried, self.free, self.n
        assert carried is not None
        offer = NodeOffer.made(free, self.lists, excluded, avail)
        gpus, cpus, memory_mb, schedulable = carried.ledger
        changed = np.flatnonzero((free.gpus != gpus) | (free.cpus != cpus) | (free.memory_mb != memory_mb)
                                 | (free.schedulable != schedulable)).tolist()
        for index in changed:
            _renew(offer, keys, n, index, int(free.gpus[index]), int(free.cpus[index]), int(free.memory_mb[index]))
        if keys is not None:
            self.fits[types] = keys
        return offer

    def carry(self) -> CarriedOffers:
        """This pass's offers and keys as its bids left them, with the ledger they are of (a copy of ``free``'s
        figures now), for the next pass's :class:`KeptOffers`; they are the next pass's to change."""
        free = self.free
        return CarriedOffers(self.shape, self.best_fit,
                             {types: (offer.avail, self.fits.get(types), offer.excluded)
                              for types, offer in self.offers.items()},
                             (free.gpus.copy(), free.cpus.copy(), free.memory_mb.copy(), free.schedulable.copy()))

    def machine(self, types: GpuTypes, demand: int) -> Picked | None:
        """``on_machine(self.of(types), demand)``: the first node of the fewest usable GPUs at least ``demand``."""
        keys = self.fits.get(types)
        if keys is None:
            avail = self.of(types)
            keys = self.fits.get(types)  # (an offer carried from the last pass brings its keys)
            if keys is None:
                keys = self.fits[types] = np.sort(avail.astype(np.int64) * self.n + np.arange(self.n)).tolist()
        k = bisect.bisect_left(keys, demand * self.n)
        return None if k == len(keys) else [(keys[k] % self.n, demand)]

    def summary(self, types: GpuTypes) -> OfferSummary:
        """The :class:`OfferSummary` of :meth:`of` ``types`` now: the waiting jobs a re-auction rejects one after
        another, on the same offer, share its largest node and rack and its usable GPUs."""
        summary = self.summaries.get(types)
        if summary is None:
            summary = self.summaries[types] = OfferSummary(self.of(types), self.shape)
        return summary

    def miss(self, types: GpuTypes, demand: int, timers: tuple[float, float]) -> tuple[float, float]:
        """A bid of ``demand`` GPUs of ``types`` found no machine and its delay timers are ``timers``: so will every
        such bid until the next take (returns ``timers``). Between two takes nothing a bid reads changes: the
        offer changes only with a take, and the timers (``DelayScheduling.job_timers``: of the demand, the
        pass's acceptances of it and the largest node and rack of the types) only with an acceptance, which
        takes. The waiting jobs of a loaded re-auction, rejected one after another, then skip both."""
        self.misses[(types, demand)] = timers
        return timers

    def missed(self, types: GpuTypes, demand: int) -> tuple[float, float] | None:
        """The timers of :meth:`miss` for ``demand`` and ``types`` since the last take (None: ask)."""
        return self.misses.get((types, demand))

    def took(self, picked: Picked) -> None:
        """A bid took ``picked``'s GPUs (and their CPU and memory) from ``free``."""
        free, n = self.free, self.n
        self.summaries.clear()
        self.misses.clear()
        # (each node's free GPUs, CPUs and memory read once, for every offer)
        nodes = [(index, int(free.gpus[index]), int(free.cpus[index]), int(free.memory_mb[index]))
                 for index, _ in picked]
        for types, offer in self.offers.items():
            keys = self.fits.get(types)
            for index, gpus, cpus, memory_mb in nodes:
                _renew(offer, keys, n, index, gpus, cpus, memory_mb)


def _renew(offer: NodeOffer, keys: list[int] | None, n: int, index: int, gpus: int, cpus: int, memory_mb: int) -> None:
    """Node ``index``'s usable GPUs in ``offer`` with these free figures (:meth:`NodeOffer.usable_at`), and its
    best-fit key (``usable x n + index``) moved with them in the sorted ``keys`` (None: the offer has none)."""
    avail = offer.avail
    was = int(avail[index])
    now = offer.usable_at(index, gpus, cpus, memory_mb)
    if now != was:
        avail[index] = now
        if keys is not None:
            del keys[bisect.bisect_left(keys, was * n + index)]
            bisect.insort(keys, now * n + index)


class CarriedOffers:
    """A re-auction's offers as its bids left them (:meth:`KeptOffers.carry`): GPU-type set -> (usable GPUs, best-fit
    keys or None, excluded nodes), and the ledger figures they are of (free GPUs, CPUs, memory, schedulable flags)."""

    __slots__ = ("best_fit", "ledger", "offers", "shape")

    def __init__(self, shape: ClusterShape, best_fit: bool, offers: dict[GpuTypes, Carried],
                 ledger: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]) -> None:
        self.shape, self.best_fit, self.offers, self.ledger = shape, best_fit, offers, ledger


class HeldParts:
    """Each running job's allocation as ledger parts (:data:`~halyard.policies.resources.LedgerPart`), kept while
    the job holds that very allocation object on that cluster (a memo, not learning), and whether it is what
    ``build_allocation`` builds on its nodes: no stages, time-shift or logical workers, GPU-proportional CPU and
    memory, the GPU ids in increasing order. ``below[i]``: the bits of the part's GPU ids up to its highest."""

    __slots__ = ("_cluster", "_kept")

    def __init__(self) -> None:
        self._cluster: Cluster | None = None
        # job id -> (allocation, its parts, the parts' ``below`` masks or None when not as built)
        self._kept: dict[str, tuple[Allocation, tuple[LedgerPart, ...], tuple[int, ...] | None]] = {}

    def of(self, cluster: Cluster, job_id: str, allocation: Allocation,
           ) -> tuple[tuple[LedgerPart, ...], tuple[int, ...] | None]:
        """The allocation's parts and, if it is as built, each part's ``below`` mask (else None)."""
        if cluster is not self._cluster:
            self._cluster, self._kept = cluster, {}
        kept = self._kept.get(job_id)
        if kept is None or kept[0] is not allocation:
            kept = self._kept[job_id] = (allocation, *_parts(cluster, allocation))
        return kept[1], kept[2]

    def prune(self, running: Collection[str]) -> None:
        """Forget the jobs not in ``running`` (job ids) once they are most of the memo."""
        if len(self._kept) > 2 * len(running) + PRUNE_SLACK:
            self._kept = {k: v for k, v in self._kept.items() if k in running}

    @staticmethod
    def builds_as(free: FreeResources, picked: Picked, parts: tuple[LedgerPart, ...],
                  below: tuple[int, ...] | None) -> bool:
        """Whether ``build_allocation(free, picked)`` equals the allocation of ``parts`` (as built: ``below`` not
        None): the same nodes in the same order with the same GPU counts, and on each node the lowest free GPU ids
        are the part's, i.e. the free GPUs up to the part's highest id are exactly its GPUs."""
        if below is None or len(parts) != len(picked):
            return False
        mask = free.gpu_mask
        for (index, k), (i, gpus, _, _, bits), low in zip(picked, parts, below, strict=True):
            if index != i or k != gpus or mask[i] & low != bits:
                return False
        return True


PRUNE_SLACK = 256  # HeldParts keeps entries of jobs no longer running until they outnumber the running twice over


def parts_of(picked: Picked, allocation: Allocation) -> tuple[LedgerPart, ...]:
    """The ledger parts of ``allocation`` built on ``picked`` (``build_allocation``'s nodes, in its order)."""
    return tuple((index, k, part.cpus, part.memory_mb, gpu_bits(part.gpus))
                 for (index, k), part in zip(picked, allocation.nodes, strict=True))


def _parts(cluster: Cluster, allocation: Allocation) -> tuple[tuple[LedgerPart, ...], tuple[int, ...] | None]:
    """:meth:`HeldParts.of` worked out."""
    parts = []
    below: list[int] | None = []
    if (allocation.stages or allocation.has_time_shift or allocation.time_shift_s or allocation.time_shift_period_s
            or allocation.time_shift_epoch_s):
        below = None
    for part in allocation.nodes:
        node = cluster.node(part.node)
        gpus = part.gpus
        parts.append((node.index, len(gpus), part.cpus, part.memory_mb, gpu_bits(gpus)))
        if below is not None:
            if (part.workers or list(gpus) != sorted(gpus) or (gpus and (gpus[0] < 0 or gpus[-1] >= node.gpus))
                    or part.cpus != node.proportional_cpus(len(gpus))
                    or part.memory_mb != node.proportional_memory_mb(len(gpus))):
                below = None
            else:
                below.append((1 << (gpus[-1] + 1)) - 1 if gpus else 0)
    return tuple(parts), None if below is None else tuple(below)
