"""Cassini's compatibility math and cluster-scale algorithms, as pure functions.

papers/cassini-mltcp-network-interleaving.txt, chapter 4:

* §4.3 the geometric abstraction: each job's Up/Down demand on a link laid around a
  *unified circle* whose perimeter is the LCM of the iteration times of the jobs on
  the link (§4.3.2, Fig. 4.5); Table 4.1's compatibility score
  ``score = 1 - sum_theta Excess(demand_theta) / (|A| x C)``,
  ``Excess(d) = d - C if d > C else 0``, maximised over rotations
  ``0 <= theta_j < 2 pi / r_j`` (Eq. 4.4); Eq. 4.5 turns a rotation into a time-shift,
  ``t_j = (theta_j / 2 pi x p) mod iter_time_j`` (:func:`solve_link`).
* §4.4.1 the bipartite affinity graph of jobs and links (:class:`AffinityGraph`),
  Algorithm 1's BFS that gives each job of a connected component one time-shift
  (:func:`bfs_time_shifts`), Theorem 1 holding on loop-free graphs (:meth:`AffinityGraph.has_loop`).
* §4.4.2 Algorithm 2: discard candidates whose graph has a loop, score the others by
  the mean compatibility of their links, take the top one and run Algorithm 1 on it
  (:func:`select_candidate`).

The search is vectorised over angles with numpy: for each job in turn, every rotation
it may take is scored at once against the sum of the others' demand (exhaustive for
two jobs, coordinate ascent beyond: the paper solves Table 4.1 with a solver and does
not say which). Profiles are anything with ``phases`` of ``duration_s`` and
``demand_gbyte_s`` (the emulator's ``DemandProfile`` reaches policies through
``view.perf.job_timing``; policies import nothing from the emulator).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

# Table 4.1's set A of discrete angles: "we use 5 degrees as the angle discretization precision"
# (§4.5.1), i.e. 72 angles. Applied per *shortest iteration* on the unified circle: on a circle of
# many iterations 5 degrees of the whole circle would be coarser than a phase (our choice).
ANGLE_PRECISION_DEG = 5.0
ANGLES_PER_ITERATION = round(360 / ANGLE_PRECISION_DEG)
# Iteration times are rounded to this quantum before their LCM is taken (§4.3.2 works in ms:
# 40 ms and 60 ms -> a 120-unit circle; Fig. 4.3 a 255 ms iteration on a 255-unit circle).
TIME_QUANTUM_S = 1e-3
# Cap on the unified circle, in longest iterations: measured times have huge LCMs (137 ms and 206 ms
# -> 28.2 s); beyond the cap the quantum is doubled until the LCM fits (our rounding rule; the
# paper does not say what it does with such times).
MAX_CIRCLE_ITERATIONS = 16
# Arcs of the unified circle at most (cost: a search scores rotations x arcs numbers per job); a
# circle of 16 iterations of 72 arcs each would otherwise take 1,152 arcs per job's iteration.
MAX_ARCS = 1440
COORDINATE_ROUNDS = 3  # passes of coordinate ascent over the jobs when more than two share a link
MAX_CANDIDATES = 10  # "up to 10 placement candidates from Themis" (§4.5.1)


class PhaseLike(Protocol):
    @property
    def duration_s(self) -> float: ...
    @property
    def demand_gbyte_s(self) -> float: ...


class ProfileLike(Protocol):
    """One iteration of a job's demand on a link (Cassini §4.1): its Up/Down phases in order."""

    @property
    def phases(self) -> Sequence[PhaseLike]: ...


def iteration_of(profile: ProfileLike) -> float:
    return float(sum(p.duration_s for p in profile.phases))


