"""``+first-fit``: Algorithm 1's placement as Dally's reference simulator makes it (aakash-sharma/cluster-sim,
read and run beside Halyard in docs/reproductions/dally-public-comparison.md), an option of Dally, off by default.

Not in the paper: §4.3.2 says which tier a job accepts (a machine, then a rack, then the network), not which
machine or rack of that tier it gets. Halyard's Algorithm 1 (:func:`~halyard.policies.dally_stages.delay_decision`)
takes the best fit of the tier (:func:`~halyard.policies.topology.on_machine`: the machine with the fewest
free GPUs that holds the job; :func:`~halyard.policies.topology.on_rack`: the rack needing the fewest
machines, fullest machines first; :func:`~halyard.policies.topology.on_network`: the racks with the most free
GPUs first). cluster-sim's ``DallyInterJobScheduler.consolidatedGPUAllocation`` takes the *first* that fits,
in the iteration order of the maps it counts the free GPUs in (its "Find the smallest consolidated slots
available" comment is over a loop whose ``minGPUAllocation = gpus`` is commented out and which ``break``\\ s
at the first fit). With the side-by-side's cluster (``units-count`` [8]: ``ConfigUtils`` makes each GPU a
``GPULocation(k, -1, -1, -1, machine, rack)``, no slot, dim1 or dim2) the steps that apply are:

* **machine**: ``machineMap``, a commons-collections4 ``MultiKeyMap`` keyed (rack id, machine id in its rack)
  counting the free GPUs of each machine, filled in ``Cluster.getGPUsInCluster`` order (rack by rack, machine
  by machine). The first key in its ``keySet`` order with at least the demand free (:func:`multikeymap_order`);
* **rack** (once the job has starved ``rack_delay_wait`` leases, or needs more than a machine): ``rackMap``, a
  ``java.util.HashMap<Integer, Integer>`` of free GPUs per rack; the first rack in its order
  (:func:`hashmap_order`) with the demand free;
* the GPUs inside the chosen machine or rack, and at the network step (``allocatedRack`` -1: any GPU), are
  ``InterJobScheduler.allocateGPU``'s: the first ``gpuDemand`` free GPUs in cluster order that lie in it.

:class:`FirstFit` gives those three choices on Halyard's usable GPUs per node (node index -> (rack, machine
in rack) by ``ClusterShape.rack_nodes``; the dally-Nrack clusters list nodes rack by rack as cluster-sim
does). Which tier, and whether the job accepts, is Algorithm 1's as before: only the GPUs of the tier change.
It composes with ``+reauction`` and ``+staggered`` (every bid of a lease end, and ``+hoard``'s), and with
the plain pass's offers; the Nw_sens preemption's and ``+migrate``'s searches keep Halyard's best fit
(cluster-sim has neither).
"""

from __future__ import annotations

import numpy as np

from halyard.policies.facts import ClusterShape
from halyard.policies.topology import Picked, first_fit

_MASK = 0xFFFFFFFF
# commons-collections4 AbstractHashedMap (HashedMap, MultiKeyMap's default): DEFAULT_CAPACITY 16,
# DEFAULT_LOAD_FACTOR 0.75 (threshold = capacity x 0.75); java.util.HashMap has the same two defaults.
INITIAL_CAPACITY = 16
LOAD_FACTOR = 0.75
MEMO_LIMIT = 4096  # FirstFit keeps the machine order of at most this many sets of machines (a memo)


def _i32(x: int) -> int:
    """``x`` as a Java ``int`` (two's complement, 32 bits)."""
    x &= _MASK
    return x - (1 << 32) if x & 0x80000000 else x


def multikey_hash(key1: int, key2: int) -> int:
    """``MultiKeyMap.hash(key1, key2)`` for two ``Integer`` keys (``Integer.hashCode`` is the value)."""
    h = _i32(key1 ^ key2)
    h = _i32(h + ~_i32(h << 9))
    h = _i32(h ^ ((h & _MASK) >> 14))
    h = _i32(h + _i32(h << 4))
    return _i32(h ^ ((h & _MASK) >> 10))


