"""Link contention between jobs: Up/Down phases, Cassini's unified circle, fair and MLTCP sharing.

Cassini §4.1 (papers/cassini-mltcp-network-interleaving.txt): a training job's
bandwidth demand on a link repeats every iteration as a sequence of Up (busy) and
Down (quiet) phases -- data parallel: forward quiet, backward + all-reduce busy;
tensor, pipeline and hybrid plans: several phases of different demand. This
module gives

- :class:`DemandProfile` and builders for data-parallel, tensor-parallel and
  pipeline/hybrid plans (:func:`data_parallel_profile`, :func:`profile_from_iteration`,
  :func:`tensor_parallel_profile`, :func:`pipeline_profile`);
- (Cassini's geometric abstraction -- the unified circle, Table 4.1's score and
  Eq. 4.5's time-shifts -- is what a policy computes: :mod:`halyard.policies.cassini_math`.)
- :func:`shared_link_iteration_times`: the jobs' iteration times on a shared link
  under (a) fair sharing, (b) given time-shifts (jobs start at their shift, so
  interleaved phases never compete), (c) MLTCP-style unfair sharing that scales a
  flow's share by ``F(bytes_ratio)`` (MLTCP, Eq. 1.2) and converges towards
  interleaving. A fluid simulation: compute (Down) phases last their dedicated
  time; an Up phase must move its bytes, at most at its dedicated rate, and the
  link's capacity is split among the Up phases active at each instant
  (water-filling, weighted for MLTCP);
- :func:`mean_field_iteration_times`: the many-jobs limit of the same model (every
  active flow at one water level that fills the link on average), for links
  shared by more jobs than the fluid simulation can afford.

Pure functions, no state; the simulator wiring is described in
docs/performance-model.md ("Link contention").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from halyard.emulator.performance import IterationTime

SHARING = ("fair", "mltcp")
# MLTCP's F(bytes_ratio) is "a linearly increasing function" (Cassini/MLTCP thesis §1,
# Eq. 1.2); its slope is not given in the text. estimate: F(r) = 1 + r, so a flow that has
# sent all of its iteration's bytes grows its window twice as fast as one that has sent none.
MLTCP_INTERCEPT = 1.0
MLTCP_SLOPE = 1.0
MEAN_FIELD_BISECTIONS = 50  # halvings of the water level: far below any measurable slowdown
PAD_NOISE_S = 1e-12  # a shorter wait to a paced period is float rounding of the cycle, not a quiet phase
# An Up phase with less than this fraction of the profile's GB per iteration left (of 1 GB, for a
# profile under 1 GB) is over: what is left is float rounding of the fluid steps, not traffic.
UP_DONE_FRACTION = 1e-12


def up_done_gb(gbytes: float) -> float:
    """The GB left under which an Up phase of a profile moving ``gbytes`` per iteration is over."""
    return UP_DONE_FRACTION * max(1.0, max(gbytes, 1e-300))


@dataclass(frozen=True, slots=True)
class Phase:
    """A stretch of one iteration: ``duration_s`` at ``demand_gbyte_s`` on the link (0 = Down)."""

    duration_s: float
    demand_gbyte_s: float = 0.0

    @property
    def up(self) -> bool:
        return self.demand_gbyte_s > 0.0


@dataclass(frozen=True, slots=True)
class DemandProfile:
    """One iteration's bandwidth demand on a link, as the job sees it running alone."""

    phases: tuple[Phase, ...]
    # The phases' total, summed once: the fabric reads it for every job on every link it solves
    # (~300k reads on a 10k-job loaded Tiresias run). Not compared: it follows from the phases.
    iteration_s: float = field(init=False, repr=False, compare=False)
    gbytes: float = field(init=False, repr=False, compare=False)  # GB moved over the link per iteration (likewise)

    def __post_init__(self) -> None:
        if not self.phases or any(p.duration_s < 0 or p.demand_gbyte_s < 0 for p in self.phases):
            raise ValueError("a profile needs phases with durations and demands >= 0")
        object.__setattr__(self, "iteration_s", sum(p.duration_s for p in self.phases))
        object.__setattr__(self, "gbytes", sum(p.duration_s * p.demand_gbyte_s for p in self.phases))
        if self.iteration_s <= 0:
            raise ValueError("a profile's iteration must last > 0 s")

    def padded_to(self, cycle_s: float) -> DemandProfile:
        """This profile with a quiet phase appended so one iteration lasts ``cycle_s``: a paced job's wait
        for its next grid point, as the fabric charges it and Cassini's lock plans it; unchanged when it
        already lasts that long."""
        wait = cycle_s - self.iteration_s
        return DemandProfile((*self.phases, Phase(wait))) if wait > PAD_NOISE_S else self

    @property
    def up_fraction(self) -> float:
        return sum(p.duration_s for p in self.phases if p.up) / self.iteration_s

    def demand_at(self, t: float) -> float:
        """Demand at time ``t`` (any real; the pattern repeats every iteration)."""
        t = t % self.iteration_s
        for p in self.phases:
            if t < p.duration_s:
                return p.demand_gbyte_s
            t -= p.duration_s
        return self.phases[-1].demand_gbyte_s


