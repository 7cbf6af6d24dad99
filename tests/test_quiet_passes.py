"""Work a loaded Tiresias pass no longer does (issue 19): the core skips a pass that would repeat an
empty one (``Policy.quiet_until``), and 2D-LAS keeps its order between passes (``KeptOrder``).

After a pass that planned nothing, another pass over the same state -- no event logged, no node's
schedulable flag changed -- plans nothing again and gives the same reasons, unless the clock alone
changes the policy's mind. Tiresias' 2D-LAS (without starvation promotion) changes its mind only when
a running job's attained service reaches a queue threshold (``TwoDimensionalLas.same_until``).
"""

from __future__ import annotations

import math

import pytest
from factories import job
from loaded_runs import loaded_run
from policy_fakes import FakeJob, view_of

from halyard.datamodel import Allocation, JobState, NodeAllocation, load_cluster
from halyard.policies import StagedPolicy, make_policy
from halyard.policies.ordering import (
    SRTF_QUIET_KEY_TOLERANCE,
    SRTF_QUIET_MARGIN_S,
    Fifo,
    Srtf,
    StarvationGuard,
    _lines_meet,
)
from halyard.policies.synergy import MECHANISMS
from halyard.policies.tiresias import QUIET_MARGIN_S, KeptOrder, SkewConsolidation, TwoDimensionalLas
from halyard.scheduling import SchedulingCore, Simulator, summarize
from halyard.scheduling.timing import Pacer, performance_model_for
from halyard.traces import generate_synergy_trace


def _on(node: str, gpus: int) -> Allocation:
    return Allocation((NodeAllocation(node, tuple(range(gpus)), 3 * gpus, 62_500 * gpus),))


def test_same_until_is_the_first_running_job_to_reach_its_next_threshold(small_cluster):
    """a (2 GPUs, 3,000 GPU-s) reaches 3,250 GPU-s 125 s from now; b is past the last threshold and c
    waits (its service does not grow): the order holds until now + 125 s, less the margin."""
    a = FakeJob(job(2, job_id="a"), gpu_s=3000.0, allocation=_on("r0-n0", 2))
    b = FakeJob(job(4, job_id="b"), gpu_s=9000.0, allocation=_on("r0-n1", 4))
    c = FakeJob(job(1, job_id="c"), gpu_s=10.0)
    view = view_of(small_cluster, 1000.0, [a, b], [c])
    assert TwoDimensionalLas().same_until(view) == 1125.0 - QUIET_MARGIN_S
    assert TwoDimensionalLas().same_until(view_of(small_cluster, 1000.0, [b], [c])) == math.inf
    # With starvation promotion a waiting job moves with the clock: never quiet.
    assert TwoDimensionalLas(starvation_knob=2.0).same_until(view) == -math.inf


def _one_node_core(small_cluster, perf) -> SchedulingCore:
    core = SchedulingCore(small_cluster, make_policy("tiresias"), perf)
    core.free.schedulable[:] = False
    core.free.schedulable[small_cluster.node("r0-n0").index] = True
    return core


def test_a_round_pass_is_skipped_until_a_running_job_is_demoted(small_cluster, perf):
    """a holds the one schedulable node, b waits behind it in queue 0. The round pass at 300 s changes
    nothing (a has 1,200 GPU-s) and is skipped; at 900 s a has 3,600 GPU-s, is demoted to queue 1, and
    the pass that preempts it for b runs."""
    core = _one_node_core(small_cluster, perf)
    core.submit(job(4, job_id="a", iterations=10**6), 0.0)
    core.schedule(0.0)
    core.submit(job(4, job_id="b", iterations=10**6), 10.0)
    assert core.schedule(10.0) == [] and core.records["b"].state is JobState.PENDING
    assert core.schedule(300.0) == [] and core.skipped_passes == 1
    core.schedule(900.0)
    assert core.skipped_passes == 1
    assert core.records["b"].state is JobState.RUNNING and core.records["a"].state is JobState.PENDING