# ---------------------------------------------------------------- §4.3: one link
def unified_perimeter_s(iteration_times: Sequence[float], quantum_s: float = TIME_QUANTUM_S,
                        max_iterations: int = MAX_CIRCLE_ITERATIONS) -> float:
    """The LCM of the iteration times (§4.3.2), each rounded to ``quantum_s``; the quantum doubles
    until the LCM is at most ``max_iterations`` longest iterations."""
    longest = max(iteration_times)
    q = quantum_s
    while True:
        lcm = 1
        for t in iteration_times:
            lcm = math.lcm(lcm, max(1, round(t / q)))
        if lcm * q <= max_iterations * longest * (1 + 1e-9) or q >= longest:
            return lcm * q
        q *= 2


def rotation_to_time_shift(theta: float, perimeter_s: float, iteration_s: float) -> float:
    """Eq. 4.5: ``t_j = (theta_j / 2 pi x p) mod iter_time_j``."""
    return (theta / (2 * math.pi) * perimeter_s) % iteration_s


def circle_demand(profile: ProfileLike, perimeter_s: float, arcs: int) -> np.ndarray:
    """``bw_circle_j(theta)`` of Table 4.1: the job's demand on each of ``arcs`` equal arcs of the unified
    circle (the demand at the arc's midpoint; the job's pattern repeats every iteration)."""
    durations = np.array([p.duration_s for p in profile.phases], dtype=float)
    demands = np.array([p.demand_gbyte_s for p in profile.phases], dtype=float)
    t = np.mod((np.arange(arcs) + 0.5) * (perimeter_s / arcs), durations.sum())
    idx = np.minimum(np.searchsorted(np.cumsum(durations), t, side="right"), len(durations) - 1)
    return demands[idx]


def score_of(total: np.ndarray, capacity: float) -> np.ndarray:
    """Table 4.1 over the last axis: ``1 - sum Excess(demand) / (|A| C)``."""
    return 1.0 - np.maximum(total - capacity, 0.0).sum(axis=-1) / (total.shape[-1] * capacity)


@dataclass(frozen=True, slots=True)
class LinkSolution:
    """Table 4.1's output for one link: the score, each job's time-shift ``t^l_j`` (Eq. 4.5, in the
    order the profiles were given) and the unified circle's perimeter ``p^l``."""

    score: float
    shifts_s: tuple[float, ...]
    perimeter_s: float


def _arcs(iteration_times: Sequence[float], perimeter: float) -> int:
    return min(MAX_ARCS, max(ANGLES_PER_ITERATION, round(ANGLES_PER_ITERATION * perimeter / min(iteration_times))))


def link_score(profiles: Sequence[ProfileLike], capacity: float, shifts_s: Sequence[float]) -> float:
    """The compatibility score of jobs on a link when each starts its iterations ``shifts_s`` late."""
    times = [iteration_of(p) for p in profiles]
    perimeter = unified_perimeter_s(times)
    arcs = _arcs(times, perimeter)
    arc = perimeter / arcs
    total = np.zeros(arcs)
    for p, s in zip(profiles, shifts_s, strict=True):
        total += np.roll(circle_demand(p, perimeter, arcs), round(s / arc))
    return float(score_of(total, capacity))