# ---------------------------------------------------------------- profiles
def data_parallel_profile(iteration_s: float, communication_s: float, demand_gbyte_s: float) -> DemandProfile:
    """Data parallel (Cassini Fig. 4.1a): a quiet Down phase (forward and the first
    part of backward), then an Up phase of ``communication_s`` at ``demand_gbyte_s``
    (the all-reduce, overlapping the end of backward) that ends the iteration."""
    comm = min(communication_s, iteration_s)
    return DemandProfile((Phase(iteration_s - comm), Phase(comm, demand_gbyte_s)))


def profile_from_iteration(timing: IterationTime, link_gbytes: float) -> DemandProfile:
    """The data-parallel profile of a :class:`~halyard.emulator.IterationTime`.

    ``link_gbytes`` is what the job sends over the link in question per iteration
    (for a node's NIC in a two-level all-reduce, about ``2 (m-1)/m x S``); the Up
    phase lasts the whole all-reduce, so its demand is ``link_gbytes / communication_s``.
    """
    if timing.communication_s <= 0 or link_gbytes <= 0:
        return DemandProfile((Phase(timing.total_s),))
    return data_parallel_profile(timing.total_s, timing.communication_s, link_gbytes / timing.communication_s)


def tensor_parallel_profile(forward_s: float, backward_s: float, loading_s: float,
                            forward_gbyte_s: float, backward_gbyte_s: float) -> DemandProfile:
    """Tensor parallel (Cassini Fig. 4.1c): all-reduces inside forward and backward keep
    the link busy in both, then a short quiet period while the next batch loads."""
    return DemandProfile((Phase(forward_s, forward_gbyte_s), Phase(backward_s, backward_gbyte_s),
                          Phase(loading_s)))


def pipeline_profile(stage_s: float, micro_batches: int, activation_gbyte_s: float, send_s: float,
                     allreduce_s: float = 0.0, allreduce_gbyte_s: float = 0.0) -> DemandProfile:
    """A pipeline stage's link (Cassini Fig. 4.1d, hybrid): each micro-batch computes for
    ``stage_s`` and sends its activations (forward) or gradients (backward) in ``send_s``;
    with data parallelism across pipelines the iteration ends with the gradient
    all-reduce of the stage. 2 x micro_batches Up pulses, then the all-reduce."""
    phases: list[Phase] = []
    for _ in range(2 * micro_batches):
        phases += [Phase(stage_s), Phase(send_s, activation_gbyte_s)]
    if allreduce_s > 0:
        phases.append(Phase(allreduce_s, allreduce_gbyte_s))
    return DemandProfile(tuple(phases))


# ---------------------------------------------------------------- shared-link iteration times
@dataclass(frozen=True, slots=True)
class SharedLinkResult:
    """Per job: steady-state seconds per iteration and every iteration's duration."""

    iteration_s: tuple[float, ...]
    history_s: tuple[tuple[float, ...], ...]

    def slowdown(self, profiles: Sequence[DemandProfile]) -> tuple[float, ...]:
        """Iteration time over the dedicated (uncontended) one, per job."""
        return tuple(t / p.iteration_s for t, p in zip(self.iteration_s, profiles, strict=True))


