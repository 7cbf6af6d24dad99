"""Guard against declaring many agents lost at once (Kubernetes' zone disruption rule).

When a large share of the agents goes silent together, the likelier cause is the
control plane's side (a starved event loop, a partition, a switch), not that many
servers failed at the same moment; requeueing all their jobs would restart work
that is still running, and a re-registration storm would starve the control plane
further. Kubernetes' node-lifecycle controller has the same rule
(kube-controller-manager reference; ``pkg/controller/nodelifecycle``): a zone is
unhealthy ("partial disruption") when more than two of its nodes are NotReady and
they are at least ``--unhealthy-zone-threshold`` (default 0.55) of it; there nodes
are evicted at ``--secondary-node-eviction-rate`` (default 0.01 nodes/s), a rate that
is 0 in a cluster of at most ``--large-cluster-size-threshold`` (default 50) nodes;
when every node is NotReady ("full disruption") evictions stop. Halyard treats the
whole cluster as one zone and uses these defaults; its normal rate is "at once", as
before the guard (Kubernetes' ``--node-eviction-rate`` is 0.1 nodes/s).

The population is the nodes whose agent registered at least once since the control
plane started, plus nodes that hold jobs (restored from the store): a node in the
cluster file whose agent never came is not silent, it is not there (Kubernetes
counts the Node objects kubelets registered). While the cluster is disrupted a silent
agent's node takes no new work, but its session stays open and its jobs stay placed;
its next message makes it schedulable again. The control plane counts an agent as silent
here once it has been quiet for half the heartbeat timeout (``agent_sessions.SUSPECT_SHARE``), so a
mass silence is seen before the first of its agents reaches the timeout.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from halyard.datamodel import ValidationError

# Kubernetes' kube-controller-manager defaults (flags of the node-lifecycle controller).
UNHEALTHY_ZONE_THRESHOLD = 0.55  # --unhealthy-zone-threshold: share of silent nodes that disrupts
MIN_SILENT_FOR_DISRUPTION = 3  # "more than 2 NotReady" (nodelifecycle ComputeZoneState)
SECONDARY_EVICTION_RATE = 0.01  # --secondary-node-eviction-rate, nodes per second while disrupted
LARGE_CLUSTER_SIZE_THRESHOLD = 50  # --large-cluster-size-threshold: at most this many nodes -> rate 0
EVICTION_BURST = 1.0  # Kubernetes' eviction queue is a token bucket of burst 1


class Disruption(enum.Enum):
    NORMAL = 0  # lost agents are declared lost at once
    PARTIAL = 1  # at the secondary rate (0 in a small cluster)
    FULL = 2  # every known agent is silent: none is declared lost

    @property
    def holds(self) -> bool:
        return self is not Disruption.NORMAL


@dataclass(frozen=True)
class DisruptionSettings:
    """An operator's choice (``halyard controlplane --unhealthy-zone-threshold ...``); Kubernetes' defaults."""

    unhealthy_threshold: float = UNHEALTHY_ZONE_THRESHOLD
    secondary_rate: float = SECONDARY_EVICTION_RATE
    large_cluster_size: int = LARGE_CLUSTER_SIZE_THRESHOLD

    def __post_init__(self) -> None:
        if not 0.0 < self.unhealthy_threshold <= 1.0:
            raise ValidationError(f"must be in (0, 1], got {self.unhealthy_threshold:g}",
                                  field="--unhealthy-zone-threshold")
        if not self.secondary_rate >= 0.0:
            raise ValidationError(f"must be >= 0 nodes per second, got {self.secondary_rate:g}",
                                  field="--secondary-node-eviction-rate")
        if self.large_cluster_size < 0:
            raise ValidationError(f"must be >= 0 nodes, got {self.large_cluster_size}",
                                  field="--large-cluster-size-threshold")


class LostAgentGuard:
    """Decides, each liveness check, which silent nodes may be declared lost now.

    ``admit`` is given the silent nodes whose loss changes something, oldest silence
    first, and how many of the population are silent; it returns the prefix that may be
    declared lost: all of them while the cluster is healthy, one per ``1 / secondary_rate``
    seconds (a token bucket of burst 1, empty when the disruption starts) while it is
    partially disrupted, none while it is fully disrupted.
    """

    def __init__(self, settings: DisruptionSettings | None = None) -> None:
        self.settings = settings or DisruptionSettings()
        self.state = Disruption.NORMAL
        self.silent = 0  # silent nodes at the latest check (a metric)
        self.known = 0
        self._tokens = 0.0
        self._last: float | None = None

    def classify(self, silent: int, known: int) -> Disruption:
        if silent < MIN_SILENT_FOR_DISRUPTION or silent < self.settings.unhealthy_threshold * known:
            return Disruption.NORMAL
        return Disruption.FULL if silent >= known else Disruption.PARTIAL

    def rate(self, known: int) -> float:
        """Nodes per second declared lost while partially disrupted."""
        return self.settings.secondary_rate if known > self.settings.large_cluster_size else 0.0

    def admit(self, candidates: list[str], silent: int, known: int, now: float) -> list[str]:
        """The prefix of ``candidates`` (silent nodes whose loss would change something, oldest
        silence first) that may be declared lost at ``now``, given ``silent`` of ``known`` nodes
        are silent."""
        previous, self.state = self.state, self.classify(silent, known)
        self.silent, self.known = silent, known
        elapsed = 0.0 if self._last is None else max(0.0, now - self._last)
        self._last = now
        if self.state is Disruption.NORMAL:
            self._tokens = 0.0
            return candidates
        if previous is Disruption.NORMAL:
            self._tokens = 0.0  # a new disruption: the first node waits one interval
        elif self.state is Disruption.PARTIAL:
            self._tokens = min(EVICTION_BURST, self._tokens + elapsed * self.rate(known))
        admitted = 0
        if self.state is Disruption.PARTIAL:
            admitted = min(len(candidates), int(self._tokens))
            self._tokens -= admitted
        return candidates[:admitted]
