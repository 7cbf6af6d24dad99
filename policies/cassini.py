"""Cassini as stages: compatibility-ranked placement and unique time-shifts (§4.4.2).

papers/cassini-mltcp-network-interleaving.txt §4.4.2 augments a scheduler in three steps:
(1) the base scheduler returns up to K placement candidates instead of one; (2) Cassini
builds each candidate's affinity graph, drops those with loops, scores the rest by the
mean compatibility of their links, takes the top one and computes unique time-shifts
with Algorithm 1 (Algorithm 2); (3) agents apply the shifts. Here:

* :class:`CassiniPlacement` is a *placement* that wraps the base policy's placement: it
  asks it for up to ``limit`` candidates (:meth:`Placement.candidates`, paper K = 10)
  for each job the pass starts and returns the one Algorithm 2 ranks first, scored
  against the jobs already running and those placed earlier in the pass. It must be a
  placement, not an adjuster: choosing where a job goes after the pass has decided
  would mean undoing a Start and re-doing its resource accounting, and the base
  placement's candidates are computed on the pass's ``free`` resources, which only
  the placement step sees. Per-job candidates are the paper's cluster-wide candidates
  reduced to one job at a time (the paper's Themis arbiter re-places several jobs per
  auction; a greedy pass places them in priority order).
* :class:`CassiniShifts` is an *adjuster*: after placement it builds the affinity graph
  of what will run (running jobs less the preempted, plus the plan's starts and moves),
  solves Table 4.1 on every shared link and runs Algorithm 1, then adds a
  ``SetTimeShift`` for every job whose iteration grid must move.
* :class:`CassiniJointPlacement` (``+cassini-joint``) is Algorithm 2 over cluster-wide
  candidates: a batch placement that builds up to K placements of the round's whole set of
  auction winners and keeps the one with the highest mean compatibility (its doc names how the
  candidates are built and where it departs from the paper). Off by default: ``+cassini`` keeps
  the per-job reduction above, which the pinned schedules hold.
* :func:`augment` applies both to a policy: the ``+cassini`` suffix of the registry
  (``tiresias+cassini``). A batch placement (Synergy's packer places a whole set at
  once and has no per-job candidates) and Dally (its delay scheduling decides offers
  itself) get the time-shifts only.

Shifts are absolute on the cluster clock: the core sets the epoch to the pass time, so a
job's grid is ``now + t_j``. Each component keeps the grid of one job that already has a
shift (Algorithm 1's reference, chosen so rather than at random: nothing moves that need
not move), and a job whose grid is where it should be gets no new ``SetTimeShift``.
The period sent is 0 -- the job's own iteration time (its workers measure it): with a
fixed period a job slowed by a partly compatible link would wait for the next grid point
every iteration (``halyard.timeshift``), which the paper's agents, that "delay the start
of the next immediate training iteration" and correct drift rarely (§4.4.2 step 3), do not.
``pace=True`` sends the model's dedicated iteration time as the period instead (our option,
off by default). ``lock=True`` (``+cassini-lock``, our option) paces jobs of near-equal
iterations that it interleaves on one common period (:func:`lock_periods` says why; measured
in docs/reproductions/cassini-reproduction.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np

from halyard.datamodel import Allocation, Cluster, JobSpec, ValidationError
from halyard.policies.adaptive import with_runtime_plan
from halyard.policies.cassini_math import (
    MAX_CANDIDATES,
    TIME_QUANTUM_S,
    AffinityGraph,
    LinkSolution,
    Scored,
    bfs_time_shifts,
    components,
    edge_weights,
    link_score,
    score_candidate,
    select_candidate,
    solve_link,
)
from halyard.policies.passstate import PassState
from halyard.policies.plan import Plan
from halyard.policies.reasons import Unplaced
from halyard.policies.resources import FreeResources
from halyard.policies.stages import Adjuster, BatchPlacement, FixedSize, Placement
from halyard.policies.view import ClusterView, JobInfo

PLACED_KEY = "cassini/placed"  # job id -> links of the jobs placed so far in this pass
WORLD_KEY = "cassini/world"  # job id -> links of the running jobs this pass sees
# Two grids closer than this (seconds, modulo the period) are the same: no SetTimeShift is sent.
SHIFT_TOLERANCE_S = 1e-6
# +cassini-lock: jobs on a link whose iterations differ by at most this share one period (our choice,
# not the paper's: it bounds what a faster job gives up to wait for the grid; lock_periods says why).
LOCK_TOLERANCE = 0.02
# +cassini-lock locks only jobs whose shared links all score at least this at the shifts given (our choice:
# a paced job slowed past its period waits a whole period, so only links the plan clears are locked).
LOCK_MIN_SCORE = 0.999
# +cassini-lock's period is the group's longest iteration plus this share (our choice): a paced iteration
# that ends past its grid point waits for the next one, so a brush with a co-runner must fit in the slack.
LOCK_HEADROOM = 0.01

LinkKey = tuple[str, str]  # ("nic", node), ("uplink", rack) or ("switch", "a~b")


@dataclass(frozen=True, slots=True)
class JobLinks:
    """What Cassini needs of a job on an allocation: its dedicated iteration and its demand per shared link."""

    iteration_s: float
    profiles: Mapping[LinkKey, Any]  # link -> Up/Down profile (phases of duration_s, demand_gbyte_s)


def job_links(view: ClusterView, spec: JobSpec, allocation: Allocation) -> JobLinks:
    """The links ``allocation`` crosses and the job's Up/Down profile on each (``view.perf.job_timing``:
    the phases the fabric charges), links it sends nothing over left out."""
    timing = view.perf.job_timing(spec, allocation, view.cluster)
    profiles = {(load.kind, load.name): load.profile for load in timing.links if load.gbytes > 0.0}
    return JobLinks(float(timing.iteration.total_s), profiles)  # type: ignore[attr-defined]


def link_capacity(cluster: Cluster, link: LinkKey) -> float:
    """GB/s of a NIC, a rack's uplink over the spine oversubscription or a switch link (as the fabric
    has them)."""
    return cluster.link_gbyte_s(link)


def _phase_key(profile: Any) -> tuple[tuple[float, float], ...]:
    return tuple((p.duration_s, p.demand_gbyte_s) for p in profile.phases)


def solver(view: ClusterView, jobs: Mapping[str, JobLinks]) -> Callable[[Hashable, tuple[Hashable, ...]], LinkSolution]:
    """Table 4.1 for one link of a world (job id -> its links), memoised per link state in
    ``view.facts`` (a pure function of the profiles, in order, and the capacity)."""
    def solve(link: Hashable, members: tuple[Hashable, ...]) -> LinkSolution:
        profiles = [jobs[j].profiles[link] for j in members]  # type: ignore[index]
        capacity = link_capacity(view.cluster, link)  # type: ignore[arg-type]
        key = (capacity, tuple(_phase_key(p) for p in profiles))
        return view.facts.memo("cassini/link", key, lambda: solve_link(profiles, capacity))

    return solve


def score(view: ClusterView, jobs: Mapping[str, JobLinks]) -> Scored:
    """Algorithm 2 lines 3-23 for one candidate world (job id -> its links)."""
    return score_candidate({j: tuple(links.profiles) for j, links in jobs.items()}, solver(view, jobs))


class _OverBase:
    """A Cassini placement over a base placement: its name, resource sensitivity and learning hooks
    are the base's (the candidates come from it; Algorithm 2 only ranks them)."""

    suffix: ClassVar[str]

    def __init__(self, base: Placement, limit: int = MAX_CANDIDATES) -> None:
        self.base = base
        self.limit = limit
        self.name = f"{base.name}+{self.suffix}"

    @property
    def resource_sensitive(self) -> bool:
        return self.base.resource_sensitive

    def on_applied(self, view: ClusterView, plan: Plan, state: PassState) -> None:
        self.base.on_applied(view, plan, state)

    def on_rejected(self, view: ClusterView, plan: Plan, state: PassState) -> None:
        self.base.on_rejected(view, plan, state)


