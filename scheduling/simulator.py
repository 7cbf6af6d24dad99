"""Discrete-event simulation: the scheduling core on a virtual clock.

The simulator is the core plus a simulated agent pool. Between events every
job advances at a constant rate given by the performance model, so the cost
of a run grows with the number of events, not of iterations. Passes run on
events (arrivals, completions; all events at one instant share one pass) and,
for policies whose priorities drift with time, on a round timer while jobs
wait (or, for policies that act on running jobs alone, while jobs run), and
when the policy asks for a pass between rounds (``SchedulingCore.wake_at``).
"""

from __future__ import annotations

import contextlib
import gc
import heapq
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from halyard.datamodel import Cluster, JobSpec, JobState, ValidationError
from halyard.emulator import PerformanceModel
from halyard.policies import Action, Policy
from halyard.scheduling.core import SchedulingCore
from halyard.scheduling.timing import Pacer, performance_model_for

# Event kinds, in the order they are handled at one instant: completions free
# GPUs before arrivals are seen, and a round pass sees both.
_COMPLETION, _ARRIVAL, _ROUND = 0, 1, 2

# With ``until``, the window's not-yet-ended jobs are re-checked against the core's records
# once this few remain (completions and rejections are taken off as they happen), then against
# the core's terminal events since the last check (in Synergy's SRTF configuration the last
# 64 measured jobs take ~20,000 instants to end: a check of every one of them at each was ~2 % of the run).
_PRUNE_BELOW = 64

ProgressCallback = Callable[[int, int, float], None]  # (finished jobs, known jobs, cluster time)


