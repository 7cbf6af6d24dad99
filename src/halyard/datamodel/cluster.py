"""Cluster topology: racks of nodes of GPUs, and the links between them.

Units are fixed across the project so no call site has to guess: memory in
decimal megabytes (``memory_mb``, integers, so accounting never drifts), link
bandwidth in gigabytes per second (``*_gbyte_s``, one direction), latency in
seconds. The TOML loader (:mod:`halyard.datamodel.cluster_toml`) converts the
units people write (GB of memory, Gbit/s for NICs) into these.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property

# Sets of racks whose narrowest link Cluster.inter_rack_gbyte_s keeps (a choice of ours): a placement
# spans a few racks, so a run asks for far fewer sets; the bound keeps a long-lived control plane's
# memo at a few MB however many distinct sets it sees (the oldest goes first).
INTER_RACK_MEMO_ENTRIES = 16_384

class Fabric(enum.StrEnum):
    """The intra-node interconnect between a node's GPUs."""

    NVSWITCH = "nvswitch"
    NVLINK = "nvlink"
    PCIE = "pcie"


class Tier(enum.IntEnum):
    """The slowest network tier a placement crosses, ordered near to far."""

    GPU = 0  # one GPU: no communication
    NODE = 1  # several GPUs of one node: the intra-node fabric
    RACK = 2  # several nodes of one rack: NICs and the rack switch
    SPINE = 3  # several racks: rack uplinks and the spine


@dataclass(frozen=True, slots=True)
class Node:
    """One server. ``index`` is its dense position in :attr:`Cluster.nodes`."""

    name: str
    rack: str
    index: int
    rack_index: int
    gpu_type: str
    gpus: int
    cpus: int
    memory_mb: int
    fabric: Fabric
    fabric_gbyte_s: float
    nic_gbyte_s: float

    def proportional_cpus(self, gpus: int) -> int:
        """CPU cores that go with ``gpus`` GPUs under GPU-proportional sharing."""
        return self.cpus * gpus // self.gpus

    def proportional_memory_mb(self, gpus: int) -> int:
        """Memory that goes with ``gpus`` GPUs under GPU-proportional sharing."""
        return self.memory_mb * gpus // self.gpus


@dataclass(frozen=True, slots=True)
class Rack:
    name: str
    index: int
    node_indices: tuple[int, ...]
    uplink_gbyte_s: float


@dataclass(frozen=True, slots=True)
class SwitchLink:
    """A full-duplex link between two switches: a rack's ToR (named as the rack) or a declared switch.

    Its name in link keys is ``"a~b"``; ``gbyte_s`` is its capacity in each direction.
    """

    a: str
    b: str
    gbyte_s: float

    @property
    def name(self) -> str:
        return f"{self.a}~{self.b}"


LinkKey = tuple[str, str]  # ("nic", node), ("uplink", rack) or ("switch", "a~b")