class CassiniPlacement(_OverBase, Placement):  # type: ignore[override]  # resource_sensitive: the base's
    """The base placement's candidates, ranked by Algorithm 2 (a placement stage; see the module doc)."""

    batch: ClassVar[Literal[False]] = False

    suffix: ClassVar[str] = "cassini"


    def place(self, view: ClusterView, job: JobInfo, gpus: int, free: FreeResources,
              state: PassState) -> Allocation | Unplaced:
        ranked = self.candidates(view, job, gpus, free, state, self.limit)
        if not ranked:
            return self.base.place(view, job, gpus, free, state)  # the base says why
        chosen = ranked[0]
        placed: dict[str, JobLinks] = state.setdefault(PLACED_KEY, dict)
        placed[job.job_id] = job_links(view, job.spec, chosen)
        return chosen

    def candidates(self, view: ClusterView, job: JobInfo, gpus: int, free: FreeResources, state: PassState,
                   limit: int = MAX_CANDIDATES) -> list[Allocation]:
        """The base's candidates, Algorithm 2's top one first (the rest in the base's order). When every
        candidate's graph has a loop, the base's first (our fallback: the paper finds loop-free ones
        among Themis' many candidates, §4.4.1)."""
        options = self.base.candidates(view, job, gpus, free, state, limit)
        if len(options) < 2:
            return options
        world = {**_running(view, free, state), **state.get(PLACED_KEY, {})}
        scored = [score(view, {**world, job.job_id: job_links(view, job.spec, c)}) for c in options]
        best = select_candidate(scored) or 0
        return [options[best], *options[:best], *options[best + 1:]]