def test_a_pass_after_a_node_comes_back_is_not_skipped(small_cluster, perf):
    """No event is logged when a node starts taking work (an agent connects), but the free resources
    change: the next pass runs and starts the waiting job there."""
    core = _one_node_core(small_cluster, perf)
    core.submit(job(4, job_id="a", iterations=10**6), 0.0)
    core.submit(job(4, job_id="b", iterations=10**6), 0.0)
    core.schedule(0.0)
    assert core.schedule(5.0) == [] and core.records["b"].state is JobState.PENDING  # an empty pass
    assert core.schedule(10.0) == [] and core.skipped_passes == 1  # ... repeated: skipped
    core.free.schedulable[small_cluster.node("r0-n1").index] = True
    core.schedule(20.0)
    assert core.skipped_passes == 1 and core.records["b"].state is JobState.RUNNING


class _NeverQuiet(TwoDimensionalLas):
    def same_until(self, view) -> float:
        return -math.inf


def _loaded_run(ordering: TwoDimensionalLas, until: tuple[int, int] | None):
    # 1,000 jobs of the synthetic multi-GPU trace at about 90% of synergy-128 (test_loaded_schedule_exact).
    jobs = generate_synergy_trace(1000, rate_per_hour=3.765, multi_gpu=True, seed=1)
    return loaded_run(StagedPolicy("tiresias", ordering, placement=SkewConsolidation()), jobs, until)


def test_skipping_changes_no_event_and_no_wait_reason():
    """On a loaded trace, Tiresias with skipped passes and without them log the same events to the last
    bit and, stopped half-way, tell every waiting job the same reason."""
    for until in ((600, 601), None):  # job 600 ends with 12 jobs waiting
        quiet, quiet_log, quiet_waits = _loaded_run(TwoDimensionalLas(), until)
        every, every_log, every_waits = _loaded_run(_NeverQuiet(), until)
        assert quiet.skipped_passes > 0 and every.skipped_passes == 0
        assert summarize(quiet, policy="tiresias", trace_jobs=1000, rejected=0, wall_s=1.0)["skipped_passes"] \
            == quiet.skipped_passes
        assert quiet.passes + quiet.skipped_passes == every.passes
        assert quiet_log == every_log
        assert quiet_waits == every_waits
        assert bool(quiet_waits) == (until is not None)  # half-way jobs wait; at the end none does


class _Checked(TwoDimensionalLas):
    """Answers from the kept order and checks, every pass, that a fresh sort by the key agrees."""

    checks = 0

    def ranking(self, view, state, pending):
        kept = super().ranking(view, state, pending)
        fresh = sorted([*view.running.values(), *pending], key=self.key(view, state))
        assert kept.ranked() == fresh
        assert kept.held.tolist() == [0 if j.allocation is None else j.num_gpus for j in kept.jobs]
        self.checks += 1
        return kept


def test_the_kept_order_equals_a_fresh_sort_on_every_pass():
    """Three thresholds (jobs cross 1-3 times while running, and are preempted and restarted between),
    on the loaded trace: the order kept from the event log and the threshold times is the sorted one
    on every pass, and same_until from it equals the scan of every running job."""
    ordering = _Checked(thresholds=(500.0, 3250.0, 20_000.0))
    scan = TwoDimensionalLas(thresholds=ordering.thresholds)
    quiet_until = []

    def same_until(view):
        kept = TwoDimensionalLas.same_until(ordering, view)
        bare = view.__class__(**{**{f: getattr(view, f) for f in view.__slots__}, "events": None, "jobs": None})
        quiet_until.append(kept)
        assert kept == scan.same_until(bare)
        return kept

    ordering.same_until = same_until
    policy = StagedPolicy("tiresias", ordering, placement=SkewConsolidation())
    jobs = generate_synergy_trace(1000, rate_per_hour=3.765, multi_gpu=True, seed=1)
    sim = Simulator(load_cluster("synergy-128"), policy, performance_model_for(policy, contention="fair"))
    sim.run(jobs)
    # About 1,050 passes ranked, 370 quiet_until asked, 260 preemptions.
    assert ordering.checks > 800 and len(quiet_until) > 200 and sim.core.skipped_passes > 0
    assert sum(r.preemptions for r in sim.core.records.values()) > 150


