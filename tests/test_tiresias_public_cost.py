"""The shortcuts that make the Tiresias rule set matched to SymbioticLab/Tiresias cheaper (issue 38), each held to
its plain computation on the side-by-side harness's own inputs (benchmarks/tiresias_public_perjob.py).

* ``Simulator.skip_quiet_rounds``: after a round whose pass the core skipped as quiet, the next round is pushed
  to the first one at or after the policy's ``quiet_until`` (``SchedulingCore.skipped_until``) instead of
  every round being pushed and skipped one by one: with 1-s rounds (step ``second-rounds``) that was 435,091
  skipped rounds on workload philly-all.
* ``ReferenceLists`` (``TwoDimensionalLas(reference_lists=True)``, steps ``reference-lists`` and
  ``late-demotion``) keeps each queue as a list of job ids and reads again, at a pass, only the jobs that can
  have moved; it was a dict of (queue, place) rebuilt, and every live job read and sorted, at every pass.
  :class:`PlainLists` below is that plain computation, as it stood before (policies/tiresias.py at
  5e754e1), and :class:`Lockstep` runs both pass by pass: the same order, the same next queue jump.
"""

from __future__ import annotations

import bisect
import math
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from halyard.datamodel import Allocation, JobSpec, NodeAllocation, load_cluster
from halyard.emulator import PerformanceModel
from halyard.policies import make_policy
from halyard.policies.passstate import PassState
from halyard.policies.plan import Plan
from halyard.policies.staged import StagedPolicy
from halyard.policies.stages import Ranking
from halyard.policies.tiresias import SkewConsolidation, TwoDimensionalLas, running_after
from halyard.policies.view import ClusterView, JobInfo
from halyard.scheduling import SchedulingCore, Simulator
from halyard.traces import read_trace

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
try:
    import tiresias_public_perjob as harness
finally:
    sys.path.pop(0)

MATCHED = harness.variants()[-1]  # every step on: reference lists, late demotion, 1-s rounds


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The harness's philly-1000 workload (480 Philly-sample jobs on 1 x 16 x 4 GPUs), as it writes it."""
    folder = tmp_path_factory.mktemp("tiresias-public")
    start, jobs, compress, cluster = harness.WORKLOADS["philly-1000"]
    harness.write_inputs(harness.draw(start, jobs, compress), harness.CLUSTER_SPECS[cluster], folder)
    return folder


def simulate(folder: Path, variant: str, *, skip_quiet_rounds: bool = True, rounds_only: bool = False) -> Simulator:
    """The harness's Halyard side of ``variant`` on ``folder``; the simulator, with its run's end as ``end_time``."""
    policy, perf = harness.halyard_policy_and_perf(variant)
    sim = Simulator(load_cluster(str(folder / "cluster.toml")), policy, perf,
                    round_s=1.0 if "second-rounds" in variant.split("+") else 300.0, rounds_only=rounds_only)
    sim.skip_quiet_rounds = skip_quiet_rounds
    sim.end_time = sim.run(list(read_trace(folder / "halyard.csv", strict=True).jobs)).end_time
    return sim


def log_of(sim: Simulator) -> list[tuple[object, ...]]:
    return [(e.seq, e.time, e.job_id, e.kind, e.state, e.detail) for e in sim.core.log]


@pytest.mark.parametrize(("variant", "rounds_only"), [(MATCHED, False), ("tiresias", False), (MATCHED, True)])
def test_rounds_pushed_past_quiet_ones_leave_the_schedule_as_it_was(inputs: Path, variant: str,
                                                                    rounds_only: bool) -> None:
    """The same event log, event for event, with every round pushed and skipped by the core and with the rounds
    the core's ``skipped_until`` vouches for never pushed; the same passes run, and the rounds pushed past are
    counted as the passes the core would have skipped. With 1-s rounds far fewer rounds are pushed (the
    simulator's push count, ``_seq``). With ``rounds_only`` an arrival that falls on a round pushed past is
    still scheduled at that round."""
    fast = simulate(inputs, variant, rounds_only=rounds_only)
    plain = simulate(inputs, variant, skip_quiet_rounds=False, rounds_only=rounds_only)
    assert log_of(fast) == log_of(plain)
    assert fast.end_time == plain.end_time
    assert (fast.core.passes, fast.core.skipped_passes) == (plain.core.passes, plain.core.skipped_passes)
    if variant == MATCHED:
        assert fast._seq < plain._seq / 4


