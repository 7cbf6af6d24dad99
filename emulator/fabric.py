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

from halyard.datamodel import Allocation, Cluster, JobSpec
from halyard.emulator.contention import (
    SHARING,
    DemandProfile,
    ProfileTable,
    fair_iteration_times_of,
    mean_field_iteration_times_of,
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

_Key = tuple[tuple[tuple[float, float], ...], int]  # a job's profile on a link as plain numbers, its phase bin


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
    # Per link, worked out once at placement: its peak demand there, and its part of the cache key
    # (the profile as plain numbers, the phase on the 1/PHASE_BINS grid).
    peaks: dict[Link, float]
    keys: dict[Link, _Key]
    # Its slowdown on each link where it is above 1.0 as of the last settle (its slowdown is their
    # largest, 1.0 if none).
    there: dict[Link, float]


class _LinkJobs:
    """A link's jobs kept in the two orders a solve reads them in, updated as jobs come and go: by job id
    (with their peak demands, summed in that order) and by cache key (the order the jobs are solved in:
    profile, phase bin, job id; each with its profile's row in the fabric's ProfileTable, which stands for
    the profile in cache keys)."""

    __slots__ = ("ids", "keyed", "peaks")

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.peaks: list[float] = []
        self.keyed: list[tuple[_Key, str, int]] = []


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
        # Per link, the slowdowns above 1.0 as of the last settle (a job absent runs there at full speed).
        self._link_slowdown: dict[Link, dict[str, float]] = {}
        self._slowdown: dict[str, float] = {}
        self._dirty: set[Link] = set()
        self._cache: dict[tuple[object, ...], tuple[float, ...]] = {}
        # Each distinct profile (as plain numbers) seen on a link: its row in the table the kernels read.
        self._profiles = ProfileTable()
        self._profile_ids: dict[tuple[tuple[float, float], ...], int] = {}

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
        peaks: dict[Link, float] = {}
        keys: dict[Link, _Key] = {}
        for link, profile in profiles.items():
            numbers = tuple((p.duration_s, p.demand_gbyte_s) for p in profile.phases)
            pid = self._profile_ids.get(numbers)
            if pid is None:
                pid = self._profile_ids[numbers] = self._profiles.add(profile)
            key = keys[link] = (numbers, round(phase_s / profile.iteration_s * PHASE_BINS) % PHASE_BINS)
            peak = peaks[link] = self._profiles.peak[pid]
            self._dirty.add(link)
            held = self._link_jobs.get(link)
            if held is None:
                held = self._link_jobs[link] = _LinkJobs()
            i = bisect.bisect_left(held.ids, job_id)
            held.ids.insert(i, job_id)
            held.peaks.insert(i, peak)
            bisect.insort(held.keyed, (key, job_id, pid))
        self._members[job_id] = _Member(allocation, phase_s, tuple(profiles), profiles, peaks, keys, {})

    def remove(self, job_id: str) -> None:
        """Take a job off its links (it stopped, or is about to be placed elsewhere)."""
        member = self._members.pop(job_id, None)
        if member is None:
            return
        for link in member.links:
            self._link_slowdown.get(link, {}).pop(job_id, None)
            held = self._link_jobs[link]
            if len(held.ids) == 1:
                del self._link_jobs[link]
                self._link_slowdown.pop(link, None)
            else:
                i = bisect.bisect_left(held.ids, job_id)
                del held.ids[i], held.peaks[i]
                i = bisect.bisect_left(held.keyed, (member.keys[link], job_id))
                del held.keyed[i]
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
        touched: set[str] = set()
        members, link_slowdown = self._members, self._link_slowdown
        for link in self._dirty:
            held = self._link_jobs.get(link)
            if held is not None:
                jobs = held.ids
                new = self._solve(link)
                old = link_slowdown.get(link)
                if new != old:
                    # Each job on the link takes its slowdown there (a job that came since has none yet;
                    # one that left took its own with it).
                    for job_id in jobs:
                        there = members[job_id].there
                        s = new.get(job_id)
                        if s is None:
                            there.pop(link, None)
                        else:
                            there[link] = s
                    link_slowdown[link] = new
                touched.update(jobs)
        self._dirty.clear()
        changed: dict[str, float] = {}
        slowdown = self._slowdown
        for job_id in touched:
            # The largest over its links, 1.0 where it runs at full speed (every slowdown kept is > 1.0).
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
            there = self._link_slowdown.get(link, {})
            out.append((link, ids, tuple(self._members[j].profiles[link] for j in ids),
                        tuple(there.get(j, 1.0) for j in ids), tuple(self._members[j].phase_s for j in ids)))
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

    def _solve(self, link: Link) -> dict[str, float]:
        """The slowdowns above 1.0 of the jobs on ``link``."""
        held = self._link_jobs[link]
        if len(held.ids) < 2 or sum(held.peaks) <= link.capacity_gbyte_s:
            return {}  # the link never runs out: everyone at dedicated speed
        # Cache key: profiles and phases on the grid, in a canonical order (profile, phase bin, job id: the
        # order held.keyed keeps); a profile by its id. The mean-field limit sees neither phases nor the
        # sharing mode, so beyond FLUID_MAX_JOBS the key is the profiles alone (sorted by profile first,
        # they reach it in the same order whatever the phases).
        keyed = held.keyed
        fluid = len(keyed) <= FLUID_MAX_JOBS
        key = ((link.capacity_gbyte_s, self.sharing, tuple([(pid, k[1]) for k, _, pid in keyed])) if fluid
               else (link.capacity_gbyte_s, tuple([pid for _, _, pid in keyed])))
        slowdowns = self._cache.get(key)
        if slowdowns is None:
            table = self._profiles
            if not fluid:
                slowdowns = self._mean_field([pid for _, _, pid in keyed], link.capacity_gbyte_s)
            else:
                iteration_s = [table.iteration_s[pid] for _, _, pid in keyed]
                shifts = [k[1] / PHASE_BINS * it for (k, _, _), it in zip(keyed, iteration_s, strict=True)]
                if self.sharing == "fair":
                    times = fair_iteration_times_of(table, [pid for _, _, pid in keyed], link.capacity_gbyte_s,
                                                    shifts, SIM_ITERATIONS, SIM_STEADY)
                else:
                    profiles = [self._members[job_id].profiles[link] for _, job_id, _ in keyed]
                    times = shared_link_iteration_times(profiles, link.capacity_gbyte_s, sharing=self.sharing,
                                                        time_shifts_s=shifts, iterations=SIM_ITERATIONS,
                                                        steady=SIM_STEADY).iteration_s
                slowdowns = tuple([max(1.0, t / it) for t, it in zip(times, iteration_s, strict=True)])
            if len(self._cache) >= self.cache_entries:
                # Drop the older half at once: deleting the oldest entry one at a time leaves a dict that
                # scans its deleted slots to find the next oldest. Which entries go changes no result.
                self._cache = dict(itertools.islice(self._cache.items(), max(1, len(self._cache) // 2), None))
            self._cache[key] = slowdowns
        return {job_id: s for (_, job_id, _), s in zip(keyed, slowdowns, strict=True) if s > 1.0}

    def _mean_field(self, pids: list[int], capacity: float) -> tuple[float, ...]:
        """Slowdowns of jobs with profiles ``pids`` (equal ones together) in the mean-field limit: each
        distinct profile is solved once, in order of first appearance (as
        :func:`~halyard.emulator.contention.mean_field_iteration_times` does)."""
        solved = mean_field_iteration_times_of(self._profiles, pids, capacity)
        if solved is None:
            return (1.0,) * len(pids)
        distinct, times = solved
        iteration_s = self._profiles.iteration_s
        per = {pid: max(1.0, t / iteration_s[pid]) for pid, t in zip(distinct, times, strict=True)}
        return tuple([per[pid] for pid in pids])
