"""Replay's lockstep: the control plane handles events in the simulator's order.

Why a module of its own: ``halyard replay`` must make the schedule ``halyard simulate`` makes
(DESIGN.md, "The one invariant"), through the real control plane, real gRPC and emulated agents
on an accelerated clock. Messages there arrive when they arrive; the simulator handles events in
cluster-time order, an instant's events then its one pass. The lockstep closes that gap with
bounded-lag conservative synchronisation, as in parallel discrete-event simulation: completions
come from the model on its schedule (:class:`ReplayLockstep` keeps them, as the simulator's heap)
and are applied ``LOCKSTEP_LAG_WALL_S`` after their instant; an arrival or a round at ``t``
first waits for every completion at or before ``t``; each change is passed at its instant.

The control plane calls this through one interface, :class:`Lockstep`. A live control plane
(real agents finish when they finish) has :class:`NoLockstep`, whose every method does nothing:
its own defaults (the group commit, a paced pass, the registration batch) then stand.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from collections.abc import Coroutine, Iterable
from typing import TYPE_CHECKING, Any, Literal, Protocol

import structlog

from halyard.datamodel import JobState
from halyard.scheduling.records import JobRecord
from halyard.scheduling.state import StoreError

if TYPE_CHECKING:
    from halyard.controlplane.service import ControlPlane

log = structlog.get_logger("halyard.controlplane")

LOCKSTEP_WAIT_S = 2.0  # wall seconds an arrival waits for earlier completions before going ahead
LOCKSTEP_POLL_S = 0.001
LOCKSTEP_LAG_WALL_S = 0.05  # a completion is applied this long (wall) after its instant: > any message jitter


class Lockstep(Protocol):
    """What the control plane asks of replay's lockstep; :class:`NoLockstep` answers it for a live one."""

    # Every change is passed with it, at its instant: the scheduling task only keeps the round timer.
    passes_with_changes: bool
    # The model's completions end jobs; an agent's Exited(COMPLETED) follows them and changes nothing.
    completes_jobs: bool

    def background(self) -> list[Coroutine[Any, Any, None]]:
        """Tasks to run beside the scheduler for the control plane's life."""
        ...

    def instant(self, now: float) -> float:
        """The cluster time the next pass runs at (and the next round follows), given the clock's ``now``."""
        ...

    def pass_at(self, now: float) -> float:
        """A pass begins: its instant (as :meth:`instant`); a pass owed to the instant is now made."""
        ...

    def event_at(self, t: float) -> None:
        """An event at cluster time ``t`` was handled."""
        ...

    def arrival_time(self, requested: float | None, now: float) -> float:
        """The submit time of a job arriving at ``now`` whose client stamped it ``requested``."""
        ...

    async def settle(self, t: float) -> None:
        """Return once every event the model expects before an arrival at ``t`` is handled."""
        ...

    def submitted(self, t: float) -> bool:
        """A job arriving at ``t`` was applied: True once its commit and pass are taken care of (else the
        group commit takes them)."""
        ...

    def submit_refused(self) -> None:
        """A submission was refused (or its call ended) after it was admitted."""
        ...

    def take_change(self) -> bool:
        """A change the control plane batches or defers: True once it was committed and passed at once."""
        ...

    def on_change(self) -> None:
        """A change is about to be persisted."""
        ...

    def expect(self, rerated: Iterable[JobRecord]) -> None:
        """A pass re-rated these jobs: their finish instants are what the model now expects."""
        ...

    async def before_round(self, deadline: float) -> None:
        """The round timer fired for ``deadline``: return once its pass may run."""
        ...

    def set_arrival_horizon(self, t: float, then: float) -> None:
        """No arrival before ``t`` is still to come; the one after it is at ``then``."""
        ...


class NoLockstep:
    """A live control plane's :class:`Lockstep`: nothing waits and nothing is reordered."""

    passes_with_changes = False
    completes_jobs = False

    def background(self) -> list[Coroutine[Any, Any, None]]:
        return []

    def instant(self, now: float) -> float:
        return now

    def pass_at(self, now: float) -> float:
        return now

    def event_at(self, t: float) -> None:
        pass

    def arrival_time(self, requested: float | None, now: float) -> float:
        return now

    async def settle(self, t: float) -> None:
        pass

    def submitted(self, t: float) -> bool:
        return False

    def submit_refused(self) -> None:
        pass

    def take_change(self) -> bool:
        return False

    def on_change(self) -> None:
        pass

    def expect(self, rerated: Iterable[JobRecord]) -> None:
        pass

    async def before_round(self, deadline: float) -> None:
        pass

    def set_arrival_horizon(self, t: float, then: float) -> None:
        pass


