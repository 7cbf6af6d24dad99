"""The time-shift grid: iteration starts at ``epoch + shift + k x period`` of the cluster clock.

Cassini (papers/cassini-mltcp-network-interleaving.txt §4.4.1 Eq. 4.5, §4.4.2 step 3)
interleaves the Up phases of jobs that share a link by delaying each job's iterations by
a time-shift within a common period; the agents apply the shift and, because noise and
stragglers make starts drift, measure the drift and re-align. The control plane sends
the shift, the period and the epoch the grid counts from (the scheduling pass that set
it); a shift of 0 is a real shift (the grid starts at the epoch).

Pure functions on cluster seconds, standard library only: the worker library
(:mod:`halyard.agent.worker`, imported by training scripts), the emulated agents and the
simulator's pacer all use them, so a shifted job runs the same timeline in simulate,
replay and on real processes.
"""

from __future__ import annotations

import math

# Share of a period a start may drift off its grid point before it is re-aligned on the next one.
# estimate: Cassini §4.4.2 says only that agents "measure the drift and adjust the time-shifts",
# and that adjustments are rare (§4.5.7); 10% of a period keeps noise of a few percent from
# costing a whole period while a real straggler is caught within one iteration.
DRIFT_TOLERANCE = 0.1
# Iterations the pacing rule is played out over to find a paced job's mean iteration time.
PACED_ITERATIONS = 256


def grid_at_or_after(t: float, anchor: float, period: float) -> float:
    """The first grid point ``anchor + k x period`` (any integer k) at or after ``t``;
    a point within a billionth of a period before ``t`` counts as ``t`` (float noise)."""
    k = math.ceil((t - anchor) / period - 1e-9)
    return anchor + k * period


def drift_s(start: float, anchor: float, period: float) -> float:
    """Signed offset of an iteration start from the nearest grid point, in ``(-period/2, period/2]``."""
    offset = (start - anchor) % period
    return offset - period if offset > period / 2 else offset


def grid_wait_s(now: float, anchor: float, period: float, tolerance: float = DRIFT_TOLERANCE) -> float:
    """How long to wait before starting the next iteration at ``now``: until the grid point when a
    little early, nothing when a little late (within ``tolerance`` of a period), else until the
    next grid point (drift correction)."""
    phase = (now - anchor) % period  # how far past the last grid point
    to_next = (period - phase) % period
    limit = tolerance * period
    if to_next <= limit:
        return to_next
    if phase <= limit:
        return 0.0
    return to_next


def paced_iteration_s(iteration_s: float, period: float, tolerance: float = DRIFT_TOLERANCE) -> float:
    """Mean time per iteration of a job whose iterations take ``iteration_s`` and start by the
    :func:`grid_wait_s` rule, from a grid point: ``period`` when an iteration fits in one
    (it waits for the next), a multiple of it when it needs several, ``iteration_s``
    without a period."""
    if period <= 0.0 or iteration_s <= 0.0:
        return iteration_s
    t = 0.0
    for _ in range(PACED_ITERATIONS):
        t += iteration_s
        t += grid_wait_s(t, 0.0, period, tolerance)
    return t / PACED_ITERATIONS


__all__ = ["DRIFT_TOLERANCE", "drift_s", "grid_at_or_after", "grid_wait_s", "paced_iteration_s"]