def mltcp_weight(bytes_ratio: float) -> float:
    """MLTCP Eq. 1.2's ``F(bytes_ratio)``: linearly increasing (``MLTCP_INTERCEPT + MLTCP_SLOPE x r``)."""
    return MLTCP_INTERCEPT + MLTCP_SLOPE * bytes_ratio


def share_link(capacity: float, caps: Sequence[float], weights: Sequence[float] | None = None) -> list[float]:
    """Weighted max-min fair rates (water-filling): no flow above its cap, the rest by weight.

    ``weights`` None is fair sharing (every weight 1), computed as ``left / n``: the same floating-point
    result as unit weights (``left x 1 / n``, and a sum of n ones is n), one division fewer per flow
    in the fluid simulation's hot loop."""
    rates = [0.0] * len(caps)
    active = [i for i, c in enumerate(caps) if c > 0]
    left = capacity
    while active and left > 1e-15:
        if weights is None:
            shares = dict.fromkeys(active, left / len(active))
        else:
            wsum = sum(weights[i] for i in active)
            shares = {i: left * weights[i] / wsum for i in active}
        capped = [i for i in active if caps[i] - rates[i] <= shares[i] + 1e-15]
        if not capped:
            for i in active:
                rates[i] += shares[i]
            break
        for i in capped:
            left -= caps[i] - rates[i]
            rates[i] = caps[i]
        active = [i for i in active if i not in capped]
    return rates


def share_link_fairly(capacity: float, caps: Sequence[float]) -> list[float]:
    """Fair sharing: :func:`share_link` with every weight 1."""
    return share_link(capacity, caps)


def shared_link_iteration_times(
    profiles: Sequence[DemandProfile],
    capacity_gbyte_s: float,
    *,
    sharing: str = "fair",
    time_shifts_s: Sequence[float] | None = None,
    iterations: int = 40,
    steady: int = 10,
    mltcp_steps_per_phase: int = 20,
) -> SharedLinkResult:
    """Iteration times of jobs sharing one link, by fluid simulation.

    Job j starts at ``time_shifts_s[j]`` (0 by default) and runs its phases in a
    loop: a Down phase takes its dedicated duration; an Up phase must move
    ``duration x demand`` GB at no more than ``demand`` GB/s, and the capacity is
    shared among the Up phases active at each instant -- equally
    (``sharing="fair"``, water-filling) or in proportion to
    ``F(bytes_ratio)`` (``"mltcp"``), the share of the job's per-iteration bytes
    already sent this iteration. A job alone on the link runs at its dedicated
    speed. Returns the mean of the last ``steady`` iterations per job.
    """
    if sharing not in SHARING:
        raise ValueError(f"sharing must be one of {', '.join(SHARING)}, got {sharing!r}")
    n = len(profiles)
    shifts = list(time_shifts_s) if time_shifts_s is not None else [0.0] * n
    if len(shifts) != n:
        raise ValueError("give one time-shift per profile")
    fluid = _FluidLink(profiles, capacity_gbyte_s, shifts)
    history = fluid.fair(iterations) if sharing == "fair" else fluid.weighted(iterations, mltcp_steps_per_phase)
    means = tuple(float(np.mean(h[iterations - steady:iterations])) for h in history)
    return SharedLinkResult(iteration_s=means, history_s=tuple(tuple(h) for h in history))


def fair_iteration_times(profiles: Sequence[DemandProfile], capacity_gbyte_s: float, time_shifts_s: Sequence[float],
                         iterations: int, steady: int) -> tuple[float, ...]:
    """``shared_link_iteration_times(..., sharing="fair").iteration_s``, the same floats, without keeping
    every iteration as Python floats: :func:`fair_link_times` of one link."""
    if len(time_shifts_s) != len(profiles):
        raise ValueError("give one time-shift per profile")
    table = ProfileTable()
    rows = [table.add(p) for p in profiles]
    return tuple(fair_link_times(table, rows, [0, len(rows)], time_shifts_s, [capacity_gbyte_s], iterations,
                                 steady).tolist())