def solve_link(profiles: Sequence[ProfileLike], capacity: float) -> LinkSolution:
    """Table 4.1: rotate the jobs' unified circles to maximise the compatibility score.

    Job 0 is the reference (rotation 0: only relative rotations matter). Job j's rotation
    is one of the discrete angles in ``[0, 2 pi / r_j)`` (Eq. 4.4, ``r_j`` = its iterations
    on the circle) at ``ANGLE_PRECISION_DEG`` of that iteration; a rotation of k arcs delays the
    job by ``k x p / |A|``, i.e. Eq. 4.5's
    ``t_j = (theta_j / 2 pi x p) mod iter_time_j``. All rotations of one job are scored at
    once (numpy); exhaustive for two jobs, coordinate ascent for more. Ties keep the
    smallest rotation.
    """
    n = len(profiles)
    times = [iteration_of(p) for p in profiles]
    perimeter = unified_perimeter_s(times)
    arcs = _arcs(times, perimeter)
    demand = np.stack([circle_demand(p, perimeter, arcs) for p in profiles])
    rot = np.zeros(n, dtype=np.int64)
    base = np.arange(arcs)

    def rolled(j: int, k: int) -> np.ndarray:
        return demand[j][(base - k) % arcs]

    total = demand.sum(axis=0)
    best = float(score_of(total, capacity))
    if n > 1 and best < 1.0:
        for _ in range(COORDINATE_ROUNDS if n > 2 else 1):
            improved = False
            for j in range(1, n):
                others = total - rolled(j, int(rot[j]))
                # theta_j < 2 pi / r_j, at the angle precision of the job's own iteration
                ks = np.unique(np.linspace(0, arcs * times[j] / perimeter, ANGLES_PER_ITERATION,
                                           endpoint=False).astype(np.int64))
                trial = others[None, :] + demand[j][(base[None, :] - ks[:, None]) % arcs]
                scores = score_of(trial, capacity)
                k = int(np.argmax(scores))
                if scores[k] > best + 1e-12:
                    best, rot[j], improved = float(scores[k]), int(ks[k]), True
                total = others + rolled(j, int(rot[j]))
            if not improved or best >= 1.0:
                break
    shifts = tuple(rotation_to_time_shift(2 * math.pi * int(rot[j]) / arcs, perimeter, times[j]) for j in range(n))
    return LinkSolution(best, shifts, perimeter)


# ---------------------------------------------------------------- §4.4: the affinity graph
@dataclass(frozen=True, slots=True)
class AffinityGraph:
    """Cassini's bipartite affinity graph (§4.4.1): jobs U that share a link with another job,
    links V that carry more than one job, and an edge (j, l) when j crosses l
    (Algorithm 2, lines 3-12). ``links`` maps each link of V to its jobs, in a fixed order."""

    links: Mapping[Hashable, tuple[Hashable, ...]]

    @staticmethod
    def of(job_links: Mapping[Hashable, Iterable[Hashable]]) -> AffinityGraph:
        on: dict[Hashable, list[Hashable]] = {}
        for job in sorted(job_links, key=str):
            for link in job_links[job]:
                on.setdefault(link, []).append(job)
        return AffinityGraph({link: tuple(jobs) for link, jobs in sorted(on.items(), key=lambda kv: str(kv[0]))
                              if len(jobs) > 1})

    @property
    def jobs(self) -> list[Hashable]:
        seen: dict[Hashable, None] = {}
        for jobs in self.links.values():
            seen.update(dict.fromkeys(jobs))
        return list(seen)

    def neighbours(self) -> dict[Hashable, list[Hashable]]:
        """Job -> the links of V it crosses."""
        out: dict[Hashable, list[Hashable]] = {}
        for link, jobs in self.links.items():
            for job in jobs:
                out.setdefault(job, []).append(link)
        return out

    def has_loop(self) -> bool:
        """Whether the graph has a cycle (Theorem 1 needs none; Algorithm 2 line 13). A graph is
        a forest iff no edge joins two vertices already connected (union-find)."""
        parent: dict[tuple[str, Hashable], tuple[str, Hashable]] = {}

        def root(v: tuple[str, Hashable]) -> tuple[str, Hashable]:
            parent.setdefault(v, v)
            while parent[v] != v:
                parent[v] = parent[parent[v]]
                v = parent[v]
            return v

        for link, jobs in self.links.items():
            for job in jobs:
                a, b = root(("job", job)), root(("link", link))
                if a == b:
                    return True
                parent[a] = b
        return False


