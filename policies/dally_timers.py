"""Dally's delay timers (§4.3.2-4.3.3 of the Dally paper): where the (machine, rack) timers of a GPU
demand come from, the manual ones or the auto-tuner (Algorithm 2, :func:`tuned_timer`).

Part of the Dally policy; :mod:`halyard.policies.dally` says what each piece is and why.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from halyard.policies.topology import Level

HOUR_S = 3600.0
# Dally §4.3.2: "a default value of 12 hours for machine-level consolidation and another
# 12 hours (or 24 hours in total) for rack-level consolidation".
MANUAL_MACHINE_TIMER_S = 12 * HOUR_S
MANUAL_RACK_TIMER_S = 12 * HOUR_S
# REFERENCE-NUMBERS, Dally's reference simulator: auto-tuned timers are floored at 6 leases
# (waiting for a machine before a rack is taken) and 12 leases (before the network), and
# capped by the history window. A lease is the round length of the view.
MACHINE_FLOOR_LEASES = 6
RACK_FLOOR_LEASES = 12
# Algorithm 2's HISTORY_TIME_LIMIT, read as the age of a recorded wait (§4.3.3: "in larger
# clusters, a smaller history time limit is advised ... because more jobs get placed over
# time in a large cluster"). The paper gives no value; Halyard's default is a week, long
# enough to learn multi-day waits on a contended cluster (docs/reproductions/dally-reproduction.md).
HISTORY_LIMIT_S = 7 * 24 * HOUR_S
# The "size of the wait-time list" (§4.3.3): the most recent acceptances kept per list.
HISTORY_WINDOW = 100


def tuned_timer(waits: Sequence[float]) -> float | None:
    """Algorithm 2 lines 13-14: ``mean + 2 x sample standard deviation`` of ``waits``.

    None for an empty list; a single wait has no spread, so it is the timer
    itself. E.g. ``[2, 4, 6]`` -> mean 4, sample std 2 -> 8.
    """
    n = len(waits)
    if n == 0:
        return None
    mean = math.fsum(waits) / n
    if n == 1:
        return mean
    var = math.fsum((w - mean) ** 2 for w in waits) / (n - 1)
    return mean + 2.0 * math.sqrt(var)


# An acceptance of this pass, not yet recorded: (level, GPU demand, starvation s, when, lease s).
Acceptance = tuple[Level, int, float, float, float]
ACCEPTANCES_KEY = "dally/acceptances"  # PassState: this pass's acceptances, in order
TIMERS_KEY = "dally/timers"  # PassState: (demand, its acceptances so far) -> (T_Mc, T_Rk)
ACCEPTED_KEY = "dally/accepted"  # PassState: demand -> acceptances of that demand so far


class TimerSource(Protocol):
    """Where the (machine, rack) delay timers of a GPU demand come from."""

    name: str

    def timers(self, demand: int, lease_s: float, now: float,
               tentative: Sequence[Acceptance] = ()) -> tuple[float, float]:
        """(T_Mc, T_Rk): seconds of starvation before a rack, resp. network, placement is taken,
        counting the pass's ``tentative`` acceptances as recorded. Only the acceptances of the same
        ``demand`` may count (Algorithm 2 keeps a list per level and demand): a pass works the timers
        out once per demand and number of its acceptances."""
        ...

    def record(self, level: Level, demand: int, wait_s: float, now: float, lease_s: float = 0.0) -> None:
        """At ``now`` a job of ``demand`` GPUs accepted a ``level`` placement after ``wait_s`` of starvation
        (``lease_s``: the round of the view)."""
        ...


@dataclass(frozen=True)
class ManualTimers:
    """Dally-manual: fixed timers, ``machine_s`` then ``rack_s`` more (§4.3.2, §5.1.3).

    T_Rk is cumulative (Algorithm 1 compares it with the whole starvation time),
    so the paper's 12 h + 12 h is (12 h, 24 h).
    """

    machine_s: float = MANUAL_MACHINE_TIMER_S
    rack_s: float = MANUAL_RACK_TIMER_S
    name = "manual-timers"

    def timers(self, demand: int, lease_s: float, now: float,
               tentative: Sequence[Acceptance] = ()) -> tuple[float, float]:
        return self.machine_s, self.machine_s + self.rack_s

    def record(self, level: Level, demand: int, wait_s: float, now: float, lease_s: float = 0.0) -> None:
        return None


@dataclass
class AutoTuner:
    """Algorithm 2: delay timers from the wait times of past acceptances, per (level, GPU demand).

    * a wait recorded more than ``history_limit_s`` ago leaves its list (lines 2-6,
      8-12), and a timer never exceeds the limit (REFERENCE-NUMBERS: "capped by
      the history window");
    * a list keeps at most the ``window`` most recent waits (the "size of the
      wait-time list");
    * timer = mean + 2 sample std (:func:`tuned_timer`), floored at
      ``machine_floor_leases`` / ``rack_floor_leases`` rounds (Dally's reference
      simulator); an empty list gives the floor;
    * T_Rk is at least T_Mc (it is compared with the same, cumulative, starvation).
    """

    history_limit_s: float = HISTORY_LIMIT_S
    window: int = HISTORY_WINDOW
    machine_floor_leases: float = MACHINE_FLOOR_LEASES
    rack_floor_leases: float = RACK_FLOOR_LEASES
    # Options, off by default (not in the paper; docs/reproductions/dally-reproduction.md measures them).
    # ``lease_waits`` (``+drop-short-waits``): record only waits of at least one lease, as the
    # reference simulator does (aakash-sharma/cluster-sim, DallyInterJobScheduler.setDemandDelay:
    # waits in leases, "if (delay < 1) return"); the paper records every acceptance's wait.
    # ``manual_start`` (``+manual-start``, our reading): an empty list gives §4.3.2's defaults
    # (12 h, 24 h) instead of the floors, as the tuned timers' starting point.
    lease_waits: bool = False
    manual_start: bool = False
    lists: dict[tuple[Level, int], deque[tuple[float, float]]] = field(default_factory=dict)
    # (demand, lease s, the tuner's settings) -> what its timers were worked out from, and the timers
    # (see timers()).
    _kept: dict[tuple[object, ...], tuple[tuple[object, ...], tuple[float, float]]] = field(
        default_factory=dict, repr=False, compare=False)
    # (level, demand, floor, the tuner's settings) -> what the level's timer was worked out from, and the timer:
    # one level's, for a pass whose tentative acceptances of the demand are all at the other (see _timer()).
    _kept_levels: dict[tuple[object, ...], tuple[tuple[object, ...], float]] = field(
        default_factory=dict, repr=False, compare=False)
    name = "auto-tuner"

    def record(self, level: Level, demand: int, wait_s: float, now: float, lease_s: float = 0.0) -> None:
        if level is Level.NETWORK:
            return  # Algorithm 1 line 21 records nothing
        if self.lease_waits and wait_s < lease_s:
            return
        waits = self.lists.get((level, demand))
        if waits is None:
            waits = self.lists[(level, demand)] = deque(maxlen=self.window)
        waits.append((now, max(0.0, wait_s)))

    def waits(self, level: Level, demand: int, now: float, tentative: Sequence[Acceptance] = ()) -> list[float]:
        """The list of (level, demand) at ``now``: waits recorded within the history limit, the
        ``tentative`` ones of the running pass appended (the last ``window`` of all of them)."""
        waits = self.lists.get((level, demand))
        while waits and now - waits[0][0] > self.history_limit_s:
            waits.popleft()
        listed = [w for _, w in waits] if waits else []
        extra = [max(0.0, w) for lv, d, w, _, lease_s in tentative if lv is level and d == demand
                 and not (self.lease_waits and w < lease_s)]
        return (listed + extra)[-self.window:] if extra else listed

    def timers(self, demand: int, lease_s: float, now: float,
               tentative: Sequence[Acceptance] = ()) -> tuple[float, float]:
        """Kept from the last call for the same demand and lease while neither list has changed (the
        same deque, length and newest entry: an append makes a new tuple, and expiry shortens it), no
        wait of either list has expired at ``now`` (the check :meth:`waits` makes) and no ``tentative``
        acceptance is of this demand (on a loaded trace each pass asked every waiting demand's
        timers afresh, the same figures from the same lists pass after pass)."""
        if any(d == demand for _, d, _, _, _ in tentative):
            return self._timers(demand, lease_s, now, tentative)
        key = (demand, lease_s, self.history_limit_s, self.window, self.machine_floor_leases,
               self.rack_floor_leases, self.lease_waits, self.manual_start)
        kept = self._kept.get(key)
        if kept is not None and self._unchanged(demand, now, kept[0]):
            return kept[1]
        found = self._timers(demand, lease_s, now, tentative)
        self._kept[key] = (self._basis(demand), found)
        return found

    def _basis(self, demand: int) -> tuple[object, ...]:
        """What the lists of ``demand`` are now: each deque (or None), its length and its newest entry."""
        out: list[object] = []
        for level in (Level.MACHINE, Level.RACK):
            waits = self.lists.get((level, demand))
            out += (waits, len(waits) if waits else 0, waits[-1] if waits else None)
        return tuple(out)

    def _unchanged(self, demand: int, now: float, basis: tuple[object, ...]) -> bool:
        """Whether the lists of ``demand`` are as ``basis`` says and none has a wait expired at ``now``."""
        for i, level in enumerate((Level.MACHINE, Level.RACK)):
            waits = self.lists.get((level, demand))
            if waits is not basis[3 * i] or (len(waits) if waits else 0) != basis[3 * i + 1]:
                return False
            if waits and (waits[-1] is not basis[3 * i + 2] or now - waits[0][0] > self.history_limit_s):
                return False
        return True

    def _timers(self, demand: int, lease_s: float, now: float,
                tentative: Sequence[Acceptance] = ()) -> tuple[float, float]:
        mc = self._timer(Level.MACHINE, demand, self.machine_floor_leases * lease_s, now, tentative,
                         MANUAL_MACHINE_TIMER_S)
        rk = self._timer(Level.RACK, demand, self.rack_floor_leases * lease_s, now, tentative,
                         MANUAL_MACHINE_TIMER_S + MANUAL_RACK_TIMER_S)
        return mc, max(rk, mc)

    def _timer(self, level: Level, demand: int, floor: float, now: float, tentative: Sequence[Acceptance],
               manual: float) -> float:
        """One level's timer. When no ``tentative`` acceptance is of this level and demand its list is the one
        recorded, and the timer is kept while that list is unchanged (:meth:`_level_unchanged`): a lease end's
        re-auction accepts most bids at the machine level, and worked the rack timer of their demand out afresh
        after each of them (Algorithm 2 over the hundred waits of the list; issue 38)."""
        if any(lv is level and d == demand for lv, d, _, _, _ in tentative):
            return self._level_timer(level, demand, floor, now, tentative, manual)
        key = (level, demand, floor, manual, self.history_limit_s, self.window, self.manual_start)
        kept = self._kept_levels.get(key)
        if kept is not None and self._level_unchanged(level, demand, now, kept[0]):
            return kept[1]
        found = self._level_timer(level, demand, floor, now, (), manual)
        waits = self.lists.get((level, demand))
        self._kept_levels[key] = ((waits, len(waits) if waits else 0, waits[-1] if waits else None), found)
        return found

    def _level_unchanged(self, level: Level, demand: int, now: float, basis: tuple[object, ...]) -> bool:
        """Whether the list of (``level``, ``demand``) is as ``basis`` says and has no wait expired at ``now``."""
        waits = self.lists.get((level, demand))
        if waits is not basis[0] or (len(waits) if waits else 0) != basis[1]:
            return False
        return not waits or (waits[-1] is basis[2] and not now - waits[0][0] > self.history_limit_s)

    def _level_timer(self, level: Level, demand: int, floor: float, now: float, tentative: Sequence[Acceptance],
                     manual: float) -> float:
        tuned = tuned_timer(self.waits(level, demand, now, tentative))
        if tuned is None:
            tuned = manual if self.manual_start else floor
        return min(max(tuned, floor), max(self.history_limit_s, floor))