def test_a_kept_order_follows_a_new_event_log_from_scratch(small_cluster, perf):
    """A view of another core (another log) starts the order over instead of reading past its end."""
    order = KeptOrder((3250.0,))
    for name in ("first", "second"):
        core = SchedulingCore(small_cluster, make_policy("tiresias"), perf)
        core.submit(job(4, job_id=f"{name}-a"), 0.0)
        core.submit(job(2, job_id=f"{name}-b"), 1.0)
        assert [j.job_id for j in order.ranking(core.view(2.0)).ranked()] == [f"{name}-a", f"{name}-b"]


def test_a_kept_order_that_misses_a_job_is_rebuilt_from_the_view(small_cluster, perf):
    """Should the kept order ever count other jobs than the view has (a change no event told of), the
    next call rebuilds it from the view's running and pending jobs instead of answering without one."""
    core = SchedulingCore(small_cluster, make_policy("tiresias"), perf)
    core.submit(job(4, job_id="a"), 0.0)
    core.submit(job(2, job_id="b"), 1.0)
    order = KeptOrder((3250.0,))
    assert [j.job_id for j in order.ranking(core.view(2.0)).ranked()] == ["a", "b"]
    order._forget("a")  # as if an event had been missed
    assert [j.job_id for j in order.ranking(core.view(3.0)).ranked()] == ["a", "b"]


def test_a_round_based_placement_skips_only_a_repeated_round(small_cluster, perf):
    """Synergy's TUNE places at round boundaries only (§3), so its passes between rounds say "waits for
    the next round" and its round passes give each job its own reason: an empty round pass vouches only
    for later round passes (``StagedPolicy.round_gated``). b waits behind a on the one schedulable node:
    the round at 300 s changes nothing (skipped: the pass at 0 s that started a promised so, Plan.settles;
    run anyway, it keeps the promise); the pass at 450 s (between rounds, same state) runs; the round at
    600 s runs (the last pass was of the other kind); the round at 900 s repeats it and is skipped."""
    for verify in (True, False):
        core = SchedulingCore(small_cluster, make_policy("synergy-tune:fifo"), perf)
        core.verify_promises = verify
        core.free.schedulable[:] = False
        core.free.schedulable[small_cluster.node("r0-n0").index] = True
        core.submit(job(4, job_id="a", iterations=10**6), 0.0)
        core.submit(job(4, job_id="b", iterations=10**6), 0.0)
        core.schedule(0.0)
        assert core.records["a"].state is JobState.RUNNING
        b = core.records["b"]
        at_start = core.wait_of(b)
        assert core.schedule(300.0) == [] and core.skipped_passes == (0 if verify else 1)
        at_round = core.wait_of(b)
        assert at_round == at_start
        assert core.schedule(450.0) == [] and core.skipped_passes == (0 if verify else 1)
        between = core.wait_of(b)
        assert "next round" in between.reason and between != at_round
        skipped = core.skipped_passes
        assert core.schedule(600.0) == [] and core.skipped_passes == skipped and core.wait_of(b) == at_round
        assert core.schedule(900.0) == [] and core.skipped_passes == skipped + 1 and core.wait_of(b) == at_round


class _FifoNeverQuiet(Fifo):
    def same_until(self, view) -> float:
        return -math.inf


def test_skipping_repeated_rounds_changes_no_event_and_no_wait_reason():
    """Synergy's TUNE and GREEDY under FIFO on a loaded trace (issue 38): with repeated empty rounds skipped
    and without, the same events to the last bit and the same reasons, stopped half-way."""
    jobs = generate_synergy_trace(1000, rate_per_hour=5.0, multi_gpu=True, seed=1)
    for mechanism in ("synergy-tune", "synergy-greedy"):
        runs = [loaded_run(StagedPolicy(f"{mechanism}:fifo", ordering, placement=MECHANISMS[mechanism]()),
                           jobs, (400, 401)) for ordering in (Fifo(), _FifoNeverQuiet())]
        (quiet, quiet_log, quiet_waits), (every, every_log, every_waits) = runs
        assert quiet.skipped_passes > 0 and every.skipped_passes == 0, mechanism
        assert quiet.passes + quiet.skipped_passes == every.passes
        assert quiet_log == every_log, mechanism
        assert quiet_waits == every_waits and quiet_waits


