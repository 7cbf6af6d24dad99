"""``+staggered``'s auctions (policies/dally_clustersim.py), made incremental: the same winners, in the
same order, with the same placements, at a cost that no longer grows as released x waiting offers.

Straightforwardly (:func:`auctions_one_by_one`, the rule as its module docstring states it) every release
of a lease end is an auction in which every waiting job (and with ``+hoard`` every running one) bids in
increasing Nw_sens: a pass with R releases and W waiting jobs makes R x W offers, each an Algorithm 1
evaluation over the free GPUs. The 500-job workloads of docs/reproductions/dally-reproduction.md have
hundreds waiting at every lease end. :class:`Auctions` gives the same answers from three facts:

* **Whether an offer is accepted needs three numbers of the free GPUs.** Algorithm 1
  (:func:`~halyard.policies.dally_stages.delay_decision`) takes one machine when some node has the job's
  demand free, else (once its starvation reaches T_Mc) one rack when some rack has it, else (once it
  reaches T_Rk too) any GPUs when the cluster has it. With the usable GPUs of a GPU-type set summed as
  (largest node, largest rack, total), an offer's answer is a comparison; Algorithm 1 itself runs only
  for the offers that are accepted, to pick the GPUs.
* **The jobs that can accept form few groups.** Bidders are grouped by (role, GPU types, demand); in a
  group the answer depends on the job's starvation alone (zero for a released job and for a running
  one's mid-lease bid), so the first bidder of a group that accepts is found without asking the others.
* **Between two acceptances nothing changes.** An auction is a walk in Nw_sens order in which only an
  acceptance takes GPUs and (through the auto-tuner) moves that demand's timers, so the next
  acceptance is the earliest, over the groups, of each group's first accepting bidder after the
  last one. The offers in between are rejections, and a rejection changes nothing (no state, no plan).

``Dally.shortcuts`` off runs :func:`auctions_one_by_one` instead; tests/test_dally_clustersim.py runs both
on several drawn workloads and compares their event logs.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
from sortedcontainers import SortedList

from halyard.datamodel import Allocation
from halyard.policies.dally_stages import delay_decision, starvation
from halyard.policies.dally_timers import ACCEPTED_KEY
from halyard.policies.facts import ClusterShape, GpuTypes
from halyard.policies.passstate import PassState
from halyard.policies.placement import build_allocation, usable_gpus
from halyard.policies.resources import FreeResources
from halyard.policies.topology import Level, Picked, on_machine
from halyard.policies.view import ClusterView, JobInfo, allocation_of

if TYPE_CHECKING:
    from halyard.policies.dally import Dally

Key = tuple[float, float, int]  # (Nw_sens, submission, arrival): the order of the bids
Entry = tuple[Key, str]  # a bidder in its group: its key and its job id
# The roles a bidder bids in: a job waiting since before the pass (starvation as Algorithm 1 lines 1-2),
# a lease-ended job released in this pass (starvation zero), a running job's mid-lease bid (+hoard).
PENDING, RELEASED, HOLDING = "pending", "released", "holding"


def auctions_one_by_one(policy: Dally, view: ClusterView, state: PassState, ended: set[str],
                        releases: list[JobInfo], key_of: dict[str, Key], free: FreeResources,
                        ) -> dict[str, Allocation]:
    """The rule as stated (policies/dally_clustersim.py): after each release every bidder, in increasing
    Nw_sens, is offered what is free. Takes from ``free``; returns job id -> its placement."""
    from halyard.policies.dally_clustersim import HoardedGpus  # (it imports this module)

    def key(job: JobInfo) -> Key:
        return key_of[job.job_id]

    waiting: list[JobInfo] = list(view.pending)
    holding = dict(view.running)  # the jobs that hold GPUs now: they bid only with +hoard
    placed: dict[str, Allocation] = {}
    for released in releases:
        free.give(allocation_of(released))
        del holding[released.job_id]
        waiting.append(released)
        bids = sorted([*waiting, *(holding.values() if policy.hoard is not None else ())], key=key)
        for job in bids:
            if job.job_id in holding:
                HoardedGpus.bid_one(policy, view, state, job, free)
                continue
            if free.total_gpus < job.spec.num_gpus:
                continue
            decision, _, wait_s, _, _ = policy._bid(view, job, free, state, job.job_id in ended)
            if decision is None:
                continue
            picked, level = decision
            allocation = build_allocation(free, picked)
            free.take(allocation)
            policy.delay.accept(view, job, level, wait_s, state)
            placed[job.job_id] = allocation
            waiting.remove(job)
            holding[job.job_id] = job
    return placed


class NodeOffer:
    """:func:`~halyard.policies.placement.usable_gpus` of one GPU-type set on a ``free`` that changes a few
    nodes at a time: :meth:`update` works out again only the nodes given or taken, with the same integer
    arithmetic on the same numbers (so it equals the whole offer worked out afresh)."""

    __slots__ = ("_excluded", "_shape", "avail", "free")

    def __init__(self, free: FreeResources, shape: ClusterShape, types: GpuTypes,
                 lists: tuple[list[int], list[int], list[int], list[int]]) -> None:
        self.free = free
        self.avail = usable_gpus(free, shape, types)
        self._shape = lists  # the shape's GPUs, CPUs, memory and rack per node, as lists
        excluded = shape.excluded(types)
        self._excluded = None if excluded is None else excluded.tolist()

    @classmethod
    def made(cls, free: FreeResources, lists: tuple[list[int], list[int], list[int], list[int]],
             excluded: list[bool] | None, avail: np.ndarray) -> NodeOffer:
        """An offer on ``free`` whose usable GPUs are ``avail`` and excluded nodes ``excluded`` (another offer's of
        the same GPU types and shape, to bring up to ``free``: policies/dally_bids.py ``KeptOffers``)."""
        offer = cls.__new__(cls)
        offer.free, offer.avail, offer._shape, offer._excluded = free, avail, lists, excluded
        return offer

    @property
    def excluded(self) -> list[bool] | None:
        """The nodes not of the offer's GPU types (None: none)."""
        return self._excluded

    def update(self, nodes: list[int]) -> None:
        """``free`` changed at ``nodes`` (indices): their usable GPUs as usable_gpus works them out."""
        free, avail = self.free, self.avail
        for i in nodes:
            avail[i] = self.usable_at(i, int(free.gpus[i]), int(free.cpus[i]), int(free.memory_mb[i]))

    def usable_at(self, i: int, gpus_free: int, cpus_free: int, memory_free: int) -> int:
        """Node ``i``'s usable GPUs with these free (usable_gpus' arithmetic)."""
        gpus_of, cpus_of, memory_of, _ = self._shape
        gpus = gpus_of[i]
        by_cpu = ((cpus_free + 1) * gpus - 1) // max(cpus_of[i], 1)
        by_mem = ((memory_free + 1) * gpus - 1) // max(memory_of[i], 1)
        if not self.free.schedulable[i] or (self._excluded is not None and self._excluded[i]):
            return 0
        return min(gpus_free, by_cpu, by_mem)