def multikeymap_order(keys: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The ``keySet`` order of a commons-collections4 ``MultiKeyMap`` (on its default ``HashedMap``) after
    ``put(key1, key2, ...)`` of ``keys`` in this order (each once; a later ``put`` of a key only updates it).

    ``AbstractHashedMap.addMapping`` links a new entry at the head of its bucket
    (``hashIndex = hash & (capacity - 1)``), then ``checkCapacity`` doubles the table once ``size`` reaches
    ``threshold``; ``ensureCapacity`` moves the entries bucket by bucket from the last, each to the head of
    its new bucket; ``HashIterator`` walks the buckets from the last to the first, each from its head."""
    capacity = INITIAL_CAPACITY
    buckets: list[list[tuple[int, int, int]]] = [[] for _ in range(capacity)]  # each from its head
    for size, key in enumerate(keys, start=1):
        h = multikey_hash(*key)
        buckets[h & (capacity - 1)].insert(0, (h, *key))
        if size >= int(capacity * LOAD_FACTOR):
            capacity *= 2
            moved: list[list[tuple[int, int, int]]] = [[] for _ in range(capacity)]
            for bucket in reversed(buckets):
                for entry in bucket:
                    moved[entry[0] & (capacity - 1)].insert(0, entry)
            buckets = moved
    return [(a, b) for bucket in reversed(buckets) for _, a, b in bucket]


def hashmap_order(keys: list[int]) -> list[int]:
    """The ``keySet`` order of a ``java.util.HashMap<Integer, ...>`` after ``merge`` of ``keys`` (non-negative,
    each first merged in this order), as ``rackMap.merge(rack, 1, Integer::sum)`` fills it: by bucket
    (``hash ^ hash >>> 16``, masked by the table size, which doubles past 0.75 full), ascending; in a bucket,
    the last merged in first (``HashMap.merge`` links a new node at the head of its bin; a resize keeps the
    order). Bins of 8 or more keys, which ``merge`` would treeify, are not modelled (rack ids are few)."""
    capacity = INITIAL_CAPACITY
    while len(keys) > capacity * LOAD_FACTOR:
        capacity *= 2
    index = {k: i for i, k in enumerate(keys)}
    return sorted(keys, key=lambda k: (((k ^ (k >> 16)) & (capacity - 1)), -index[k]))


class FirstFit:
    """cluster-sim's three choices of Algorithm 1 (module docstring), on the usable GPUs per node ``avail``;
    each returns ``[(node index, GPUs), ...]`` or None, as :mod:`halyard.policies.topology`'s do."""

    def __init__(self) -> None:
        self._shape: ClusterShape | None = None
        self._keys: list[tuple[int, int]] = []  # node index -> (rack id, machine id in its rack)
        self._order: list[int] = []  # node indices in cluster-sim's cluster order (rack by rack)
        self._memo: dict[tuple[int, ...], list[int]] = {}

    def _layout(self, shape: ClusterShape) -> None:
        if shape is self._shape:
            return
        self._shape, self._memo = shape, {}
        self._keys = [(0, 0)] * len(shape.gpus)
        self._order = []
        for rack, members in enumerate(shape.rack_nodes):
            for machine, node in enumerate(members.tolist()):
                self._keys[node] = (rack, machine)
                self._order.append(node)

    def machine_order(self, avail: np.ndarray, shape: ClusterShape) -> list[int]:
        """The nodes with a usable GPU in ``machineMap``'s ``keySet`` order."""
        self._layout(shape)
        nodes = tuple(n for n in self._order if avail[n] > 0)
        found = self._memo.get(nodes)
        if found is None:
            if len(self._memo) >= MEMO_LIMIT:
                self._memo.clear()
            where = {self._keys[n]: n for n in nodes}
            found = self._memo[nodes] = [where[k] for k in multikeymap_order([self._keys[n] for n in nodes])]
        return found

    def on_machine(self, avail: np.ndarray, shape: ClusterShape, gpus: int) -> Picked | None:
        if int(avail.max(initial=0)) < gpus:
            return None
        node = next(n for n in self.machine_order(avail, shape) if avail[n] >= gpus)
        return [(node, gpus)]

    def on_rack(self, avail: np.ndarray, shape: ClusterShape, gpus: int) -> Picked | None:
        self._layout(shape)
        rack_free = np.bincount(shape.rack, weights=avail, minlength=shape.n_racks)
        racks = [r for r in range(shape.n_racks) if rack_free[r] > 0]
        rack = next((r for r in hashmap_order(racks) if rack_free[r] >= gpus), None)
        if rack is None:
            return None
        members = shape.rack_nodes[rack]
        picked = first_fit(avail[members], gpus)
        assert picked is not None
        return [(int(members[i]), take) for i, take in picked]

    def on_network(self, avail: np.ndarray, shape: ClusterShape, gpus: int) -> Picked | None:
        self._layout(shape)
        order = np.asarray(self._order, dtype=np.int64)
        picked = first_fit(avail[order], gpus)
        return None if picked is None else [(int(order[i]), take) for i, take in picked]