@dataclass(frozen=True)
class Cluster:
    """An immutable cluster description; build it with :func:`load_cluster`.

    Not slotted, so the derived totals are computed once and cached.
    """

    name: str
    racks: tuple[Rack, ...]
    nodes: tuple[Node, ...]
    spine_oversubscription: float = 1.0
    description: str = ""
    # Nominal GPU quota per tenant (Kueue's ClusterQueue nominalQuota), read by the tenant-quota
    # admission stage; tenants not listed have none of their own and may only borrow.
    quotas: Mapping[str, int] = field(default_factory=dict, compare=False)
    # Switch-to-switch links (docs/cluster-format.md, "Switches and links"). When given, traffic
    # between racks follows routes over them instead of the rack uplinks and the spine.
    switches: tuple[str, ...] = ()
    links: tuple[SwitchLink, ...] = ()
    _by_name: dict[str, Node] = field(default_factory=dict, repr=False, compare=False)
    _routes: dict[tuple[int, int], tuple[LinkKey, ...]] = field(default_factory=dict, repr=False, compare=False)
    _inter_rack_bw: dict[frozenset[int], float] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._by_name.update({n.name: n for n in self.nodes})

    def node(self, name: str) -> Node:
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"unknown node {name!r} in cluster {self.name!r}") from None

    def has_node(self, name: str) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    @cached_property
    def total_gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)

    @cached_property
    def total_cpus(self) -> int:
        return sum(n.cpus for n in self.nodes)

    @cached_property
    def total_memory_mb(self) -> int:
        return sum(n.memory_mb for n in self.nodes)

    @cached_property
    def gpu_types(self) -> tuple[str, ...]:
        """GPU types present, most GPUs first (the first is the reference type)."""
        count: dict[str, int] = {}
        for n in self.nodes:
            count[n.gpu_type] = count.get(n.gpu_type, 0) + n.gpus
        return tuple(sorted(count, key=lambda t: (-count[t], t)))

    def max_gpus_per_node(self, gpu_type: str | None = None) -> int:
        return max((n.gpus for n in self.nodes if gpu_type in (None, n.gpu_type)), default=0)

    # --- links between racks ------------------------------------------------------

    def inter_rack_links(self, racks: Iterable[int]) -> tuple[LinkKey, ...]:
        """The shared links a ring over ``racks`` (rack indices, in ring order) crosses between racks.

        Without switch links: the uplink of each rack, in the order given (a ring ordered by rack
        crosses each uplink once each way). With them: the links of the route between each pair
        of consecutive racks of the ring, closing the ring, each link once, in the order first met.
        """
        order = list(dict.fromkeys(racks))
        if len(order) < 2:
            return ()
        if not self.links:
            return tuple(("uplink", self.racks[r].name) for r in order)
        crossed: dict[LinkKey, None] = {}
        for a, b in zip(order, order[1:] + order[:1], strict=True):
            crossed.update(dict.fromkeys(self.route(a, b)))
        return tuple(crossed)

    def link_gbyte_s(self, link: LinkKey) -> float:
        """A link's capacity in GB/s each way: a node's NIC, a rack's uplink over the spine
        oversubscription, or a switch link."""
        kind, name = link
        if kind == "nic":
            return self.node(name).nic_gbyte_s
        if kind == "uplink":
            if name not in self._uplink_gbyte_s:
                raise KeyError(f"unknown rack {name!r} in cluster {self.name!r}")
            return self._uplink_gbyte_s[name]
        if kind == "switch":
            return self._link_by_name[name].gbyte_s
        raise KeyError(f"unknown link kind {kind!r} (nic, uplink, switch)")

    def inter_rack_gbyte_s(self, racks: Iterable[int]) -> float:
        """The narrowest link between ``racks`` (infinite for fewer than two racks); memoised per set of
        racks, as the performance model asks for every multi-rack placement it costs."""
        key = frozenset(racks)
        memo = self._inter_rack_bw
        bw = memo.get(key)
        if bw is None:
            if len(memo) >= INTER_RACK_MEMO_ENTRIES:  # a daemon lives long: drop the oldest set, not grow
                del memo[next(iter(memo))]
            bw = memo[key] = min(
                (self.link_gbyte_s(k) for k in self.inter_rack_links(sorted(key))), default=float("inf"))
        return bw

    def route(self, a: int, b: int) -> tuple[LinkKey, ...]:
        """The switch links from rack ``a``'s ToR to rack ``b``'s: a shortest path, the same both ways.

        Where several next hops are equally short the pair of racks picks one (``(a + b) mod choices``),
        a deterministic stand-in for ECMP's per-flow hashing that spreads rack pairs over the paths.
        """
        lo, hi = min(a, b), max(a, b)
        cached = self._routes.get((lo, hi))
        if cached is not None:
            return cached
        src, dst = self.racks[lo].name, self.racks[hi].name
        dist = self._hops_to(dst)
        if src not in dist:
            raise ValueError(f"cluster {self.name!r}: no switch links connect rack {src!r} to rack {dst!r}")
        path: list[LinkKey] = []
        here = src
        while here != dst:
            nexts = sorted(n for n, _ in self._adjacent[here] if dist.get(n) == dist[here] - 1)
            step = nexts[(lo + hi) % len(nexts)]
            path.append(("switch", next(link.name for n, link in self._adjacent[here] if n == step)))
            here = step
        self._routes[(lo, hi)] = route = tuple(path)
        return route

    @cached_property
    def _uplink_gbyte_s(self) -> dict[str, float]:
        return {r.name: r.uplink_gbyte_s / self.spine_oversubscription for r in self.racks}

    @cached_property
    def _link_by_name(self) -> dict[str, SwitchLink]:
        return {link.name: link for link in self.links}

    @cached_property
    def _adjacent(self) -> dict[str, list[tuple[str, SwitchLink]]]:
        adjacent: dict[str, list[tuple[str, SwitchLink]]] = {}
        for link in self.links:
            adjacent.setdefault(link.a, []).append((link.b, link))
            adjacent.setdefault(link.b, []).append((link.a, link))
        return adjacent

    def _hops_to(self, target: str) -> dict[str, int]:
        """Breadth-first hop counts from every switch to ``target``."""
        dist = {target: 0}
        queue = deque([target])
        while queue:
            here = queue.popleft()
            for there, _ in self._adjacent.get(here, ()):
                if there not in dist:
                    dist[there] = dist[here] + 1
                    queue.append(there)
        return dist