class PlainLists:
    """The reference's lists computed plainly: every live job read, keyed (queue, place) and sorted at every pass,
    the places renumbered after it (ReferenceLists before issue 38)."""

    def __init__(self, thresholds: tuple[float, ...], late_demotion: bool) -> None:
        self.thresholds, self.late_demotion = thresholds, late_demotion
        self._place: dict[str, tuple[int, int]] = {}
        self._next = 0
        self._live: frozenset[str] = frozenset()
        self.next_jump = math.inf

    def key(self, view: ClusterView, state: PassState) -> Callable[[JobInfo], tuple[int, int]]:
        places = self.tentative(view, state)[0]
        return lambda job: places[job.job_id]

    def tentative(self, view: ClusterView, state: PassState) -> tuple[dict[str, tuple[int, int]], int, bool]:
        found = state.get("plain")
        if found is not None:
            return found
        now, thresholds, kept = view.now, self.thresholds, self._place
        live = frozenset((*view.running, *(job.job_id for job in view.pending)))
        event = not self.late_demotion or live != self._live or now >= self.next_jump
        places, appended = {}, []
        for job in (*view.running.values(), *view.pending):
            attained = job.attained_gpu_s(now)
            had = kept.get(job.job_id)
            queue = bisect.bisect_right(thresholds, attained) if had is None or event else had[0]
            if had is None or had[0] != queue:
                when = (job.spec.submit_time if had is None or job.allocation is None
                        else now if self.late_demotion else now - (attained - thresholds[queue - 1]) / job.num_gpus)
                appended.append((when, job.spec.submit_time, job.arrival_seq, job.job_id, queue))
            else:
                places[job.job_id] = had
        after = self._next
        for *_, job_id, queue in sorted(appended):
            places[job_id], after = (queue, after), after + 1
        state.put("plain", (places, after, event))
        return places, after, event

    def on_applied(self, view: ClusterView, plan: Plan, state: PassState) -> None:
        places, after, event = self.tentative(view, state)
        running = running_after(view, plan)
        order = sorted(places, key=lambda job_id: (places[job_id][0], job_id not in running, places[job_id][1]))
        self._place = {job_id: (places[job_id][0], after + i) for i, job_id in enumerate(order)}
        self._next = after + len(order)
        self._live = frozenset(places)
        if self.late_demotion and event:
            now, jump = view.now, math.inf
            jobs = {job.job_id: job for job in (*view.running.values(), *view.pending)}
            for job_id in running:
                queue = places[job_id][0]
                if queue < len(self.thresholds):
                    job = jobs[job_id]
                    jump = min(jump, now + math.ceil((self.thresholds[queue] - job.run_time_s(now)) / job.num_gpus))
            self.next_jump = jump