class KeptOffer(NodeOffer):
    """A :class:`NodeOffer` with its sums by rack and in all, and its best node and rack, kept as it changes
    (``tests/test_dally_clustersim.py`` compares the two paths' event logs)."""

    __slots__ = ("_at_largest", "_best_rack", "_largest", "racks", "total")

    def __init__(self, free: FreeResources, shape: ClusterShape, types: GpuTypes,
                 lists: tuple[list[int], list[int], list[int], list[int]]) -> None:
        super().__init__(free, shape, types, lists)
        self.racks = np.bincount(shape.rack, weights=self.avail, minlength=shape.n_racks).astype(np.int64).tolist()
        self.total = int(self.avail.sum())
        self._largest: int | None = None  # the best node's usable GPUs, None: to ask
        self._at_largest = 0  # how many nodes have that many (while _largest is known)
        self._best_rack: int | None = None  # the best rack's

    def update(self, nodes: list[int]) -> None:
        """``free`` changed at ``nodes`` (indices): their usable GPUs as usable_gpus works them out, and the sums."""
        free, avail = self.free, self.avail
        rack_of = self._shape[3]
        for i in nodes:
            usable = self.usable_at(i, int(free.gpus[i]), int(free.cpus[i]), int(free.memory_mb[i]))
            before = int(avail[i])
            if usable != before:
                avail[i] = usable
                rack = rack_of[i]
                held = self.racks[rack]
                self.racks[rack] = held + usable - before
                self.total += usable - before
                # a new best node (rack), or the best one shrank (another may be as large): asked again
                self._node_changed(before, usable)
                self._best_rack = _best_after(self._best_rack, held, held + usable - before)

    def _node_changed(self, before: int, after: int) -> None:
        """A node's usable GPUs went from ``before`` to ``after``: the best node's, and how many nodes have it."""
        largest = self._largest
        if largest is None:
            return
        if after > largest:
            self._largest, self._at_largest = after, 1
        elif after == largest:
            self._at_largest += 1
        elif before == largest:
            self._at_largest -= 1
            if not self._at_largest:  # the last of the best shrank: asked again
                self._largest = None

    def summary(self) -> tuple[int, int, int]:
        """(usable GPUs of the best node, of the best rack, in all)."""
        if self._largest is None:
            self._largest = int(self.avail.max(initial=0))
            self._at_largest = int(np.count_nonzero(self.avail == self._largest))
        if self._best_rack is None:
            self._best_rack = max(self.racks, default=0)
        return self._largest, self._best_rack, self.total


