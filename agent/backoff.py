"""Reconnect delays: exponential backoff with jitter, so a fleet that lost its control plane
together does not come back in lockstep.

The shape is gRPC's connection backoff (grpc/grpc doc/connection-backoff.md: each delay is the
previous one times a multiplier, capped, then spread uniformly by +-jitter). The values are
ours, chosen for a control plane on the same network as its agents: the first retry is quick
(a restarted control plane is back within a second) and the cap keeps a lost node's agent
within a few seconds of noticing the control plane is back, well inside the default
5 s heartbeat timeout.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

BACKOFF_START_S = 0.05  # first retry delay (before jitter)
BACKOFF_MULTIPLIER = 2.0  # each failed attempt doubles the delay (gRPC's default is 1.6)
BACKOFF_MAX_S = 2.0  # cap on the delay before jitter (gRPC's default is 120 s: a WAN, not a rack)
BACKOFF_JITTER = 0.2  # delay x U(1 - j, 1 + j); gRPC's connection-backoff.md uses 0.2


@dataclass
class Backoff:
    """The delays of one agent's reconnects: :meth:`next_delay` after each failure, :meth:`reset` after a session."""

    start_s: float = BACKOFF_START_S
    multiplier: float = BACKOFF_MULTIPLIER
    max_s: float = BACKOFF_MAX_S
    jitter: float = BACKOFF_JITTER
    rng: random.Random = field(default_factory=random.Random)  # each agent its own stream, no shared state
    _current: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        if not 0.0 <= self.jitter < 1.0:
            raise ValueError(f"backoff jitter must be in [0, 1), got {self.jitter}")
        if self.start_s <= 0.0 or self.max_s < self.start_s or self.multiplier < 1.0:
            raise ValueError(f"backoff needs 0 < start_s <= max_s and multiplier >= 1, got start_s={self.start_s}, "
                             f"max_s={self.max_s}, multiplier={self.multiplier}")
        self._current = self.start_s

    def reset(self) -> None:
        self._current = self.start_s

    def next_delay(self) -> float:
        """The delay before the next attempt: the current step spread by the jitter; the step then grows."""
        delay = self._current * self.rng.uniform(1.0 - self.jitter, 1.0 + self.jitter)
        self._current = min(self.max_s, self._current * self.multiplier)
        return delay
