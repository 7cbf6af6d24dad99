"""The link-contention model's two hot loops, compiled (numba) when the ``[fast]`` extra is installed: the
fabric's inner work.

- :func:`fair_histories` is the fair-sharing fluid simulation of one link
  (:meth:`halyard.emulator.contention._FluidLink.fair`). A loaded link pairs 0.05 s
  iterations with 1.2 s ones, so one simulation takes thousands of steps; on loaded
  traces these were most of a simulation's time (3.6 of LAS' 8.0 CPU
  seconds on 10k Philly jobs compressed 8x). It is the loop
  :meth:`~halyard.emulator.contention._FluidLink.weighted` runs with equal weights, step
  for step: the same dt, t and left by the same operations in the same order.
- :func:`mean_field_levels` is the bisection of
  :func:`~halyard.emulator.contention.mean_field_iteration_times`, the same sums in the
  same order (Python's ``sum`` adds left to right from 0).

numba compiles without fast-math (no reassociation, no fused multiply-add) and with
Python's error model, so both give the same floats to the last bit as the Python they
replace: ``tests/test_emulator_contention.py`` holds them to the Python loops, and
``tests/test_loaded_schedule_exact.py`` to event logs made before them.

Without numba (``pip install halyard`` without ``[fast]``) the same functions run as Python: :func:`njit`
is then the identity, so the loops are these very lines, and Python's float operations on numpy's float64
are the IEEE operations numba compiles, in the same order: every simulation gives the same floats, only
slower on loaded fabrics (tests/test_light_installs.py compares ``halyard simulate``'s summaries with and
without numba). :data:`COMPILED` says which runs.

Kept apart from :mod:`~halyard.emulator.contention` so that importing the emulator does not
import numba: the agents and daemons that never simulate a link do not pay for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

__all__ = ["COMPILED", "fair_histories", "fair_links", "mean_field_levels", "mean_field_links"]

_F = TypeVar("_F", bound=Callable[..., Any])

try:
    from numba import njit

    COMPILED = True
except ImportError:  # the [fast] extra is not installed: the same loops, run by Python
    COMPILED = False

    def njit(**_options: Any) -> Callable[[_F], _F]:  # type: ignore[no-redef]
        """numba's decorator without numba: the function itself."""
        return lambda function: function

_DOWN, _IDLE = -1.0, -2.0  # rate markers: in a Down phase; not started yet
# fair_histories remembers each combination of phases' rates when there are at most this many
# combinations (a link of 4 data-parallel jobs has 3^4 = 81, counting "not started"); past it, as
# with many-phase pipeline profiles, it water-fills at every step. Our choice: 64 KiB of rates.
RATE_TABLE_MAX = 2048


@njit(cache=True)
def _share_fairly(capacity: float, caps: np.ndarray, rates: np.ndarray, active: np.ndarray,
                  hit: np.ndarray) -> None:  # pragma: no cover - compiled
    """:func:`~halyard.emulator.contention.share_link_fairly` into ``rates``, the same operations in the same
    order: ``left / len(active)`` per round, capped flows (ascending) leave the round's remainder.
    ``active`` and ``hit``: work space, one flag per flow."""
    n = caps.shape[0]
    count = 0
    for i in range(n):
        rates[i] = 0.0
        active[i] = caps[i] > 0
        if active[i]:
            count += 1
    left = capacity
    while count > 0 and left > 1e-15:
        share = left / count
        capped = 0
        for i in range(n):  # every flow is judged against the round's share before any is moved
            hit[i] = active[i] and caps[i] - rates[i] <= share + 1e-15
            if hit[i]:
                capped += 1
        if capped == 0:
            for i in range(n):
                if active[i]:
                    rates[i] += share
            break
        for i in range(n):
            if hit[i]:
                left -= caps[i] - rates[i]
                rates[i] = caps[i]
                active[i] = False
                count -= 1