def phase_amounts(profile: DemandProfile) -> list[float]:
    """What entering each phase leaves to do, as the fluid simulation and the mean-field limit count it:
    the GB of an Up phase (its duration x demand), the seconds of a Down one."""
    return [ph.duration_s * ph.demand_gbyte_s if ph.up else ph.duration_s for ph in profile.phases]


class ProfileTable:
    """Distinct :class:`DemandProfile` objects as the compiled link kernels read them, one row each, worked out
    once: per phase the amount (:func:`phase_amounts`), the demand (as the fluid simulation reads it, and
    as the mean-field limit does: 0 in a Down phase) and whether it is Up; per profile its phase count, GB
    per iteration, highest demand, iteration and the GB under which an Up phase is over. Rows are
    zero-padded to the longest profile (the kernels read a row's first ``lengths`` entries only). A caller
    that solves the same profiles many times (the fabric) adds each once and calls
    :func:`fair_link_times` and :func:`mean_field_link_times` with row numbers."""

    # The first table's size; it doubles as profiles come. A data-parallel profile has 2 phases, a tensor
    # parallel one 3 (pipelines have more and widen it).
    FIRST_ROWS, FIRST_PHASES = 16, 4

    def __init__(self) -> None:
        self.size = 0
        rows, width = self.FIRST_ROWS, self.FIRST_PHASES
        self.amounts, self.demands, self.mean_field_demands = (np.zeros((rows, width)), np.zeros((rows, width)),
                                                               np.zeros((rows, width)))
        self.ups = np.zeros((rows, width), np.bool_)
        self.lengths = np.zeros(rows, np.int64)
        self.gbytes, self.peaks, self.up_done, self.iterations = (np.zeros(rows), np.zeros(rows), np.zeros(rows),
                                                                  np.zeros(rows))

    def _grow(self, rows: int, width: int) -> None:
        for name in ("amounts", "demands", "mean_field_demands", "ups"):
            old = getattr(self, name)
            new = np.zeros((rows, width), old.dtype)
            new[:old.shape[0], :old.shape[1]] = old
            setattr(self, name, new)
        for name in ("lengths", "gbytes", "peaks", "up_done", "iterations"):
            old = getattr(self, name)
            new = np.zeros(rows, old.dtype)
            new[:old.shape[0]] = old
            setattr(self, name, new)

    def add(self, profile: DemandProfile) -> int:
        """A row for ``profile``; its number."""
        phases = profile.phases
        k, n = self.size, len(phases)
        if k == self.amounts.shape[0] or n > self.amounts.shape[1]:
            self._grow(max(self.amounts.shape[0], 2 * k), max(self.amounts.shape[1], n))
        self.amounts[k, :n] = phase_amounts(profile)
        self.demands[k, :n] = [ph.demand_gbyte_s for ph in phases]
        self.mean_field_demands[k, :n] = [ph.demand_gbyte_s if ph.up else 0.0 for ph in phases]
        self.ups[k, :n] = [ph.up for ph in phases]
        self.lengths[k] = n
        gbytes = profile.gbytes
        self.gbytes[k] = gbytes
        self.peaks[k] = max(ph.demand_gbyte_s for ph in phases)
        self.up_done[k] = up_done_gb(gbytes)
        self.iterations[k] = profile.iteration_s
        self.size = k + 1
        return k