class ReplayLockstep:
    """Replay's :class:`Lockstep`: completions on the model's schedule, events in cluster-time order."""

    passes_with_changes = True
    completes_jobs = True

    def __init__(self, cp: ControlPlane, *, wait_s: float = LOCKSTEP_WAIT_S) -> None:
        self.cp = cp
        self.wait_s = wait_s
        self._latest_event = -math.inf  # the cluster time of the newest event handled
        self._pass_owed = False  # a submit left its instant's pass to the next submit at that instant
        # Completions the model predicts, (finish, seq, job id, record epoch), as in the simulator.
        self._due: list[tuple[float, int, str, int]] = []
        self._due_seq = itertools.count()
        self._due_added = asyncio.Event()
        # The time of the next arrival the replay client has not submitted yet; completions and
        # rounds after it wait, as the simulator handles events in time order.
        self.arrival_horizon = math.inf
        self.next_arrival = math.inf  # the arrival after the one at the horizon
        self._horizon_moved = asyncio.Event()

    def background(self) -> list[Coroutine[Any, Any, None]]:
        return [self._completions()]

    def instant(self, now: float) -> float:
        # Passes run, and the next round follows, at the newest event's instant, as in the simulator,
        # not the clock, which may already be past a boundary when a pass ends late (a busy machine).
        return max(self._latest_event, self.cp.last_pass_time)

    def pass_at(self, now: float) -> float:
        self._pass_owed = False
        return self.instant(now)

    def event_at(self, t: float) -> None:
        self._latest_event = max(self._latest_event, t)

    def arrival_time(self, requested: float | None, now: float) -> float:
        """The replay client's own stamp (its trace's arrival), unless the control plane has passed it."""
        if requested is not None and requested >= self.cp.last_pass_time:
            return requested
        return now

    async def settle(self, t: float) -> None:
        """Wait until every completion the model expects up to ``t`` is applied.

        With emulated agents reporting the model's own finish instants, events are then
        handled in cluster-time order and replay makes the simulator's schedule. A round
        pass due before ``t`` goes first too (the simulator's order; the scheduling task may
        wake late on a busy machine).
        """
        cp = self.cp
        deadline = time.monotonic() + self.wait_s
        while any(r.finish_time() <= t for r in cp.core.running.values()) or cp.next_round() < t:
            if time.monotonic() > deadline:
                log.warning("lockstep: completions or a round before the arrival did not come", cluster_time=t)
                return
            await asyncio.sleep(LOCKSTEP_POLL_S)

    def submitted(self, t: float) -> bool:
        if self.next_arrival == t:
            # Another job arrives at this instant; its submit runs the instant's one pass
            # (the simulator's: all of an instant's events, then one pass).
            self.cp.persist()
            self._pass_owed = True
        else:
            self.cp.changed()
        return True

    def submit_refused(self) -> None:
        """If the refused one was its instant's last arrival and an earlier one at that instant left the
        pass to it, make the instant's pass now; otherwise the instant would get none and its jobs would
        wait for the next event."""
        if self._pass_owed and self.next_arrival != self.arrival_horizon:
            self.cp.changed()

    def take_change(self) -> bool:
        self.cp.changed()  # at once, as the simulator
        return True

    def on_change(self) -> None:
        self.cp.pass_now()  # the simulator's order: an instant's events, then its pass, then the next instant

    def expect(self, rerated: Iterable[JobRecord]) -> None:
        for record in rerated:
            if math.isfinite(finish := record.finish_time()):
                heapq.heappush(self._due, (finish, next(self._due_seq), record.job_id, record.epoch))
        self._due_added.set()

    async def before_round(self, deadline: float) -> None:
        # Arrivals first: one that comes before the round may start a job that ends
        # before it too, and settle must see that job (the simulator handles both first).
        await self._await_arrivals_before(math.nextafter(deadline, math.inf))
        await self.settle(deadline)
        self.event_at(deadline)  # the round boundary is the event

    def set_arrival_horizon(self, t: float, then: float) -> None:
        self.arrival_horizon = t
        self.next_arrival = then
        self._horizon_moved.set()

    async def _await_arrivals_before(self, t: float) -> None:
        """Wait until every arrival at or before ``t`` is in (completions go first at equal times)."""
        while self.arrival_horizon < t:
            self._horizon_moved.clear()
            await self._horizon_moved.wait()

    async def _completions(self) -> None:
        """Apply the model's completions in cluster-time order, each instant's group then its pass.

        The emulated agents compute exactly this model, so the control plane completes jobs
        on the model's schedule (entries whose record epoch has moved on are stale, as in the
        simulator's heap) and does not depend on when an agent's report travels: a
        Reconfigure that reaches an agent late cannot change the schedule.
        """
        cp = self.cp
        while True:
            if not self._due:
                self._due_added.clear()
                await self._due_added.wait()
                continue
            t = self._due[0][0]
            if not await self._turn_unless_earlier(t):
                continue  # a pass planned an earlier completion meanwhile: that one goes first
            completed = False
            while self._due and self._due[0][0] == t:
                _, _, job_id, epoch = heapq.heappop(self._due)
                record = cp.core.records[job_id]
                if record.epoch == epoch and record.state is JobState.RUNNING:
                    cp.complete(job_id, t)
                    completed = True
            if completed:
                self.event_at(t)
                try:
                    cp.changed()
                except StoreError:
                    return  # fatal: the control plane's persist has stopped it

    async def _turn_of(self, t: float) -> None:
        """Wait until the completions at ``t`` are due: their instant has passed, every arrival before
        it is in, and a round due before it has run (the simulator's order)."""
        await self.cp.clock.sleep_until(t)
        await asyncio.sleep(LOCKSTEP_LAG_WALL_S)  # arrivals stamped just before land first
        await self._await_arrivals_before(t)
        while self.cp.next_round() < t:  # the scheduling task may wake late on a busy machine
            await asyncio.sleep(LOCKSTEP_POLL_S)

    async def _turn_unless_earlier(self, t: float) -> bool:
        """``_turn_of(t)``, or False as soon as a completion before ``t`` is planned. Waiting on for the
        old head would deadlock with an arrival between the two instants, which waits (``settle``) for
        the earlier completion while this loop waits for that arrival."""
        turn = asyncio.ensure_future(self._turn_of(t))
        added: asyncio.Future[Literal[True]] | None = None  # Event.wait()
        try:
            while not turn.done():
                self._due_added.clear()
                added = asyncio.ensure_future(self._due_added.wait())
                await asyncio.wait({turn, added}, return_when=asyncio.FIRST_COMPLETED)
                added.cancel()
                if self._due[0][0] < t:
                    return False
            turn.result()  # re-raise what ended it
            return True
        finally:  # also when this loop is cancelled mid-wait: no task is left pending
            turn.cancel()
            if added is not None:
                added.cancel()
