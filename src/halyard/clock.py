"""Cluster time, behind one interface (DESIGN.md, "Time").

* :class:`ScaledClock` - cluster time = origin + (wall - wall origin) x speedup:
  the real clock (speedup 1) and replay's accelerated clock. Agents in other
  processes rebuild it from the same :class:`ClockParams`.
* :class:`ManualClock` - advanced by hand (the test cluster); timers wake in
  time order as it moves.

Scheduling and job progress are in cluster time; protocol liveness
(heartbeats, timeouts) always uses wall time.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from dataclasses import dataclass
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float: ...
    async def sleep_until(self, t: float) -> None: ...
    def params(self) -> ClockParams: ...


@dataclass(frozen=True, slots=True)
class ClockParams:
    """What an agent needs to run the same clock (sent in Registered)."""

    kind: str  # "scaled" or "manual"
    wall_origin_unix_s: float = 0.0
    cluster_origin_s: float = 0.0
    speedup: float = 1.0


class ScaledClock:
    def __init__(self, speedup: float = 1.0, *, wall_origin: float | None = None, cluster_origin: float = 0.0):
        if not speedup > 0:
            raise ValueError(f"speedup must be positive, got {speedup}")
        self.speedup = speedup
        self.wall_origin = time.time() if wall_origin is None else wall_origin
        self.cluster_origin = cluster_origin

    def now(self) -> float:
        return self.cluster_origin + (time.time() - self.wall_origin) * self.speedup

    def wall_until(self, t: float) -> float:
        """Wall seconds from now until cluster time ``t`` (0 if it has passed)."""
        return max(0.0, (t - self.now()) / self.speedup)

    async def sleep_until(self, t: float) -> None:
        # asyncio.sleep may wake a little early; loop until the clock agrees.
        while (wait := self.wall_until(t)) > 0:
            await asyncio.sleep(wait)

    def params(self) -> ClockParams:
        return ClockParams("scaled", self.wall_origin, self.cluster_origin, self.speedup)


class ManualClock:
    """A clock that moves only when told to; ``advance`` wakes timers in order."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._timers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    async def sleep_until(self, t: float) -> None:
        if t <= self._now:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._timers, (t, next(self._seq), future))
        await future

    async def advance(self, seconds: float, *, settle_s: float = 0.005) -> None:
        """Move time forward, stopping at each timer so what it wakes runs at its time.

        After each stop the loop gets ``settle_s`` of wall time so that messages the
        woken tasks send over real sockets are handled before time moves on.
        """
        if seconds < 0:
            raise ValueError("time does not go backwards")
        end = self._now + seconds
        while self._timers and self._timers[0][0] <= end:
            t = self._timers[0][0]
            self._now = t
            while self._timers and self._timers[0][0] <= t:
                _, _, future = heapq.heappop(self._timers)
                if not future.done():
                    future.set_result(None)
            await asyncio.sleep(settle_s)
        self._now = end
        await asyncio.sleep(settle_s)

    def params(self) -> ClockParams:
        return ClockParams("manual", cluster_origin_s=self._now)


def clock_from_params(params: ClockParams, *, shared: Clock | None = None) -> Clock:
    """The clock an agent runs, given what the control plane sent.

    A manual clock cannot cross a process boundary: an in-process agent passes
    the control plane's own clock as ``shared``.
    """
    if params.kind == "manual":
        if shared is None:
            raise ValueError("a manual clock can only be shared in-process")
        return shared
    return ScaledClock(params.speedup, wall_origin=params.wall_origin_unix_s, cluster_origin=params.cluster_origin_s)