def fair_link_times(table: ProfileTable, rows: Sequence[int] | np.ndarray, starts: Sequence[int],
                    time_shifts_s: Sequence[float], capacities: Sequence[float], iterations: int,
                    steady: int) -> np.ndarray:
    """Fair sharing's steady iteration per job on many links at once (one compiled call,
    :func:`~halyard.emulator.link_kernels.fair_links`): link l holds jobs ``starts[l]`` to ``starts[l + 1]``
    (``starts`` ends with the job count), job j runs ``table``'s profile ``rows[j]`` from
    ``time_shifts_s[j]``. Each job's figure is numpy's mean of its iterations ``iterations - steady`` to
    ``iterations``, the same float per job whichever other links share the call (a row of a C-ordered
    array reduces as the 1-D array of its values does): :func:`shared_link_iteration_times`' figure."""
    from halyard.emulator.link_kernels import fair_links

    if not 0 < steady <= iterations:
        raise ValueError(f"need 0 < steady <= iterations, got steady={steady}, iterations={iterations}")
    history = fair_links(table.amounts, table.ups, table.demands, table.lengths, table.up_done,
                         np.array(rows, np.int64), np.array(starts, np.int64), np.array(time_shifts_s, np.float64),
                         np.array(capacities, np.float64), iterations)
    return np.ascontiguousarray(history[:, iterations - steady:]).mean(axis=1)


def mean_field_link_times(table: ProfileTable, rows: Sequence[int] | np.ndarray, starts: Sequence[int],
                          capacities: Sequence[float]) -> np.ndarray:
    """:func:`mean_field_iteration_times` per job on many links at once, laid out as for
    :func:`fair_link_times` (one compiled call, :func:`~halyard.emulator.link_kernels.mean_field_links`);
    equal rows next to each other on a link are solved once. A job whose link carries every job at full
    demand keeps its dedicated iteration."""
    from halyard.emulator.link_kernels import mean_field_links

    at = np.array(rows, np.int64)
    return mean_field_links(table.amounts, table.mean_field_demands, table.lengths, table.gbytes, table.peaks,
                            table.iterations, at, np.array(starts, np.int64), np.array(capacities, np.float64),
                            MEAN_FIELD_BISECTIONS)


class _FluidLink:
    """The fluid simulation's state: each phase's figures read once (the loops run millions of
    steps on a loaded link) -- up or not, demand, and what entering it leaves to do (GB for Up,
    seconds for Down).

    :meth:`weighted` is the general loop (any weights, re-evaluated every step); :meth:`fair`
    is the same arithmetic specialised to equal weights, where the rates depend only on which
    phase each job is in: it water-fills each combination once and keeps no bytes ratio, and
    gives the same iteration times to the last bit (``tests/test_emulator_contention.py``).
    """

    def __init__(self, profiles: Sequence[DemandProfile], capacity_gbyte_s: float, shifts: list[float]) -> None:
        self.profiles = profiles
        self.capacity = capacity_gbyte_s
        self.shifts = shifts
        self.ups = [[ph.up for ph in p.phases] for p in profiles]
        self.demands = [[ph.demand_gbyte_s for ph in p.phases] for p in profiles]
        self.amounts = [phase_amounts(p) for p in profiles]
        self.lengths = [len(p.phases) for p in profiles]
        self.total_gb = [max(p.gbytes, 1e-300) for p in profiles]
        self.up_done = [up_done_gb(p.gbytes) for p in profiles]

    def weighted(self, iterations: int, steps_per_phase: int, *, mltcp: bool = True) -> list[list[float]]:
        """Every job's iteration durations until each has ``iterations``; MLTCP weights
        (re-evaluated ``steps_per_phase`` times per Up phase), or equal ones with ``mltcp=False``."""
        profiles, capacity_gbyte_s, shifts = self.profiles, self.capacity, self.shifts
        ups, demands, amounts, lengths = self.ups, self.demands, self.amounts, self.lengths
        total_gb, up_done = self.total_gb, self.up_done
        steps = [[ph.duration_s / steps_per_phase for ph in p.phases] for p in profiles]
        n = len(profiles)
        phase = [0] * n
        left = [0.0] * n  # seconds (Down) or GB (Up) left in the current phase
        sent = [0.0] * n  # GB sent this iteration
        started = [False] * n
        iter_start = [0.0] * n
        history: list[list[float]] = [[] for _ in range(n)]
        jobs = range(n)

        t = 0.0
        fewest = 0  # iterations finished by the job that has finished fewest
        while fewest < iterations:
            for j in jobs:
                if not started[j] and shifts[j] <= t + 1e-12:
                    started[j], iter_start[j] = True, t
                    phase[j], left[j] = 0, amounts[j][0]
            up = [started[j] and ups[j][phase[j]] for j in jobs]
            caps = [demands[j][phase[j]] if up[j] else 0.0 for j in jobs]
            if mltcp:
                rates = share_link(capacity_gbyte_s, caps, [mltcp_weight(sent[j] / total_gb[j]) for j in jobs])
            else:
                rates = share_link_fairly(capacity_gbyte_s, caps)
            dt = math.inf
            for j in jobs:
                if not started[j]:
                    dt = min(dt, shifts[j] - t)
                elif up[j]:
                    if rates[j] > 0:
                        dt = min(dt, left[j] / rates[j])
                    if mltcp:  # rates follow the bytes ratio: re-evaluate often
                        dt = min(dt, steps[j][phase[j]])
                else:
                    dt = min(dt, left[j])
            if not math.isfinite(dt):
                raise RuntimeError("no job can make progress on the link")
            dt = max(dt, 0.0)
            t += dt
            for j in jobs:
                if not started[j]:
                    continue
                if up[j]:
                    moved = rates[j] * dt
                    left[j] -= moved
                    sent[j] += moved
                    done = left[j] <= up_done[j]
                else:
                    left[j] -= dt
                    done = left[j] <= 1e-12
                # A phase of zero length (or one just finished) hands over to the next.
                while done:
                    k = phase[j] + 1
                    if k == lengths[j]:
                        history[j].append(t - iter_start[j])
                        iter_start[j], sent[j] = t, 0.0
                        fewest = min(len(h) for h in history)
                        k = 0
                    phase[j], left[j] = k, amounts[j][k]
                    done = left[j] <= 0.0
        return history

    def fair(self, iterations: int) -> list[list[float]]:
        """:meth:`weighted` with equal weights, step for step: the same dt, t and left, by the same
        operations in the same order, compiled (:func:`~halyard.emulator.link_kernels.fair_histories`;
        imported here so that only a run that simulates a link loads numba)."""
        from halyard.emulator.link_kernels import fair_histories

        table, n = ProfileTable(), len(self.profiles)
        for p in self.profiles:
            table.add(p)
        history, counts = fair_histories(table.amounts[:n], table.ups[:n], table.demands[:n], table.lengths[:n],
                                         table.up_done[:n], np.array(self.shifts, np.float64),
                                         float(self.capacity), iterations)
        return [history[j, :counts[j]].tolist() for j in range(n)]


