"""Cluster topology: racks of nodes of GPUs, and the links between them.

Units are fixed across the project so no call site has to guess: memory in
decimal megabytes (``memory_mb``, integers, so accounting never drifts), link
bandwidth in gigabytes per second (``*_gbyte_s``, one direction), latency in
seconds. The TOML loader (:mod:`halyard.datamodel.cluster_toml`) converts the
units people write (GB of memory, Gbit/s for NICs) into these.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property


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
    _by_name: dict[str, Node] = field(default_factory=dict, repr=False, compare=False)

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