def bfs_time_shifts(graph: AffinityGraph, weights: Mapping[tuple[Hashable, Hashable], float],
                    iteration_s: Mapping[Hashable, float],
                    reference: Callable[[list[Hashable]], Hashable] | None = None) -> dict[Hashable, float]:
    """Algorithm 1: one time-shift per job of the affinity graph.

    For each connected component (line 3) a reference job gets ``t = 0`` (line 7; the paper
    picks it at random, ``reference`` picks it from the component's jobs, default the first
    in the graph's order, so the result is deterministic); BFS enqueues only jobs (line 8)
    and reaches job k from job j through link l with
    ``t_k = (t_j - w_(j,l) + w_(l,k)) mod iter_time_k`` (lines 15-17: job -> link is minus,
    link -> job plus, Fig. 4.8), ``w`` the per-link time-shifts of Table 4.1 / Eq. 4.5.
    On a loop-free graph Eq. 4.6 then holds on every link (Theorem 1).
    """
    nbrs = graph.neighbours()
    shifts: dict[Hashable, float] = {}
    for component in components(graph):
        ref = reference(component) if reference is not None else component[0]
        shifts[ref] = 0.0
        queue = deque([ref])
        while queue:
            j = queue.popleft()
            for link in nbrs[j]:
                for k in graph.links[link]:
                    if k not in shifts:
                        shifts[k] = (shifts[j] - weights[(j, link)] + weights[(k, link)]) % iteration_s[k]
                        queue.append(k)
    return shifts


def components(graph: AffinityGraph) -> list[list[Hashable]]:
    """The jobs of each connected subgraph (Algorithm 1 line 3), each in the graph's job order."""
    nbrs = graph.neighbours()
    order = {job: i for i, job in enumerate(graph.jobs)}
    seen: set[Hashable] = set()
    out = []
    for start in graph.jobs:
        if start in seen:
            continue
        found = {start}
        queue = deque([start])
        while queue:
            j = queue.popleft()
            for link in nbrs[j]:
                for k in graph.links[link]:
                    if k not in found:
                        found.add(k)
                        queue.append(k)
        seen |= found
        out.append(sorted(found, key=order.__getitem__))
    return out


@dataclass(frozen=True, slots=True)
class Scored:
    """A candidate as Algorithm 2 sees it: its graph, per-link solutions and mean score (None: has a loop)."""

    graph: AffinityGraph
    solutions: Mapping[Hashable, LinkSolution]
    score: float | None


def score_candidate(job_links: Mapping[Hashable, Iterable[Hashable]],
                    solve: Callable[[Hashable, tuple[Hashable, ...]], LinkSolution]) -> Scored:
    """Algorithm 2, lines 3-23, for one candidate: its affinity graph; None if it has a loop
    (line 13); else Table 4.1 solved on every link of V (``solve(link, jobs)``, which the
    caller memoises) and the mean of the link scores (a candidate with no shared link
    scores 1: nothing competes)."""
    graph = AffinityGraph.of(job_links)
    if graph.has_loop():
        return Scored(graph, {}, None)
    solutions = {link: solve(link, jobs) for link, jobs in graph.links.items()}
    score = float(np.mean([s.score for s in solutions.values()])) if solutions else 1.0
    return Scored(graph, solutions, score)


def select_candidate(scored: Sequence[Scored]) -> int | None:
    """Algorithm 2, lines 24-25: the index of the top loop-free candidate by mean compatibility
    (ties keep the base policy's order), or None when every candidate has a loop."""
    best: int | None = None
    for i, s in enumerate(scored):
        if s.score is not None and (best is None or s.score > scored[best].score + 1e-12):  # type: ignore[operator]
            best = i
    return best


def edge_weights(scored: Scored) -> dict[tuple[Hashable, Hashable], float]:
    """The affinity graph's edge weights ``w_(j,l) = t^l_j`` from the per-link solutions."""
    return {(job, link): sol.shifts_s[i] for link, sol in scored.solutions.items()
            for i, job in enumerate(scored.graph.links[link])}


__all__ = [
    "ANGLES_PER_ITERATION", "ANGLE_PRECISION_DEG", "MAX_CANDIDATES", "MAX_CIRCLE_ITERATIONS", "TIME_QUANTUM_S",
    "AffinityGraph", "LinkSolution", "Scored", "bfs_time_shifts", "circle_demand", "components", "edge_weights",
    "link_score", "rotation_to_time_shift", "score_candidate", "score_of", "select_candidate", "solve_link",
    "unified_perimeter_s",
]