def _best_after(best: int | None, before: int, after: int) -> int | None:
    """The largest of some counts (None: unknown) once one of them went from ``before`` to ``after``."""
    if best is None or after > best:
        return None if best is None else after
    return None if before == best and after < before else best


class Auctions:
    """One lease end's auctions, incrementally (module docstring): :meth:`run` gives what
    :func:`auctions_one_by_one` gives, offering Algorithm 1 only to the bidders that accept."""

    def __init__(self, policy: Dally, view: ClusterView, state: PassState, key_of: dict[str, Key],
                 free: FreeResources) -> None:
        self.policy, self.view, self.state, self.key_of, self.free = policy, view, state, key_of, free
        self.groups: dict[tuple[str, GpuTypes, int], SortedList] = {}
        self.jobs: dict[str, JobInfo] = {}
        self.waits: dict[str, float] = {}  # job id -> its starvation in its role
        self.longest: dict[tuple[str, GpuTypes, int], float] = {}  # group -> the longest wait ever in it
        self.sums: dict[GpuTypes, tuple[int, int, int]] = {}  # types -> (node, rack, total) usable free
        # types -> the usable GPUs of ``free`` (:class:`KeptOffer`), kept as ``free`` changes: a give or a take
        # rewrites only its nodes (:meth:`changed`), where recomputing the whole offer after every release and
        # every acceptance was a quarter of +staggered's time on 20,000 Philly jobs compressed 8x
        self.offers: dict[GpuTypes, KeptOffer] = {}
        self.lists: tuple[list[int], list[int], list[int], list[int]] | None = None  # (KeptOffer's shape lists)
        self.timers: dict[tuple[str, GpuTypes, int], tuple[int, float, float]] = {}
        self.accepted: dict[int, int] = state.setdefault(ACCEPTED_KEY, dict)
        self.won: dict[str, list[Allocation]] = {}
        self.free_total = free.total_gpus  # free.total_gpus, kept by changed()

    @staticmethod
    def applies(key_of: dict[str, Key]) -> bool:
        """Whether the keys order totally (a NaN Nw_sens does not: the walk then goes one by one)."""
        return not any(math.isnan(k[0]) for k in key_of.values())

    # ------------------------------------------------------------------ the groups
    def add(self, role: str, job: JobInfo, wait_s: float) -> None:
        types = self.policy.delay.statics.of(self.view, job).gpu_types
        group = (role, types, job.spec.num_gpus)
        members = self.groups.get(group)
        if members is None:
            members = self.groups[group] = SortedList()
        members.add((self.key_of[job.job_id], job.job_id))
        self.jobs[job.job_id] = job
        self.waits[job.job_id] = wait_s
        self.longest[group] = max(self.longest.get(group, -math.inf), wait_s)

    def add_all(self, role: str, bidders: list[tuple[JobInfo, float]]) -> None:
        """:meth:`add` for many bidders at once (each group sorted once)."""
        statics, view, key_of = self.policy.delay.statics, self.view, self.key_of
        grouped: dict[tuple[str, GpuTypes, int], list[Entry]] = {}
        for job, wait_s in bidders:
            group = (role, statics.of(view, job).gpu_types, job.spec.num_gpus)
            grouped.setdefault(group, []).append((key_of[job.job_id], job.job_id))
            self.jobs[job.job_id] = job
            self.waits[job.job_id] = wait_s
            self.longest[group] = max(self.longest.get(group, -math.inf), wait_s)
        for group, entries in grouped.items():
            members = self.groups.get(group)
            if members is None:
                self.groups[group] = SortedList(entries)
            else:
                members.update(entries)

    def remove(self, role: str, job: JobInfo) -> None:
        group = (role, self.policy.delay.statics.of(self.view, job).gpu_types, job.spec.num_gpus)
        self.groups[group].discard((self.key_of[job.job_id], job.job_id))

    def summary(self, types: GpuTypes) -> tuple[int, int, int]:
        """The usable free GPUs of ``types``: on the best node, in the best rack, in all (kept until
        ``free`` changes)."""
        found = self.sums.get(types)
        if found is None:
            found = self.sums[types] = self.kept(types).summary()
        return found

    def threshold(self, group: tuple[str, GpuTypes, int], job: JobInfo) -> float | None:
        """The least starvation at which a bidder of ``group`` accepts what is free now (Algorithm 1:
        a machine at any starvation, a rack from T_Mc, any GPUs from T_Rk), or None: nobody does."""
        _, types, demand = group
        machine, rack, total = self.summary(types)
        if machine >= demand:
            return -math.inf
        if total < demand:
            return None
        count = self.accepted.get(demand, 0)
        kept = self.timers.get(group)
        if kept is None or kept[0] != count:  # the timers move only with this demand's acceptances
            kept = self.timers[group] = (count, *self.policy.delay.job_timers(self.view, job, self.state))
        _, t_mc, t_rk = kept
        return t_mc if rack >= demand else max(t_mc, t_rk)

    def kept(self, types: GpuTypes) -> KeptOffer:
        """The kept offer of ``types`` (:meth:`changed` keeps it equal to ``usable_gpus(free, shape, types)``)."""
        offer = self.offers.get(types)
        if offer is None:
            if self.lists is None:
                shape = self.view.shape
                self.lists = (shape.gpus.tolist(), shape.cpus.tolist(), shape.memory_mb.tolist(), shape.rack.tolist())
            offer = self.offers[types] = KeptOffer(self.free, self.view.shape, types, self.lists)
        return offer

    def changed(self, allocation: Allocation, *, given: bool) -> None:
        """``allocation`` was given back to (``given``) or taken from ``free``: its nodes' offers are worked out
        again, and the free GPU count moves by its GPUs."""
        self.sums.clear()
        gpus = sum(len(part.gpus) for part in allocation.nodes)
        self.free_total += gpus if given else -gpus
        if self.offers:
            node = self.view.cluster.node
            nodes = [node(part.node).index for part in allocation.nodes]
            for offer in self.offers.values():
                offer.update(nodes)

    def decide(self, job: JobInfo, released: bool) -> tuple[tuple[Picked, Level] | None, float]:
        """Algorithm 1 for one bid (what :meth:`Dally._bid` answers: a released job's starvation is zero), on the
        kept offer; the timers are asked only when no machine fits (lines 5-9 need none)."""
        policy, view = self.policy, self.view
        delay = policy.delay
        demand = job.spec.num_gpus
        avail = self.kept(delay.statics.of(view, job).gpu_types).avail
        wait_s = 0.0 if released else starvation(view, job)
        ff = delay.first_fit
        picked = on_machine(avail, demand) if ff is None else ff.on_machine(avail, view.shape, demand)
        if picked is not None:
            return (picked, Level.MACHINE), wait_s
        t_mc, t_rk = delay.job_timers(view, job, self.state)
        return delay_decision(avail, view.shape, demand, wait_s, t_mc, t_rk, ff), wait_s

    def retakes(self, job: JobInfo) -> Allocation | None:
        """A released ``job`` that bids alone (nobody else bids in its auction) and would take back exactly what it
        gives back: its own allocation, else None. What the auction would do (:meth:`run`): give its GPUs back,
        offer them (the best fit on one machine, :func:`on_machine`: the node with the fewest usable GPUs that
        holds the demand, the lowest index on ties), build the allocation (the lowest free GPU ids, CPUs and
        memory in proportion) and take it, which leaves ``free`` and the offers as they were when the placement
        is its own node and its own GPUs and its allocation is what build_allocation makes of them. The
        acceptance is recorded by the caller. Most releases of a loaded trace are such (one a job in a cluster
        where nobody waits); working each through the auction was most of +staggered's time."""
        if self.policy.delay.first_fit is not None:
            return None
        own = allocation_of(job)
        if (len(own.nodes) != 1 or own.stages or own.has_time_shift or own.time_shift_period_s
                or own.time_shift_epoch_s):
            return None
        part = own.nodes[0]
        demand = job.spec.num_gpus
        if part.workers or len(part.gpus) != demand:
            return None
        cluster, free = self.view.cluster, self.free
        node = cluster.node(part.node)
        i = node.index
        if part.cpus != node.proportional_cpus(demand) or part.memory_mb != node.proportional_memory_mb(demand):
            return None
        mask = free.gpu_mask[i]
        bits = 0
        for g in part.gpus:
            bits |= 1 << g
        if mask & bits:
            return None
        mask |= bits  # the node's free GPUs once it gave its own back: it takes the lowest ``demand`` of them
        if tuple([g for g in range(node.gpus) if mask >> g & 1][:demand]) != part.gpus:
            return None
        kept = self.kept(self.policy.delay.statics.of(self.view, job).gpu_types)
        usable = kept.usable_at(i, int(free.gpus[i]) + demand, int(free.cpus[i]) + part.cpus,
                                int(free.memory_mb[i]) + part.memory_mb)
        if usable < demand:
            return None
        avail = kept.avail  # (its own node's entry is the one before the give, left out below)
        tighter = (avail >= demand) & (avail <= usable)
        tighter[i] = False
        if tighter.any() and (bool(((avail < usable) & tighter).any()) or bool(tighter[:i].any())):
            return None  # a node that fits with fewer usable GPUs, or as few with a lower index
        return own

    def first(self, group: tuple[str, GpuTypes, int], members: SortedList, after: Entry | None) -> Entry | None:
        """The first bidder of ``group`` after ``after`` in the order that accepts what is free now."""
        start = 0 if after is None else members.bisect_right(after)
        if start >= len(members):
            return None
        entry = members[start]
        need = self.threshold(group, self.jobs[entry[1]])
        if need is None or self.longest[group] < need:
            return None
        waits = self.waits
        for entry in self._from(members, start):
            if waits[entry[1]] >= need:
                return entry
        return None

    @staticmethod
    def _from(members: SortedList, start: int) -> Iterator[Entry]:
        return members.islice(start)

    # ------------------------------------------------------------------ the auctions
    def run(self, ended: set[str], releases: list[JobInfo]) -> dict[str, Allocation]:
        """Every release's auction (:func:`auctions_one_by_one`); returns job id -> its placement."""
        from halyard.policies.dally_clustersim import HOARDS_KEY, HoardedGpus  # (it imports this module)

        policy, view, state, free = self.policy, self.view, self.state, self.free
        hoard = policy.hoard is not None
        self.won = state.setdefault(HOARDS_KEY, dict)
        self.add_all(PENDING, [(job, starvation(view, job)) for job in view.pending])
        if hoard:
            self.add_all(HOLDING, [(job, 0.0) for job in view.running.values()])
        placed: dict[str, Allocation] = {}
        self.free_total = free.total_gpus
        for released in releases:
            if not hoard and not any(self.groups.values()):  # it bids alone
                own = self.retakes(released)
                if own is not None:
                    policy.delay.accept(view, released, Level.MACHINE, 0.0, state)
                    placed[released.job_id] = own
                    continue
            free.give(allocation_of(released))
            self.changed(allocation_of(released), given=True)
            if hoard and released.job_id not in self.won:
                self.remove(HOLDING, released)
            self.add(RELEASED, released, 0.0)
            after: Entry | None = None
            while True:
                best: tuple[Entry, tuple[str, GpuTypes, int]] | None = None
                for group, members in self.groups.items():
                    if members:
                        entry = self.first(group, members, after)
                        if entry is not None and (best is None or entry < best[0]):
                            best = (entry, group)
                if best is None:
                    break
                after, group = best
                role = group[0]
                job = self.jobs[after[1]]
                if role == HOLDING:
                    HoardedGpus.bid_one(policy, view, state, job, free)
                    if job.job_id in self.won:
                        self.remove(HOLDING, job)  # one win per pass
                        self.changed(self.won[job.job_id][-1], given=False)
                    continue
                if self.free_total < job.spec.num_gpus:
                    continue
                decision, wait_s = self.decide(job, role == RELEASED)
                if decision is None:
                    continue
                picked, level = decision
                allocation = build_allocation(free, picked)
                free.take(allocation)
                self.changed(allocation, given=False)
                policy.delay.accept(view, job, level, wait_s, state)
                placed[job.job_id] = allocation
                self.remove(role, job)
                if hoard and job.job_id not in self.won:
                    self.add(HOLDING, job, 0.0)  # after ``after`` in the order: it bids from the next auction
        return placed