def _srtf_core(small_cluster, name: str, gap_iterations: int) -> SchedulingCore:
    """w (8 GPUs, 10,000 iterations) waits on the one schedulable 4-GPU node, which a (2 GPUs, as many
    iterations more as ``gap_iterations``) holds behind it in SRTF order; both at 0.26197 s an iteration,
    and a runs at that (ideal) rate, so its remaining time falls by a second a second."""
    policy = make_policy(name)
    core = SchedulingCore(small_cluster, policy, performance_model_for(policy))
    core.free.schedulable[:] = False
    core.free.schedulable[small_cluster.node("r0-n0").index] = True
    core.submit(job(8, job_id="w", iterations=10_000), 0.0)
    core.submit(job(2, job_id="a", iterations=10_000 + gap_iterations), 0.0)
    pacer = Pacer(core, core.perf)
    pacer.update(core.schedule(0.0), 0.0)
    a = core.records["a"]
    assert a.state is JobState.RUNNING and a.iteration_s == a.ideal_iteration_s == core.records["w"].ideal_iteration_s
    return core


def test_srtf_order_holds_until_a_running_job_passes_a_waiting_one(small_cluster):
    """SRTF (``Srtf.same_until``): a's remaining time is 4,000 x 0.26197 = 1,047.9 s more than w's and
    falls by a second a second, so the two meet at 1,047.9 s: the round passes at 600 and 900 s repeat the
    one at 300 s and are skipped; at 1,200 s a is ahead, and w's reason says so (2 GPUs left, not 4)."""
    core = _srtf_core(small_cluster, "proportional:srtf", 4000)
    w, meet = core.records["w"], 4000 * core.records["w"].ideal_iteration_s
    assert core.schedule(300.0) == [] and core.skipped_passes == 0
    before = core.wait_of(w)
    assert "(4 left)" in before.reason
    assert meet - 0.01 < core.policy.ordering.same_until(core.view(300.0)) < meet  # within the margins
    assert core.schedule(600.0) == [] and core.schedule(900.0) == [] and core.skipped_passes == 2
    assert core.wait_of(w) == before
    assert core.schedule(1200.0) == [] and core.skipped_passes == 2
    assert "(2 left)" in core.wait_of(w).reason


def test_srtf_order_holds_until_the_starvation_guard_promotes(small_cluster):
    """With ``+starvation-guard`` at 2,000 s (instead of 1,000 h) the order holds until w has waited that
    long (a passes w only at 10,479 s): the round at 1,800 s is skipped, the one at 2,100 s runs."""
    core = _srtf_core(small_cluster, "proportional:srtf+starvation-guard", 40_000)
    core.policy.ordering.guard = StarvationGuard(2000.0)
    assert core.schedule(300.0) == [] and core.skipped_passes == 0
    assert core.policy.ordering.same_until(core.view(300.0)) == 2000.0 - SRTF_QUIET_MARGIN_S
    assert core.schedule(1800.0) == [] and core.skipped_passes == 1
    assert core.schedule(2100.0) == [] and core.skipped_passes == 1


class _Promotions(StarvationGuard):
    """A starvation guard that adds the jobs it promotes to ``seen``."""

    def __init__(self, after_s: float, seen: set[str]) -> None:
        super().__init__(after_s)
        self.seen = seen

    def promote(self, view, state):
        promoted = super().promote(view, state)
        self.seen.update(promoted)
        return promoted


class _SrtfNeverQuiet(Srtf):
    def same_until(self, view) -> float:
        return -math.inf


def test_skipping_repeated_srtf_rounds_changes_no_event_and_no_wait_reason():
    """Synergy's GPU-proportional and TUNE under SRTF on a loaded trace, with a starvation guard of 20 h so
    that it promotes jobs: with repeated empty rounds skipped and without, the same events to the last bit
    and the same reasons, stopped half-way and at the end."""
    jobs = generate_synergy_trace(1000, rate_per_hour=5.0, multi_gpu=True, seed=1)
    for mechanism in ("proportional", "synergy-tune"):
        promoted: set[str] = set()
        for until in ((400, 401), None):
            runs = []
            for ordering in (Srtf(), _SrtfNeverQuiet()):
                ordering.guard = _Promotions(20 * 3600.0, promoted)
                runs.append(loaded_run(StagedPolicy(f"{mechanism}:srtf", ordering,
                                                    placement=MECHANISMS[mechanism]()), jobs, until))
            (quiet, quiet_log, quiet_waits), (every, every_log, every_waits) = runs
            assert quiet.skipped_passes > 0 and every.skipped_passes == 0, mechanism
            assert quiet.passes + quiet.skipped_passes == every.passes
            assert quiet_log == every_log, mechanism
            assert quiet_waits == every_waits
        assert promoted, mechanism  # the guard promoted jobs (103 under GPU-proportional, 10 under TUNE)