def _running(view: ClusterView, free: FreeResources, state: PassState) -> dict[str, JobLinks]:
    """Links of the running jobs that still hold their GPUs in ``free`` (a job preempted or moved
    earlier in the pass has given them back)."""
    cached: dict[str, JobLinks] = state.setdefault(WORLD_KEY, lambda: {
        job_id: job_links(view, job.spec, job.allocation) for job_id, job in view.running.items()
        if job.allocation is not None and len(job.allocation.nodes) > 1})
    out = {}
    for job_id, links in cached.items():
        part = view.running[job_id].allocation.nodes[0]  # type: ignore[union-attr]
        if part.gpus and free.gpu_mask[view.cluster.node(part.node).index] >> part.gpus[0] & 1:
            continue
        out[job_id] = links
    return out


class CassiniJointPlacement(_OverBase, BatchPlacement):  # type: ignore[override]  # (as CassiniPlacement)
    """``+cassini-joint`` (Algorithm 2 over cluster-wide candidates): the round's auction winners placed
    together, the whole set's placement chosen by compatibility.

    §4.4.2 step 1: Themis returns "up to K candidate placements" that "all achieve the same
    finish-time fairness, but their worker placements are different" -- different ways to hand the
    released workers to the winners. Here the auction's outcome is the staged pass's: the pending jobs
    of the runnable set (``new``, in rho order) at their sizes. Candidate 0 is the greedy outcome
    (each winner, in rho order, on the base placement's first choice: exactly ``+cassini``-less
    Themis); candidate c = 1..K-1 places the same winners in a permutation drawn from the pass time,
    each on one of the base placement's candidates (:meth:`Placement.candidates`) drawn likewise, which
    hands different free GPUs to different winners. With one winner the candidates are the base's
    candidates for it ("selecting which workers ... creates another set of candidate placements"),
    so such a round is ``+cassini``'s per-job ranking.
    A candidate that does not start every winner candidate 0 starts is dropped (it would change the
    auction's outcome, not its placement). Each candidate is scored by Algorithm 2 lines 3-23 on the
    world it makes (the running jobs that keep their GPUs plus all its winners) and lines 24-25 pick
    the top one (ties and all-loop: the earliest, so candidate 0: :func:`select_candidate`).

    Deviations, named: the paper's Themis may also re-place the jobs whose lease expired; Halyard's
    Themis keeps an expired job that wins again where it is (policies/themis.py), so the set re-placed
    together is the round's starts. The candidates are random draws over orders and per-job
    candidates, not the arbiter's own enumeration (the paper gives no generator). Only for fixed-size orderings
    (:func:`augment` checks): place_all is given jobs, not the sizes a sizing stage chose."""

    batch: ClassVar[Literal[True]] = True
    rounds: bool = False

    suffix: ClassVar[str] = "cassini-joint"


    def acts_now(self, view: ClusterView) -> bool:
        return True

    def _candidate(self, view: ClusterView, order: list[JobInfo], free: FreeResources, state: PassState,
                   rng: np.random.Generator | None = None) -> dict[str, Allocation | Unplaced]:
        """The winners placed one after another in ``order`` on a copy of ``free``: each on the base's first
        choice (``rng`` None) or on one of the base's candidates drawn by ``rng``."""
        trial = free.copy()
        out: dict[str, Allocation | Unplaced] = {}
        for job in order:
            placed: Allocation | Unplaced
            if rng is None:
                placed = self.base.place(view, job, job.spec.num_gpus, trial, state)
            else:
                options = self.base.candidates(view, job, job.spec.num_gpus, trial, state, self.limit)
                placed = options[int(rng.integers(len(options)))] if options else \
                    self.base.place(view, job, job.spec.num_gpus, trial, state)
            if not isinstance(placed, Unplaced):
                placed = with_runtime_plan(view, job.spec, placed)
                trial.take(placed)
            out[job.job_id] = placed
        return out

    def cluster_candidates(self, view: ClusterView, new: Sequence[JobInfo], free: FreeResources,
                           state: PassState) -> list[dict[str, Allocation | Unplaced]]:
        """Up to ``limit`` distinct cluster-wide candidates, the greedy outcome first (see the class doc).
        One winner: the base's own candidates for it (which workers it gets, §4.4.2 step 1's second set)."""
        if len(new) == 1:
            job = new[0]
            options = self.base.candidates(view, job, job.spec.num_gpus, free, state, self.limit)
            if options:
                return [{job.job_id: with_runtime_plan(view, job.spec, a)} for a in options]
        first = self._candidate(view, list(new), free, state)
        started = {j for j, a in first.items() if not isinstance(a, Unplaced)}
        out, seen = [first], {_key(first)}
        if len(new) < 2:
            return out
        rng = np.random.default_rng([int((view.now - view.origin_s) * 1000), len(new)])
        for _ in range(1, self.limit):
            cand = self._candidate(view, [new[i] for i in rng.permutation(len(new))], free, state, rng)
            key = _key(cand)
            if key in seen or {j for j, a in cand.items() if not isinstance(a, Unplaced)} != started:
                continue
            seen.add(key)
            out.append(cand)
        return out

    def place_all(self, view: ClusterView, runnable: Sequence[JobInfo], new: Sequence[JobInfo],
                  plan: Plan, free: FreeResources, state: PassState) -> None:
        cands = self.cluster_candidates(view, new, free, state)
        best = 0
        if len(cands) > 1:
            world = _running(view, free, state)
            specs = {job.job_id: job.spec for job in new}
            scored = [score(view, {**world, **{j: job_links(view, specs[j], a) for j, a in c.items()
                                               if not isinstance(a, Unplaced)}}) for c in cands]
            best = select_candidate(scored) or 0
        chosen = cands[best]
        for job in new:
            placed = chosen[job.job_id]
            if isinstance(placed, Unplaced):
                plan.wait(job.job_id, placed)
            else:
                free.take(placed)
                plan.start(job.job_id, placed)


