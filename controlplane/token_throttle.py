"""Refuses a peer that keeps presenting bad tokens, for a while, on every surface.

Halyard's tokens carry 256 random bits, so guessing one is hopeless; the throttle is defence in depth
against a stolen token *list* being tried, or a misconfigured client hammering the port with a revoked
token and filling the log. It counts, per peer host (the address without its port, so reconnecting does
not reset it), the bearer tokens that failed (unknown, revoked, expired, malformed) in a sliding window;
a peer at the limit is refused before its token is even looked at, good or bad, until the oldest failure
leaves the window. Calls without a token and dashboard sessions (whose token the server holds) never
count. Memory is bounded: at most ``MAX_PEERS`` peers are followed, the least recently failing dropped.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable

from halyard.controlplane.errors import TooManyFailures

# Defaults, our choice (no paper gives them): a person mistyping a token fails a handful of times a
# minute; a script replaying a list fails thousands. 20 per minute leaves the first alone.
FAILED_TOKENS_LIMIT = 20
FAILED_TOKENS_WINDOW_S = 60.0
MAX_PEERS = 10_000  # peers followed at once (each a deque of at most FAILED_TOKENS_LIMIT floats)


def peer_host(peer: str) -> str:
    """The host part of a gRPC peer ("ipv4:127.0.0.1:5050", "ipv6:[::1]:5050", "unix:/p") or an HTTP remote."""
    kind, _, rest = peer.partition(":")
    if kind in ("ipv4", "ipv6") and rest:
        host = rest.rsplit(":", 1)[0]
        return host.strip("[]")
    return peer


class FailedTokens:
    """The sliding-window count of failed tokens per peer host."""

    def __init__(self, limit: int = FAILED_TOKENS_LIMIT, window_s: float = FAILED_TOKENS_WINDOW_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if limit < 1 or window_s <= 0:
            raise ValueError(f"failed-token throttle: limit {limit} and window {window_s} s must be positive")
        self.limit, self.window_s, self.clock = limit, window_s, clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def _recent(self, host: str, now: float) -> deque[float] | None:
        times = self._failures.get(host)
        if times is None:
            return None
        while times and times[0] <= now - self.window_s:
            times.popleft()
        if not times:
            del self._failures[host]
            return None
        return times

    def check(self, peer: str) -> None:
        """Raise :class:`TooManyFailures` if ``peer`` is at the limit now."""
        now = self.clock()
        host = peer_host(peer)
        times = self._recent(host, now)
        if times is not None and len(times) >= self.limit:
            wait = times[0] + self.window_s - now
            raise TooManyFailures(f"{self.limit} bad tokens from {host} in the last {self.window_s:g} s; "
                                  f"refused for {wait:.0f} s more", retry_after_s=wait)

    def failed(self, peer: str) -> bool:
        """Count one bad token from ``peer``; True if this one brought it to the limit (refused from now)."""
        now = self.clock()
        host = peer_host(peer)
        times = self._recent(host, now)
        if times is None:
            times = self._failures[host] = deque(maxlen=self.limit)
            if len(self._failures) > MAX_PEERS:
                self._failures.popitem(last=False)
        else:
            self._failures.move_to_end(host)
        times.append(now)
        return len(times) == self.limit