def test_an_agents_progress_report_ends_the_srtf_promise(small_cluster):
    """An agent that runs a job for real re-anchors its progress without an event
    (``SchedulingCore.report_progress``): a is reported at 45,000 of its 50,000 iterations at 700 s, so it
    now passes w, and the round at 900 s, which the promise from 300 s (until 10,479 s) would have
    skipped, runs and says so."""
    core = _srtf_core(small_cluster, "proportional:srtf", 40_000)
    w = core.records["w"]
    assert core.schedule(300.0) == [] and core.schedule(600.0) == [] and core.skipped_passes == 1
    assert "(4 left)" in core.wait_of(w).reason
    core.report_progress(core.records["a"], 700.0, 45_000)
    assert core.schedule(900.0) == [] and core.skipped_passes == 1
    assert "(2 left)" in core.wait_of(w).reason


class _Line:
    """A job whose SRTF remaining time is ``value`` until ``since``, then falls by ``slope`` a second
    (``ideal_iteration_s`` 1, so iterations are seconds)."""

    def __init__(self, value: float, since: float, slope: float) -> None:
        self.iterations_total, self.ideal_iteration_s = 10_000, 1.0
        self._line = (10_000 - value, since, slope)

    def progress_line(self):
        done, since, rate = self._line
        return done, since, rate, 0.0, math.nan


def _tolerance(a: float, b: float) -> float:
    return SRTF_QUIET_KEY_TOLERANCE * (a + b + 1.0)


def _remaining_line(job) -> tuple[float, float, float]:
    """SRTF's remaining time as a line (``Srtf._line_of``'s): value until ``since``, then falling by ``slope``."""
    done, since, rate, _, _ = job.progress_line()
    return (job.iterations_total - done) * job.ideal_iteration_s, since, rate * job.ideal_iteration_s


def _remaining_times_meet(ahead, behind, now: float) -> float:
    return _lines_meet(_remaining_line(ahead), _remaining_line(behind), now)


def test_remaining_times_meet_along_straight_and_bent_lines():
    """``_lines_meet`` (Srtf.same_until's pairs) where the lines are straight from now, where the
    one behind restores (flat) first, where the one ahead speeds up after its restore, and never."""
    waiting = _Line(1000.0, 0.0, 0.0)
    # behind falls a second a second from 1,400 at 100 s: meets 1,000 about 400 s on
    assert _remaining_times_meet(waiting, _Line(1500.0, 0.0, 1.0), 100.0) == pytest.approx(
        100.0 + 400.0 - _tolerance(1000.0, 1400.0))
    # behind restores until 300 s at 1,500, then falls: meets 500 s after that
    assert _remaining_times_meet(waiting, _Line(1500.0, 300.0, 1.0), 100.0) == pytest.approx(
        300.0 + 500.0 - _tolerance(1000.0, 1500.0))
    # ahead (1,000) restores until 200 s, then falls at 2 a second; behind (1,150) falls at 1 from now:
    # the gap closes to 50 by 200 s, then opens: never
    assert _remaining_times_meet(_Line(1000.0, 200.0, 2.0), _Line(1150.0, 100.0, 1.0), 100.0) == math.inf
    # the same with behind at 1,080: the gap (80) closes before 200 s
    assert _remaining_times_meet(_Line(1000.0, 200.0, 2.0), _Line(1080.0, 100.0, 1.0), 100.0) == pytest.approx(
        100.0 + 80.0 - _tolerance(1000.0, 1080.0), abs=1e-3)
    # already within the tolerance: now
    assert _remaining_times_meet(waiting, _Line(1000.0, 0.0, 1.0), 0.0) == 0.0