def _key(candidate: Mapping[str, Allocation | Unplaced]) -> tuple[Any, ...]:
    return tuple(sorted((j, tuple((n.node, n.gpus) for n in a.nodes)) for j, a in candidate.items()
                        if not isinstance(a, Unplaced)))


class CassiniShifts(Adjuster):
    """Algorithm 1's unique time-shifts for what will run after the plan (an adjuster)."""

    name = "cassini"

    def __init__(self, *, pace: bool = False, lock: bool = False) -> None:
        self.pace = pace
        self.lock = lock
        if lock:
            self.name = "cassini-lock"

    @property
    def acts_without_pending(self) -> bool:  # type: ignore[override]
        """Shifts change only when placements do, except a lock: a partner's finish (a pass with
        nothing waiting) must release or re-period the jobs it was locked with."""
        return self.lock

    def _locks_held(self, view: ClusterView) -> bool:
        """Whether a running job is paced on a lock's period (``+cassini-lock`` without ``pace``)."""
        return self.lock and not self.pace and any(
            job.allocation is not None and job.allocation.time_shift_period_s > 0.0 for job in view.running.values())

    def adjust(self, view: ClusterView, plan: Plan, free: FreeResources, state: PassState) -> None:
        moved = plan.replaced()  # started, stopped, migrated or resized
        if not moved and not self._locks_held(view):
            return  # nothing moved: every component keeps the shifts it has
        placed = plan.placements_after({job_id: job.allocation for job_id, job in view.running.items()})
        pending = {j.job_id: j.spec for j in view.pending} if plan.starts() else {}
        after: dict[str, tuple[JobSpec, Allocation]] = {
            job_id: (view.running[job_id].spec if job_id in view.running else pending[job_id], alloc)
            for job_id, alloc in placed.items()}
        links = {job_id: job_links(view, spec, alloc) for job_id, (spec, alloc) in after.items()
                 if len(alloc.nodes) > 1}
        graph = AffinityGraph.of({j: tuple(jl.profiles) for j, jl in links.items()})
        solve = solver(view, links)
        # On a graph with a loop (the base placed one, or running jobs already formed one) every link is
        # still solved and Algorithm 1 still gives one shift per job; Eq. 4.6 may then fail on a link.
        weights = edge_weights(Scored(graph, {link: solve(link, jobs) for link, jobs in graph.links.items()}, 0.0))
        iters = {j: links[j].iteration_s for j in graph.jobs}  # type: ignore[index]

        def reference(component: list[Hashable]) -> Hashable:
            """Algorithm 1 line 6, deterministic: a job that keeps its grid (shifted, not moved), else the first."""
            return next((j for j in component if j not in moved and after[j][1].has_time_shift),  # type: ignore[index]
                        component[0])

        shifts = bfs_time_shifts(graph, weights, iters, reference)
        locked: dict[Hashable, float] = {}
        if self.lock:
            profiles = {link: [links[j].profiles[link] for j in jobs]  # type: ignore[index]  # (as iters)
                        for link, jobs in graph.links.items()}
            locked = lock_periods(graph, iters, shifts, profiles,
                                  lambda link: link_capacity(view.cluster, link))  # type: ignore[arg-type]
            if locked:
                # Re-plan on the cycles the locked jobs will run: their profiles padded to the period, so
                # the unified circle is the period itself, not a rounding of the dedicated times.
                iters.update(locked)
                for link, jobs in graph.links.items():
                    if any(j in locked for j in jobs):
                        padded = [pr.padded_to(locked[j]) if j in locked else pr
                                  for j, pr in zip(jobs, profiles[link], strict=True)]
                        solution = solve_link(padded, link_capacity(view.cluster, link))  # type: ignore[arg-type]
                        weights.update({(j, link): solution.shifts_s[i] for i, j in enumerate(jobs)})
                shifts = bfs_time_shifts(graph, weights, iters, reference)
        if not moved:
            # Nothing placed, but a co-runner may have finished: re-plan only if a held lock is not the
            # one the jobs running now would get (otherwise every grid stays where it is).
            def held(j: str) -> float:
                alloc = after[j][1]
                return alloc.time_shift_period_s if alloc.has_time_shift else 0.0

            if all(held(j) == locked.get(j, 0.0) for j in after):
                return
        self._release_alone(view, after, graph, plan)
        for component in components(graph):
            ref = reference(component)
            ref_alloc = after[ref][1]  # type: ignore[index]
            # Keep the reference's grid: its shift from now is (epoch + shift - now); the others follow it.
            delta = (ref_alloc.time_shift_epoch_s + ref_alloc.time_shift_s - view.now
                     if ref not in moved and ref_alloc.has_time_shift else 0.0)
            if self.lock:
                # The reference's next grid point from now: a far-past epoch reduced by another job's
                # period would put that job anywhere on its circle.
                grid = ref_alloc.time_shift_period_s
                delta %= grid if grid > 0.0 else links[ref].iteration_s  # type: ignore[index]
            for j in component:
                alloc, period = after[j][1], iters[j]  # type: ignore[index]
                seconds = (shifts[j] + delta) % period
                sent = locked.get(j, period if self.pace else 0.0)
                if j not in moved and alloc.has_time_shift and alloc.time_shift_period_s == sent:
                    off = (alloc.time_shift_epoch_s + alloc.time_shift_s - view.now - seconds) % period
                    if min(off, period - off) < SHIFT_TOLERANCE_S:
                        continue  # already on this grid
                plan.set_time_shift(str(j), seconds, sent)

    def _release_alone(self, view: ClusterView, after: Mapping[str, tuple[JobSpec, Allocation]],
                       graph: AffinityGraph, plan: Plan) -> None:
        """Unpace the jobs that hold a lock's period but share no link with anyone now (their partners
        finished or left): Algorithm 1 does not see them, so nothing else would. Their grid is kept."""
        if not self.lock or self.pace:
            return
        shared = set(graph.jobs)
        for job_id, (spec, alloc) in after.items():
            if job_id in shared or not alloc.has_time_shift or alloc.time_shift_period_s <= 0.0:
                continue
            own = float(view.perf.iteration_time(spec, alloc, view.cluster).total_s)  # type: ignore[attr-defined]
            plan.set_time_shift(job_id, (alloc.time_shift_epoch_s + alloc.time_shift_s - view.now) % own, 0.0)