def mean_field_iteration_times(profiles: Sequence[DemandProfile], capacity_gbyte_s: float) -> tuple[float, ...]:
    """Iteration times on a shared link when many jobs share it: the mean-field limit of the
    fluid simulation, for links where simulating every phase would cost too much.

    With many jobs the number of Up phases active at once is close to its mean, so
    every active flow gets the same water level ``lam`` (its demand if lower). Job
    j then takes ``T_j(lam) = sum_Down d + sum_Up bytes / min(demand, lam)`` per
    iteration and moves ``B_j`` GB in it; the link carries ``sum_j B_j / T_j(lam)``
    on average. If that fits the capacity at ``lam`` = every demand, no job slows;
    else ``lam`` is the level at which it equals the capacity (bisection; the load
    rises with ``lam``). It ignores the fluctuations of how many jobs are Up, so it
    slows jobs less than the fluid simulation does (docs/performance-model.md
    gives the measured gap).
    """
    # Each phase as the figure its term needs (ProfileTable: an Up phase's GB, the same product the sum
    # always formed, and demand; a Down phase's duration and 0). The compiled bisection adds the same terms
    # in the same order as summing over the phases, so the result is unchanged to the last bit; a profile
    # repeated next to itself (a rack's uplink carries many copies of one job) is evaluated once per level.
    if not profiles:
        return ()
    table = ProfileTable()
    ids: dict[DemandProfile, int] = {}
    for p in profiles:
        if p not in ids:
            ids[p] = table.add(p)
    rows = [ids[p] for p in profiles]
    return tuple(mean_field_link_times(table, rows, [0, len(rows)], [capacity_gbyte_s]).tolist())