@njit(cache=True)
def fair_histories(amounts: np.ndarray, ups: np.ndarray, demands: np.ndarray, lengths: np.ndarray,
                   up_done: np.ndarray, shifts: np.ndarray, capacity: float,
                   iterations: int) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Every job's iteration durations until each has ``iterations``: row j of the first array, its first
    ``counts[j]`` entries (the second array). Per job j and phase p: ``amounts[j, p]`` (GB of an Up phase,
    seconds of a Down one), ``ups``, ``demands``; ``lengths[j]`` phases; ``up_done[j]`` the GB under which an
    Up phase is over; ``shifts[j]`` its start."""
    n = lengths.shape[0]
    phase = np.full(n, -1, np.int64)  # -1 until the job starts at its shift
    waiting = n
    left = np.zeros(n)
    iter_start = np.zeros(n)
    history = np.empty((n, max(4 * iterations, 16)))
    counts = np.zeros(n, np.int64)
    caps = np.zeros(n)
    shares = np.zeros(n)
    rates = np.zeros(n)
    active = np.zeros(n, np.bool_)
    hit = np.zeros(n, np.bool_)
    # The rates depend only on the phases: combination code = sum_j (phase_j + 1) x stride_j.
    stride = np.zeros(n, np.int64)
    combos = 1
    for j in range(n):
        stride[j] = combos
        combos = combos * (lengths[j] + 1) if combos <= RATE_TABLE_MAX else combos
    tabled = combos <= RATE_TABLE_MAX
    table = np.empty((combos if tabled else 1, n))
    known = np.zeros(combos if tabled else 1, np.bool_)
    code = 0
    t = 0.0
    fewest = 0
    while fewest < iterations:
        if waiting > 0:
            for j in range(n):
                if phase[j] < 0 and shifts[j] <= t + 1e-12:
                    iter_start[j] = t
                    phase[j] = 0
                    left[j] = amounts[j, 0]
                    waiting -= 1
                    code += stride[j]
        if tabled and known[code]:
            for j in range(n):
                rates[j] = table[code, j]
        else:
            for j in range(n):
                p = phase[j]
                caps[j] = demands[j, p] if p >= 0 and ups[j, p] else 0.0
            _share_fairly(capacity, caps, shares, active, hit)
            for j in range(n):
                p = phase[j]
                rates[j] = _IDLE if p < 0 else (shares[j] if ups[j, p] else _DOWN)
            if tabled:
                for j in range(n):
                    table[code, j] = rates[j]
                known[code] = True
        dt = np.inf
        for j in range(n):
            r = rates[j]
            if r > 0.0:
                gap = left[j] / r
            elif r == _DOWN:
                gap = left[j]
            elif r == _IDLE:
                gap = shifts[j] - t
            else:
                continue  # an Up phase that gets no share this step
            if gap < dt:
                dt = gap
        if dt == np.inf:
            raise RuntimeError("no job can make progress on the link")
        if dt < 0.0:
            dt = 0.0
        t += dt
        for j in range(n):
            r = rates[j]
            if r == _DOWN:
                x = left[j] - dt
                left[j] = x
                if x > 1e-12:
                    continue
            elif r >= 0.0:
                x = left[j] - r * dt
                left[j] = x
                if x > up_done[j]:
                    continue
            else:
                continue  # not started
            # The phase is over; a phase of zero length hands over to the next at once.
            p = phase[j]
            while True:
                p += 1
                if p == lengths[j]:
                    if counts[j] == history.shape[1]:
                        grown = np.empty((n, 2 * history.shape[1]))
                        grown[:, :history.shape[1]] = history
                        history = grown
                    history[j, counts[j]] = t - iter_start[j]
                    counts[j] += 1
                    iter_start[j] = t
                    if counts[j] == fewest + 1:
                        fewest = counts.min()
                    p = 0
                x = amounts[j, p]
                if x > 0.0:
                    break
            code += (p - phase[j]) * stride[j]
            phase[j] = p
            left[j] = x
    return history, counts


@njit(cache=True)
def _mean_field_times(amounts: np.ndarray, demands: np.ndarray, lengths: np.ndarray, lam: float,
                      times: np.ndarray) -> None:  # pragma: no cover - compiled
    """Per distinct profile k, its iteration at water level ``lam``: ``sum`` over its phases of the GB over
    ``min(demand, lam)`` (Up) or the duration (Down), left to right."""
    for k in range(lengths.shape[0]):
        total = 0.0
        for q in range(lengths[k]):
            demand = demands[k, q]
            total += amounts[k, q] / min(demand, lam) if demand > 0.0 else amounts[k, q]
        times[k] = total


@njit(cache=True)
def _mean_field_load(amounts: np.ndarray, demands: np.ndarray, lengths: np.ndarray, which: np.ndarray,
                     gbytes: np.ndarray, lam: float, times: np.ndarray) -> float:  # pragma: no cover - compiled
    _mean_field_times(amounts, demands, lengths, lam, times)
    load = 0.0
    for j in range(which.shape[0]):
        load += gbytes[j] / times[which[j]]
    return load


@njit(cache=True)
def mean_field_levels(amounts: np.ndarray, demands: np.ndarray, lengths: np.ndarray, which: np.ndarray,
                      gbytes: np.ndarray, capacity: float, hi: float,
                      bisections: int) -> tuple[bool, np.ndarray]:  # pragma: no cover - compiled
    """``(fits, times)``: whether the link carries every job at full demand (``hi``, the highest demand), else
    each distinct profile's iteration at the water level where the mean load meets ``capacity``
    (``bisections`` halvings). Distinct profile k: ``lengths[k]`` phases of ``amounts`` (GB of an Up phase,
    seconds of a Down one) and ``demands``; job j: profile ``which[j]``, ``gbytes[j]`` per iteration."""
    times = np.zeros(lengths.shape[0])
    if hi <= 0.0 or _mean_field_load(amounts, demands, lengths, which, gbytes, hi, times) <= capacity:
        return True, times
    lo = 0.0
    for _ in range(bisections):
        mid = (lo + hi) / 2
        if _mean_field_load(amounts, demands, lengths, which, gbytes, mid, times) > capacity:
            hi = mid
        else:
            lo = mid
    _mean_field_times(amounts, demands, lengths, lo, times)
    return False, times


@njit(cache=True)
def fair_links(amounts: np.ndarray, ups: np.ndarray, demands: np.ndarray, lengths: np.ndarray,
               up_done: np.ndarray, rows: np.ndarray, starts: np.ndarray, shifts: np.ndarray,
               capacities: np.ndarray, iterations: int) -> np.ndarray:  # pragma: no cover - compiled
    """:func:`fair_histories` of many links in one call (a settle solves ~10 at once; each call from Python
    cost ~20 us of argument handling, about what a small link's simulation costs). The tables are indexed
    by profile row; link l holds the jobs ``starts[l]`` to ``starts[l + 1]``: profile ``rows[j]``, start
    ``shifts[j]``, on ``capacities[l]``. Row j of the answer: job j's first ``iterations`` iterations."""
    out = np.empty((rows.shape[0], iterations))
    for link in range(capacities.shape[0]):
        a, b = starts[link], starts[link + 1]
        at = rows[a:b]
        history, _ = fair_histories(amounts[at], ups[at], demands[at], lengths[at], up_done[at], shifts[a:b],
                                    capacities[link], iterations)
        out[a:b, :] = history[:, :iterations]
    return out


@njit(cache=True)
def mean_field_links(amounts: np.ndarray, demands: np.ndarray, lengths: np.ndarray, gbytes: np.ndarray,
                     peaks: np.ndarray, iteration_s: np.ndarray, rows: np.ndarray, starts: np.ndarray,
                     capacities: np.ndarray, bisections: int) -> np.ndarray:  # pragma: no cover - compiled
    """:func:`mean_field_levels` of many links in one call, laid out as for :func:`fair_links` (``demands``:
    0 in a Down phase). Equal rows next to each other on a link are one distinct profile, solved once, in
    order of first appearance. Per job: its iteration time, its dedicated ``iteration_s`` where its link
    carries every job at full demand."""
    out = iteration_s[rows]
    for link in range(capacities.shape[0]):
        a, b = starts[link], starts[link + 1]
        at = rows[a:b]
        which = np.empty(b - a, np.int64)
        distinct = np.empty(b - a, np.int64)
        count = 0
        hi = 0.0
        for j in range(b - a):
            if j == 0 or at[j] != at[j - 1]:
                distinct[count] = at[j]
                count += 1
                hi = max(hi, peaks[at[j]])
            which[j] = count - 1
        kept = distinct[:count]
        fits, times = mean_field_levels(amounts[kept], demands[kept], lengths[kept], which, gbytes[at],
                                        capacities[link], hi, bisections)
        if not fits:
            for j in range(b - a):
                out[a + j] = times[which[j]]
    return out