def lock_periods(graph: AffinityGraph, iteration_s: Mapping[Hashable, float], shifts: Mapping[Hashable, float],
                 profiles: Mapping[Hashable, list[Any]], capacity: Callable[[Hashable], float]
                 ) -> dict[Hashable, float]:
    """``+cassini-lock`` (our option; ``+cassini`` has none): one common period for jobs that Algorithm 1
    interleaves and whose iterations differ by at most ``LOCK_TOLERANCE`` pairwise (groups are joined
    through chains of such pairs, so a group's ends may differ by more).

    The unified circle of §4.3.2 rounds such times to one (380.3 ms and 380.7 ms are one 380 ms
    circle), so the plan assumes they repeat together; at their own periods they drift off it
    within a few hundred iterations, and the fabric (which keeps each job on its own period) puts
    them anywhere. Paced on one period (the agents start each iteration on the grid, as §4.4.2
    step 3's drift correction holds them) they keep the planned interleaving, the faster ones
    waiting up to ``LOCK_TOLERANCE`` of an iteration. A paced iteration that runs late waits for
    the next grid point (``halyard.timeshift``), so only jobs whose every shared link is compatible
    at the shifts given (Table 4.1's score at ``shifts`` of at least ``LOCK_MIN_SCORE``) are locked;
    a group's period is its longest iteration plus ``LOCK_HEADROOM``, rounded up to ``TIME_QUANTUM_S``."""
    compatible = {link for link, jobs in graph.links.items()
                  if link_score(profiles[link], capacity(link), [shifts[j] for j in jobs]) >= LOCK_MIN_SCORE}
    nbrs = graph.neighbours()
    eligible = {j for j in graph.jobs if all(link in compatible for link in nbrs[j])}
    parent = {j: j for j in eligible}

    def root(j: Hashable) -> Hashable:
        while parent[j] != j:
            parent[j] = parent[parent[j]]
            j = parent[j]
        return j

    for link in compatible:
        jobs = graph.links[link]
        for a in jobs:
            for b in jobs:
                ta, tb = iteration_s[a], iteration_s[b]
                if a in eligible and b in eligible and abs(ta - tb) <= LOCK_TOLERANCE * max(ta, tb):
                    parent[root(a)] = root(b)
    groups: dict[Hashable, list[Hashable]] = {}
    for j in graph.jobs:
        if j in eligible:
            groups.setdefault(root(j), []).append(j)
    out: dict[Hashable, float] = {}
    for members in groups.values():
        if len(members) > 1:
            longest = max(iteration_s[j] for j in members)
            period = math.ceil(longest * (1.0 + LOCK_HEADROOM) / TIME_QUANTUM_S - 1e-9) * TIME_QUANTUM_S
            out.update(dict.fromkeys(members, period))
    return out