class Lockstep(TwoDimensionalLas):
    """2D-LAS on the reference's lists, with :class:`PlainLists` run beside them: every pass's ranking must be the
    plain sort, every applied pass must leave the same next queue jump."""

    def __init__(self, late_demotion: bool, incremental: bool = True) -> None:
        super().__init__(harness.PUBLIC_THRESHOLDS_GPU_S, reference_lists=True, late_demotion=late_demotion)
        assert self._lists is not None
        self._lists.incremental = incremental
        self.plain = PlainLists(harness.PUBLIC_THRESHOLDS_GPU_S, late_demotion)
        self.plain_state = PassState()
        self.ranked = 0

    def ranking(self, view: ClusterView, state: PassState, pending: list[JobInfo]) -> Ranking:
        fast = super().ranking(view, state, pending)
        expected = sorted([*view.running.values(), *pending], key=self.plain.key(view, self.plain_state))
        assert [j.job_id for j in fast.ranked()] == [j.job_id for j in expected]
        assert list(fast.held_ranked()) == [0 if j.allocation is None else j.num_gpus for j in expected]
        self.ranked += 1
        return fast

    def on_applied(self, view: ClusterView, plan: Plan, state: PassState) -> None:
        super().on_applied(view, plan, state)
        self.plain.on_applied(view, plan, self.plain_state)
        self.plain_state = PassState()
        assert self._lists is not None and self._lists.next_jump == self.plain.next_jump


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Drawn by the harness as its workloads are, denser: 600 Philly-sample jobs from the 300th, arrivals 3x
    closer, on 1 x 16 x 4 GPUs (jobs wait and are preempted at most passes)."""
    folder = tmp_path_factory.mktemp("tiresias-loaded")
    harness.write_inputs(harness.draw(300, 600, 3.0), harness.CLUSTER_SPECS["cluster_spec"], folder)
    return folder


@pytest.mark.parametrize(("workload", "late_demotion", "round_s"),
                         [("inputs", True, 1.0), ("inputs", False, 300.0), ("loaded", True, 1.0),
                          ("loaded", False, 300.0), ("loaded", True, 300.0)])
def test_kept_lists_rank_as_the_plain_sort(request: pytest.FixtureRequest, workload: str, late_demotion: bool,
                                           round_s: float) -> None:
    """Pass by pass the lists' ranking is the plain (queue, place) sort of every running and pending job, and the
    next queue jump the plain one; the whole event log is the one every live job read at every pass
    (``incremental = False``) gives."""
    folder = request.getfixturevalue(workload)
    logs = []
    for incremental in (True, False):
        ordering = Lockstep(late_demotion, incremental)
        _, perf = harness.halyard_policy_and_perf(MATCHED)
        sim = Simulator(load_cluster(str(folder / "cluster.toml")),
                        StagedPolicy("lockstep", ordering, placement=SkewConsolidation(is_high_skew=lambda _m: False)),
                        perf, round_s=round_s)
        sim.run(list(read_trace(folder / "halyard.csv", strict=True).jobs))
        assert ordering.ranked > 500 and sum(e.kind.value == "PREEMPTED" for e in sim.core.log) > 10
        logs.append(log_of(sim))
    assert logs[0] == logs[1]


def _on(node: str, gpus: int) -> Allocation:
    return Allocation((NodeAllocation(node, tuple(range(gpus)), 3 * gpus, 62_500 * gpus),))


class Passes:
    """A core on the harness's cluster whose passes are plans given by hand, each ranked and applied by a
    :class:`Lockstep` 2D-LAS with late demotion (states the drawn runs do not reach)."""

    def __init__(self, folder: Path) -> None:
        self.core = SchedulingCore(load_cluster(str(folder / "cluster.toml")), make_policy("fifo"),
                                   PerformanceModel(communication=False))
        self.ordering = Lockstep(late_demotion=True)
        self.lists = self.ordering._lists
        assert self.lists is not None

    def submit(self, job_id: str, at: float, gpus: int) -> None:
        self.core.submit(JobSpec(job_id=job_id, submit_time=at, model="resnet50", num_gpus=gpus, duration_s=1e6), at)

    def run(self, now: float, start: dict[str, Allocation] | None = None, stop: tuple[str, ...] = ()) -> list[str]:
        """One pass at ``now`` that preempts ``stop`` and starts ``start``; the ranking it was given, best first."""
        plan = Plan()
        for job_id in stop:
            plan.preempt(job_id)
        for job_id, allocation in (start or {}).items():
            plan.start(job_id, allocation)
        view, state = self.core.view(now), PassState()
        ranking = self.ordering.ranking(view, state, list(view.pending))
        self.core.apply(plan, now)
        self.ordering.on_applied(self.core.view(now), plan, state)
        return [job.job_id for job in ranking.ranked()]


def test_a_running_job_demoted_by_a_pass_that_changes_nothing_goes_before_the_waiting_ones(inputs: Path) -> None:
    """W (1 GPU) runs 4,000 s, reaches queue 1 and is stopped for J at J's arrival; J crosses 3,250 GPU-s at
    7,250 s and is demoted at K's arrival (7,300 s) by a pass that starts and stops nothing: appended to queue 1
    behind W, it must still go before W, which waits (the lists move running jobs first after every pass)."""
    p = Passes(inputs)
    p.submit("W", 0.0, 1)
    p.run(0.0, start={"W": _on("r0-n0", 1)})
    p.submit("J", 4000.0, 1)
    p.run(4000.0, start={"J": _on("r0-n1", 1)}, stop=("W",))
    assert p.lists.next_jump == 7250.0
    p.submit("K", 7300.0, 1)
    assert p.run(7300.0) == ["K", "W", "J"]  # this pass's lists: J appended to queue 1
    assert p.run(7301.0) == ["K", "J", "W"]  # after it: running first


def test_a_job_stopped_between_events_is_read_again_at_the_next(inputs: Path) -> None:
    """J (2 GPUs) has run 1,000 s (2,000 GPU-s) at A's arrival (an event: jump at +1,125 s, ceil((3,250 - 1,000)
    / 2)), crosses 3,250 GPU-s 625 s later, is stopped by a pass at +700 s (no event: its queue is kept), a pass
    at +701 s reads its stop, and K arrives at +702 s: the reference demotes J there, so it must be read again
    though no event pass has read it since it ran (``ReferenceLists._unsettled``)."""
    p = Passes(inputs)
    p.submit("J", 0.0, 2)
    p.submit("W", 0.0, 1)
    p.run(0.0, start={"J": _on("r0-n0", 2)})
    p.submit("A", 1000.0, 1)
    p.run(1000.0)
    assert p.lists.next_jump == 2125.0
    p.run(1700.0, stop=("J",))
    p.run(1701.0)
    assert "J" in p.lists._unsettled
    p.submit("K", 1702.0, 1)
    assert p.run(1702.0) == ["W", "A", "K", "J"]  # J demoted to queue 1, behind the waiting jobs of queue 0
