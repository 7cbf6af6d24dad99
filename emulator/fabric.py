"""The simulated fabric: which running jobs share which links, and how much they slow each other.

A job whose GPUs sit on several nodes communicates through each of those
nodes' NICs, and through the uplinks of its racks when it spans racks (or, in a
cluster with switch links, the links of the routes between its racks:
:meth:`~halyard.datamodel.Cluster.inter_rack_links`). Every
such link is shared by the jobs that cross it. Per link, each job's demand over
one iteration is the Up/Down profile that
:meth:`~halyard.emulator.PerformanceModel.job_timing` computed its dedicated
iteration with (Cassini §4.1): the two-level gradient all-reduce of a
data-parallel job (Fig. 4.1a), the tensor collectives, activation sends and
per-stage all-reduces of a tensor, pipeline or hybrid plan (Fig. 4.1c/d). The
jobs' iteration times come from the fluid simulation of
:func:`~halyard.emulator.contention.shared_link_iteration_times` under fair or
MLTCP sharing. A job's slowdown is the largest over the links it crosses (links
are treated independently, as Cassini's per-link compatibility does).

Where each job's phase starts matters: identical jobs whose all-reduces start
together halve each other's bandwidth, and fair sharing keeps whatever offset
they have (a fluid fair share neither pulls colliding jobs apart nor together).
A job's phase is where its iterations sit on the cluster clock: its time-shift
grid ``epoch + shift + k x period`` when a policy set one (the worker library and
the emulated agents start iterations on that grid; a shift of 0 s is a shift),
else the instant it started making progress, modulo its iteration -- both taken from
the start of the run's time axis (``origin_s``), so that a run shifted on its clock
(replay starts its trace a whole number of rounds after its clock) sets the same phases.
A paced job (a shift with a period) waits, quiet, for its next grid point: its profile on
each link is padded to its paced cycle and its phase taken modulo that cycle, so jobs on
one period keep their offsets; a job without one keeps its own iteration, and two jobs whose
iterations differ at all sit at whatever offset their anchors give.

Drivers :meth:`Fabric.place` and :meth:`Fabric.remove` jobs as they start,
move and stop, then :meth:`Fabric.settle` recomputes only the links whose set
of jobs changed and says whose slowdown moved. Results are cached per link
state (profiles, phases on a 1/``PHASE_BINS`` grid, capacity), since a trace
repeats the same models and placements many times. :meth:`Fabric.link_census` reads the
links' state for measurement (benchmarks/cassini_census.py).
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from halyard.datamodel import Allocation, Cluster, JobSpec
from halyard.emulator.contention import (
    SHARING,
    DemandProfile,
    ProfileTable,
    fair_link_times,
    mean_field_link_times,
    shared_link_iteration_times,
)
from halyard.emulator.parallel import JobTiming, link_gbytes
from halyard.emulator.performance import IterationTime, PerformanceModel
from halyard.timeshift import paced_iteration_s

__all__ = ["CACHE_ENTRIES", "FLUID_MAX_JOBS", "PHASE_BINS", "SIM_ITERATIONS", "SIM_STEADY", "Fabric", "Link",
           "link_gbytes"]

# A job's phase on the clock is rounded to 1/PHASE_BINS of its iteration for the cache key:
# a 1/64 iteration offset is far below an all-reduce phase (tens of % of an iteration).
PHASE_BINS = 64
# Slowdowns closer than this are the same rate: a driver does not re-rate a job for less.
SLOWDOWN_TOLERANCE = 1e-9
# The fluid simulation's window (iterations simulated, of which the last are averaged);
# enough for fair sharing's steady state (it keeps offsets) and MLTCP's convergence.
SIM_ITERATIONS, SIM_STEADY = 24, 8
# Beyond this many jobs on a link the fluid simulation (cost ~ jobs^2 x the ratio of the
# longest to the shortest iteration) gives way to its mean-field limit, which costs
# ~0.3 ms at any size and slows jobs 6-10% less on average (docs/performance-model.md).
FLUID_MAX_JOBS = 4
# The most link states a fabric remembers (our choice): a 10k-job loaded run solves ~10-20k distinct
# states, most of them once; the oldest are dropped first, which changes no result, only the work.
CACHE_ENTRIES = 65_536

# A job's place in its link's solve order: its profile there as plain numbers, its phase bin, its id.
_Order = tuple[tuple[tuple[float, float], ...], int, str]


@dataclass(frozen=True, slots=True)
class Link:
    """A shared link: a node's NIC (``kind="nic"``), a rack's uplink to the spine (``"uplink"``) or a
    switch-to-switch link (``"switch"``, named ``"a~b"``)."""

    kind: str
    name: str
    capacity_gbyte_s: float
    # Worked out once: links key every dict of the fabric (~13M reads on 20k Philly jobs compressed 8x,
    # where the generated hash of the three fields was 4% of LAS' run). Equal links hash equally.
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.kind, self.name, self.capacity_gbyte_s)))

    def __hash__(self) -> int:
        return self._hash


@dataclass(frozen=True, slots=True)
class _Member:
    """A job on the fabric: its allocation, phase, the links it crosses and its demand on each."""

    allocation: Allocation
    phase_s: float
    links: tuple[Link, ...]
    profiles: dict[Link, DemandProfile]  # its demand on each link it crosses
    # Its slowdown on each link where it is above 1.0 as of the last settle (its slowdown is their
    # largest, 1.0 if none): the fabric's only record of per-link slowdowns.
    there: dict[Link, float]


class _LinkJobs:
    """A link's jobs kept in the two orders a solve reads them in, updated as jobs come and go: by job id
    (with their peak demands, summed in that order) and by cache key (``keyed``: the order the jobs are
    solved in, profile, phase bin, job id), with, in that order, their ids, their profiles' rows in the
    fabric's ProfileTable (which stand for the profiles in cache keys) and phase bins: what a solve and its
    cache key read, without a pass over ``keyed``. ``slowed``: whether any job ran slower here as of the
    last settle."""

    __slots__ = ("bins", "ids", "jobs", "keyed", "link", "peaks", "pids", "slowed")

    def __init__(self, link: Link) -> None:
        self.link = link
        self.ids: list[str] = []
        self.peaks: list[float] = []
        self.keyed: list[_Order] = []
        self.jobs: list[str] = []
        self.pids: list[int] = []
        self.bins: list[int] = []
        self.slowed = False


class Fabric:
    """Link membership of running jobs and their contended slowdowns (no global state)."""

    def __init__(self, perf: PerformanceModel, cluster: Cluster, *, sharing: str = "fair",
                 cache_entries: int = CACHE_ENTRIES) -> None:
        if sharing not in SHARING:
            raise ValueError(f"sharing must be one of {', '.join(SHARING)}, got {sharing!r}")
        if cache_entries < 1:
            raise ValueError(f"cache_entries must be >= 1, got {cache_entries!r}")
        self.cache_entries = cache_entries
        self.perf = perf
        self.cluster = cluster
        self.sharing = sharing
        self._nic = {n.name: Link("nic", n.name, n.nic_gbyte_s) for n in cluster.nodes}
        self._rack_of = {n.name: n.rack_index for n in cluster.nodes}
        self._between: dict[tuple[str, str], Link] = {}  # uplinks and switch links, made when first crossed
        self._members: dict[str, _Member] = {}
        self._link_jobs: dict[Link, _LinkJobs] = {}  # the jobs on each loaded link
        self._slowdown: dict[str, float] = {}
        self._dirty: set[Link] = set()
        self._cache: dict[tuple[object, ...], tuple[float, ...]] = {}
        # Each distinct profile (as plain numbers) seen on a link: its row in the table the kernels read, and
        # per row the numbers as first seen: links order their jobs by that one tuple, so sorting compares equal
        # profiles by identity instead of number by number.
        self._profiles = ProfileTable()
        self._profile_ids: dict[tuple[tuple[float, float], ...], int] = {}
        self._numbers: list[tuple[tuple[float, float], ...]] = []

    # --- membership ---------------------------------------------------------

    def links_of(self, allocation: Allocation) -> tuple[Link, ...]:
        """The NICs of a multi-node allocation, plus the links between its racks when it spans racks."""
        nodes = [p.node for p in allocation.nodes if p.gpus]
        if len(nodes) < 2:
            return ()
        racks = sorted({self._rack_of[n] for n in nodes})
        return (*(self._nic[n] for n in nodes), *(self._link(*key) for key in self.cluster.inter_rack_links(racks)))

    def place(self, job_id: str, spec: JobSpec, allocation: Allocation, start_s: float,
              *, origin_s: float = 0.0, timing: JobTiming | None = None) -> None:
        """Put a running job on the links its allocation crosses (replacing where it was).

        Its demand on each link is the Up/Down profile of
        :meth:`~halyard.emulator.PerformanceModel.job_timing` -- the all-reduce of a
        data-parallel job, the tensor collectives, activation sends and stage
        all-reduces of a tensor, pipeline or hybrid plan. ``start_s``: when its
        iterations began on the cluster clock; ignored when the allocation carries a
        time-shift, which fixes the phase instead. ``origin_s``: the instant the run's
        time axis starts on the cluster clock; phases are taken from it, so a run whose
        clock starts elsewhere (replay) puts its jobs on the same phases. ``timing``: that
        ``job_timing`` of ``spec`` on ``allocation`` when the caller has it already (the Pacer).
        """
        self.remove(job_id)
        if timing is None:
            timing = self.perf.job_timing(spec, allocation, self.cluster)
        loads = [load for load in timing.links if load.profile.gbytes > 0.0]
        if not loads:
            return
        profiles = {self._link(load.kind, load.name): load.profile for load in loads}
        # A time-shift puts iteration starts on its grid (epoch + shift + k x period; 0 s is a shift).
        anchor = allocation.time_shift_epoch_s + allocation.time_shift_s if allocation.has_time_shift else start_s
        cycle = timing.iteration.total_s
        if allocation.has_time_shift and allocation.time_shift_period_s > 0.0:
            # A paced job starts an iteration per grid point (halyard.timeshift): on every link it waits,
            # quiet, from the end of its iteration to the next point, so jobs on one period keep the
            # phases their shifts gave them (what Cassini's agents hold them to, §4.4.2 step 3).
            cycle = paced_iteration_s(cycle, allocation.time_shift_period_s)
            profiles = {link: profile.padded_to(cycle) for link, profile in profiles.items()}
        phase_s = (anchor - origin_s) % cycle
        for link, profile in profiles.items():
            numbers = tuple((p.duration_s, p.demand_gbyte_s) for p in profile.phases)
            pid = self._profile_ids.get(numbers)
            if pid is None:
                pid = self._profile_ids[numbers] = self._profiles.add(profile)
                self._numbers.append(numbers)
            phase_bin = round(phase_s / profile.iteration_s * PHASE_BINS) % PHASE_BINS
            self._dirty.add(link)
            held = self._link_jobs.get(link)
            if held is None:
                held = self._link_jobs[link] = _LinkJobs(link)
            i = bisect.bisect_left(held.ids, job_id)
            held.ids.insert(i, job_id)
            held.peaks.insert(i, float(self._profiles.peaks[pid]))
            order = (self._numbers[pid], phase_bin, job_id)
            i = bisect.bisect_left(held.keyed, order)
            held.keyed.insert(i, order)
            held.jobs.insert(i, job_id)
            held.pids.insert(i, pid)
            held.bins.insert(i, phase_bin)
        self._members[job_id] = _Member(allocation, phase_s, tuple(profiles), profiles, {})

    def remove(self, job_id: str) -> None:
        """Take a job off its links (it stopped, or is about to be placed elsewhere)."""
        member = self._members.pop(job_id, None)
        if member is None:
            return
        for link in member.links:
            held = self._link_jobs[link]
            if len(held.ids) == 1:
                del self._link_jobs[link]
            else:
                i = bisect.bisect_left(held.ids, job_id)
                del held.ids[i], held.peaks[i]
                i = held.jobs.index(job_id)  # a scan in C, cheaper than bisecting tuples of tuples
                del held.keyed[i], held.jobs[i], held.pids[i], held.bins[i]
            self._dirty.add(link)
        self._slowdown.pop(job_id, None)

    def holds(self, job_id: str, allocation: Allocation) -> bool:
        """Whether the fabric has this job on exactly this allocation (a driver's no-op check)."""
        member = self._members.get(job_id)
        return member is not None and member.allocation is allocation

    def _link(self, kind: str, name: str) -> Link:
        if kind == "nic":
            return self._nic[name]
        link = self._between.get((kind, name))
        if link is None:
            link = self._between[(kind, name)] = Link(kind, name, self.cluster.link_gbyte_s((kind, name)))
        return link

    # --- results --------------------------------------------------------------

    def slowdown(self, job_id: str) -> float:
        """Contended over dedicated iteration time (1.0 for a job alone on its links)."""
        return self._slowdown.get(job_id, 1.0)

    def settle(self) -> dict[str, float]:
        """Recompute the links whose jobs changed; the jobs on the fabric whose slowdown moved."""
        if not self._dirty:
            return {}
        touched: set[str] = set()  # the jobs whose slowdown on some link moved
        members = self._members
        for held, slowdowns in self._solve([held for link in self._dirty
                                            if (held := self._link_jobs.get(link)) is not None]):
            # Each job on the link takes its slowdown there (a job that came since has none yet; one that
            # left took its own with it).
            link = held.link
            if slowdowns:
                for job_id, s in zip(held.jobs, slowdowns, strict=True):
                    there = members[job_id].there
                    if s > 1.0:
                        if there.get(link) != s:
                            there[link] = s
                            touched.add(job_id)
                    elif there.pop(link, None) is not None:
                        touched.add(job_id)
                held.slowed = True
            elif held.slowed:
                for job_id in held.ids:
                    if members[job_id].there.pop(link, None) is not None:
                        touched.add(job_id)
                held.slowed = False
        self._dirty.clear()
        changed: dict[str, float] = {}
        slowdown = self._slowdown
        for job_id in touched:
            # The largest over its links, 1.0 where it runs at full speed (every slowdown kept is > 1.0). A job
            # whose links' slowdowns all stayed keeps its own.
            there = members[job_id].there
            s = max(there.values()) if there else 1.0
            if abs(s - slowdown.get(job_id, 1.0)) > SLOWDOWN_TOLERANCE:
                changed[job_id] = s
            if s > 1.0 + SLOWDOWN_TOLERANCE:
                slowdown[job_id] = s
            else:
                slowdown.pop(job_id, None)
        return changed

    def link_census(self) -> list[tuple[Link, tuple[str, ...], tuple[DemandProfile, ...], tuple[float, ...],
                                        tuple[float, ...]]]:
        """Every loaded link as of the last :meth:`settle`: its jobs (sorted), their profiles on it,
        their slowdowns there and their phases (s on the run's clock, modulo the iteration) (read-only;
        for measuring how much links are shared and how jobs sit on them)."""
        out = []
        for link, held in sorted(self._link_jobs.items(), key=lambda kv: (kv[0].kind, kv[0].name)):
            ids = tuple(held.ids)  # kept sorted
            members = [self._members[j] for j in ids]
            out.append((link, ids, tuple(m.profiles[link] for m in members),
                        tuple(m.there.get(link, 1.0) for m in members), tuple(m.phase_s for m in members)))
        return out

    def contended(self, job_id: str, dedicated: IterationTime) -> IterationTime:
        """``dedicated`` stretched by the job's slowdown; the extra time is exposed communication
        (compute is unchanged, the all-reduce waits for the link)."""
        s = self.slowdown(job_id)
        if s == 1.0:
            return dedicated
        extra = dedicated.total_s * (s - 1.0)
        return IterationTime(compute_s=dedicated.compute_s, communication_s=dedicated.communication_s + extra,
                             exposed_s=dedicated.exposed_s + extra, total_s=dedicated.total_s + extra,
                             tier=dedicated.tier)

    # --- internals ---------------------------------------------------------------

    def _solve(self, links: list[_LinkJobs]) -> list[tuple[_LinkJobs, tuple[float, ...]]]:
        """Each link's slowdowns, its jobs in key order; ``()`` where no job is slower there (the link
        never runs out, or its jobs fit around each other). States not in the cache are solved together:
        the fluid ones in one compiled call, the mean-field ones in another (a settle that solves any solves
        ~10 links; per link, calling the kernels from Python cost about what a small link's simulation
        does)."""
        cache = self._cache
        out: list[tuple[_LinkJobs, tuple[float, ...] | None]] = []  # None: solved below
        fluid: dict[tuple[object, ...], list[int]] = {}  # states to solve: where in ``out`` they go
        field: dict[tuple[object, ...], list[int]] = {}
        for held in links:
            capacity = held.link.capacity_gbyte_s
            if len(held.ids) < 2 or sum(held.peaks) <= capacity:
                out.append((held, ()))
                continue
            # Cache key: profiles (by id) and phases on the grid, in a canonical order (profile, phase bin,
            # job id: the order held.keyed keeps). The mean-field limit sees neither phases nor the sharing
            # mode, so beyond FLUID_MAX_JOBS the key is the profiles alone (sorted by profile first, they
            # reach it in the same order whatever the phases).
            if len(held.pids) <= FLUID_MAX_JOBS:
                key: tuple[object, ...] = (capacity, self.sharing, tuple(held.pids), tuple(held.bins))
                waiting = fluid
            else:
                key, waiting = (capacity, tuple(held.pids)), field
            slowdowns = cache.get(key)
            if slowdowns is None:
                waiting.setdefault(key, []).append(len(out))
            out.append((held, slowdowns))
        for waiting, solve in ((fluid, self._fluid), (field, self._mean_field)):
            if not waiting:
                continue
            for key, slowdowns in zip(waiting, solve([out[at[0]][0] for at in waiting.values()]), strict=True):
                for i in waiting[key]:
                    out[i] = (out[i][0], slowdowns)
                if len(cache) >= self.cache_entries:
                    # Drop the older half at once: deleting the oldest entry one at a time leaves a dict
                    # that scans its deleted slots to find the next oldest. Which entries go changes no
                    # result.
                    cache = self._cache = dict(itertools.islice(cache.items(), max(1, len(cache) // 2), None))
                cache[key] = slowdowns
        return cast(list[tuple[_LinkJobs, tuple[float, ...]]], out)  # every None was a waiting state, now solved

    def _fluid(self, links: list[_LinkJobs]) -> list[tuple[float, ...]]:
        """The fluid simulation's slowdowns on each of ``links`` (as :meth:`_solve` answers)."""
        table = self._profiles
        rows, bins, starts = self._layout(links)
        iteration_s = table.iterations[rows]
        # A job's start: its phase bin's share of its iteration (bin / PHASE_BINS x iteration, in that order).
        shifts = np.array(bins) / PHASE_BINS * iteration_s
        capacities = [held.link.capacity_gbyte_s for held in links]
        if self.sharing == "fair":
            times = fair_link_times(table, rows, starts, shifts, capacities, SIM_ITERATIONS, SIM_STEADY)
        else:
            times = np.zeros(len(rows))
            for held, (a, b) in zip(links, itertools.pairwise(starts), strict=True):
                profiles = [self._members[job_id].profiles[held.link] for job_id in held.jobs]
                times[a:b] = shared_link_iteration_times(profiles, held.link.capacity_gbyte_s, sharing=self.sharing,
                                                         time_shifts_s=shifts[a:b].tolist(), iterations=SIM_ITERATIONS,
                                                         steady=SIM_STEADY).iteration_s
        return self._split(np.maximum(times / iteration_s, 1.0), starts)

    def _mean_field(self, links: list[_LinkJobs]) -> list[tuple[float, ...]]:
        """The mean-field limit's slowdowns on each of ``links`` (as :meth:`_solve` answers)."""
        rows, _, starts = self._layout(links)
        times = mean_field_link_times(self._profiles, rows, starts, [held.link.capacity_gbyte_s for held in links])
        return self._split(np.maximum(times / self._profiles.iterations[rows], 1.0), starts)

    @staticmethod
    def _layout(links: list[_LinkJobs]) -> tuple[np.ndarray, list[int], list[int]]:
        """The jobs of ``links`` one after another, in key order: profile rows, phase bins, and where each
        link's jobs start (then the total)."""
        rows: list[int] = []
        bins: list[int] = []
        starts = [0]
        for held in links:
            rows += held.pids
            bins += held.bins
            starts.append(len(rows))
        return np.array(rows, np.int64), bins, starts

    @staticmethod
    def _split(slowdowns: np.ndarray, starts: list[int]) -> list[tuple[float, ...]]:
        """Each link's part of ``slowdowns``, ``()`` where none is above 1.0 (as :meth:`_solve` answers)."""
        every = slowdowns.tolist()
        out = []
        for a, b in itertools.pairwise(starts):
            part = tuple(every[a:b])
            out.append(part if max(part) > 1.0 else ())
        return out