def augment(policy: Any, *, lock: bool = False, joint: bool = False) -> Any:
    """``policy`` with Cassini: its per-job placement wrapped by :class:`CassiniPlacement` (a batch
    placement or a policy without a placement stage keeps its own) and :class:`CassiniShifts`
    appended to its adjusters; the name gains ``+cassini`` (``+cassini-lock`` with ``lock``:
    :func:`lock_periods`). The registry has checked the capabilities it needs (``Adjustable``;
    ``HasPlacement`` for ``joint``, policies/registry.py ``AUGMENTATIONS``); a placement that is not
    per-job, or sizes that are not fixed, are refused here by name."""
    suffix = "cassini-joint" if joint else "cassini-lock" if lock else "cassini"
    placement = getattr(policy, "placement", None)
    per_job = placement if isinstance(placement, Placement) and not placement.batch else None
    if joint and not (per_job is not None and isinstance(policy.sizing, FixedSize)):
        raise ValidationError(f"{policy.name!r} cannot take +cassini-joint: it needs a per-job placement and "
                              "fixed sizes to build cluster-wide candidates from", field="policy")
    if per_job is not None:
        wrapped = CassiniJointPlacement(per_job) if joint else CassiniPlacement(per_job)
        policy.placement = wrapped
    shifts = CassiniShifts(lock=lock)
    if joint:
        shifts.name = suffix  # the same Algorithm 1 shifts; the stage is named after the augmentation
    policy.adjusters = (*policy.adjusters, shifts)
    policy.name = f"{policy.name}+{shifts.name}"
    return policy