@contextlib.contextmanager
def _earlier_objects_frozen() -> Iterator[None]:
    """While a run lasts, Python's cyclic garbage collector leaves alone the objects that existed before it
    (``gc.freeze``; ``gc.unfreeze`` after): :meth:`Simulator.run`'s ``freeze_gc``. Its full collections scan
    every tracked object: in Synergy's public configuration (benchmarks/bench_synergy_public_config.py) two of
    them, mostly over the ~200,000 objects of the imports (numba's among them) and the trace, cost 0.23-0.30 s,
    7-9 % of the run. Nothing the run decides depends on when the collector runs. A freeze already in place
    (the caller's, or another thread's run) is left as it is. Garbage left before the run is frozen with the
    rest, so it is for a process that runs one simulation, or collects before each (a benchmark, outside its
    timer): run back to back with nothing between them, each run froze the last one's objects through its
    own, and the process grew by ~75,000 objects a run on that configuration."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@dataclass(frozen=True)
class Rejected:
    """A trace job the core refused at submission, and why."""

    job_id: str
    reason: str


@dataclass
class SimulationRun:
    core: SchedulingCore
    rejected: list[Rejected] = field(default_factory=list)
    end_time: float = 0.0


class SimulatedPool:
    """Carries out applied actions the way emulated agents would: each running job
    runs at the performance model's rate (its links' co-runners included) and
    completes when its work is done."""

    def __init__(self, core: SchedulingCore, perf: PerformanceModel, push: Callable[[float, int, str, int], None]):
        self.core = core
        self.pacer = Pacer(core, perf)
        self.push = push

    def execute(self, actions: list[Action], now: float) -> None:
        for record in self.pacer.update(actions, now):
            self.push(record.finish_time(), _COMPLETION, record.job_id, record.epoch)


def _multiples_before(first: int, until: float, round_s: float) -> int:
    """How many of the instants ``k * round_s``, ``k >= first``, come before ``until`` (a whole ``round_s``:
    each such instant is exact)."""
    if math.isinf(until):
        return 0
    k = math.ceil(until / round_s)
    while k * round_s < until:
        k += 1
    while k > first and (k - 1) * round_s >= until:
        k -= 1
    return max(0, k - first)


class Simulator:
    def __init__(self, cluster: Cluster, policy: Policy, perf: PerformanceModel | None = None,
                 *, round_s: float = 300.0, rounds_only: bool = False) -> None:
        """``rounds_only`` (off by default): run a scheduling pass only at round boundaries, never at an
        arrival or a completion, as a time-stepped simulator does (EasyScale's public simulator,
        ``Cluster.step``: a job that arrives or a GPU that frees up waits for the next round);
        rounds then run while any job waits, whatever the policy. Not in ``replay``: it is a way to
        measure the time-stepped simulators' semantics (docs/reproductions/easyscale-public-comparison.md)."""
        self.perf = perf or performance_model_for(policy)
        self.core = SchedulingCore(cluster, policy, self.perf, round_s=round_s)
        self.round_s = round_s
        self.rounds_only = rounds_only
        # Push the next round past rounds whose passes the core would skip as quiet (SchedulingCore.skipped_until);
        # False: push every round and let the core skip them one by one (the tests compare the two).
        self.skip_quiet_rounds = True
        self._heap: list[tuple[float, int, int, str, int]] = []
        self._seq = 0
        self.pool = SimulatedPool(self.core, self.perf, self._push)

    def _push(self, when: float, kind: int, job_id: str, epoch: int) -> None:
        if math.isfinite(when):
            self._seq += 1
            heapq.heappush(self._heap, (when, kind, self._seq, job_id, epoch))

    def run(self, jobs: Iterable[JobSpec], *, on_progress: ProgressCallback | None = None,
            total_jobs: int | None = None, until: tuple[int, int] | None = None,
            freeze_gc: bool = False) -> SimulationRun:
        """Replay ``jobs`` (sorted by submit time) until every accepted job has ended.

        ``until=(start, end)`` ends the run instead as soon as every job at trace positions
        [start, end) has ended (completed or been rejected), as Synergy's simulator ends a run
        once its measured jobs 4000-4999 are done (``runner.py``, ``is_measurement_complete``):
        arrivals keep coming until then, so the measured jobs see an open system, not one
        that drains after the last arrival. ``freeze_gc``: the objects that exist before the run
        are left out of the garbage collector's work for its length (:func:`_earlier_objects_frozen`
        says when that is safe)."""
        with _earlier_objects_frozen() if freeze_gc else contextlib.nullcontext():
            return self._run(jobs, on_progress, total_jobs, until)

    def _run(self, jobs: Iterable[JobSpec], on_progress: ProgressCallback | None, total_jobs: int | None,
             until: tuple[int, int] | None) -> SimulationRun:
        core, heap, policy = self.core, self._heap, self.core.policy
        run = SimulationRun(core)
        arrivals: Iterator[JobSpec] = iter(jobs)
        specs: dict[str, JobSpec] = {}
        last_submit = -math.inf
        if until is not None and not 0 <= until[0] < until[1]:
            raise ValidationError(f"need 0 <= start < end, got {until!r}", field="until")
        window: set[str] = set()  # the ids of the jobs at positions [start, end) not yet ended
        pruned: int | None = None  # the core's log length when the window was last checked against it
        position = 0
        exhausted = False

        def next_arrival() -> None:
            nonlocal last_submit, position, exhausted
            spec = next(arrivals, None)
            if spec is None:
                exhausted = True
                return
            if spec.submit_time < last_submit:
                raise ValidationError(f"trace is not sorted by submit time at job {spec.job_id!r}",
                                      field="submit_time")
            last_submit = spec.submit_time
            specs[spec.job_id] = spec
            if until is not None and until[0] <= position < until[1]:
                window.add(spec.job_id)
            position += 1
            self._push(spec.submit_time, _ARRIVAL, spec.job_id, 0)

        next_arrival()
        round_at = math.inf  # the next round's (or wake's) instant; a pushed round at another instant is stale
        wakes = getattr(policy, "wake_at", None) is not None
        # Rounds at whole multiples of a whole number of seconds: every instant ``k * round_s`` the chain of
        # rounds below reaches is exact, so a round pushed past quiet rounds lands on one of them.
        # Without wake_at no round is ever superseded, so a stale round is one pushed past quiet rounds whose
        # instant an event reached first: its instant, if nothing else falls on it, is passed over as if it had
        # never been pushed.
        skips_ahead = float(self.round_s).is_integer() and self.skip_quiet_rounds and not wakes
        ahead: tuple[int, float] | None = None  # rounds pushed past: (the first one's k, where the next one went)
        # The policy's last wake_at answer. An instant that changed nothing (stale completions and rounds only)
        # leaves the jobs and the policy as they were, so the answer stands while it is still ahead.
        wake_due = math.inf
        finished = 0
        while heap:
            now = heap[0][0]
            changed = rounded = False
            stale_only = skips_ahead
            while heap and heap[0][0] == now:
                _, kind, _, job_id, epoch = heapq.heappop(heap)
                stale_only = stale_only and kind == _ROUND and now != round_at
                if kind == _COMPLETION:
                    record = core.records[job_id]
                    if record.epoch == epoch and record.state is JobState.RUNNING:
                        core.complete(job_id, now)
                        finished += 1
                        changed = True
                        window.discard(job_id)
                elif kind == _ARRIVAL:
                    try:
                        core.submit(specs.pop(job_id), now)
                        changed = True
                    except ValidationError as exc:
                        run.rejected.append(Rejected(job_id, str(exc)))
                        finished += 1
                        window.discard(job_id)
                    next_arrival()
                elif now == round_at:  # (a round superseded by an earlier wake is stale: skipped)
                    round_at = math.inf
                    changed = rounded = True
            if stale_only:
                continue
            quiet_until = -math.inf  # where this instant's pass, if skipped as quiet, says the next may run
            if ahead is not None:  # the rounds pushed past that came before now: each a pass the core skips
                first, went = ahead
                core.skipped_passes += _multiples_before(first, min(now, went), self.round_s)
                k = round(now / self.round_s)
                if now < went and k >= first and k * self.round_s == now:
                    changed = rounded = True  # one of them falls on now: this instant is a round, as it was
                ahead = None
            if changed:  # with rounds_only an arrival or completion is recorded (and re-rates), not scheduled
                passes = (rounded or not self.rounds_only) and (core.pending or policy.acts_without_pending)
                self.pool.execute(core.schedule(now) if passes else [], now)
                if passes:
                    quiet_until = core.skipped_until
            waiting = core.pending or (policy.acts_without_pending and core.running)
            due = math.inf
            if (policy.needs_rounds or self.rounds_only) and waiting:
                due = (math.floor(now / self.round_s) + 1) * self.round_s
                if skips_ahead and quiet_until > due:  # this instant's pass was skipped as quiet:
                    # so is every round's before the policy's quiet_until, with nothing else happening first
                    # (an arrival or a completion is an event, and pushes a round of its own): go to the first
                    # round at or after it. Never later than that round (x / round_s rounds to at most an
                    # integer above x), and its pass is asked again; inf: no round until an event.
                    first = round(due / self.round_s)
                    due = (math.ceil(quiet_until / self.round_s) * self.round_s
                           if math.isfinite(quiet_until) else math.inf)
                    ahead = (first, due)
            if wakes:  # a pass the policy asks for between rounds (SchedulingCore.wake_at)
                if changed or not now < wake_due:
                    wake_due = core.wake_at(now)
                due = min(due, wake_due)
            if due < round_at:
                round_at = due
                self._push(round_at, _ROUND, "", 0)
            if on_progress is not None and changed:
                on_progress(finished, total_jobs or len(core.records), now)
            run.end_time = now
            if until is not None and changed and len(window) <= _PRUNE_BELOW:  # a pass may also fail or drop a job
                if pruned is None:
                    window = {j for j in window if j in specs or not core.records[j].state.terminal}
                else:  # every job the core ends has a terminal event: only the events since the last check are read
                    window.difference_update(e.job_id for e in core.log.since(pruned) if e.state.terminal)
                pruned = len(core.log)
            if until is not None and not window and (position >= until[1] or exhausted):
                break
        return run
