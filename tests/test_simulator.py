"""The discrete-event engine: timing, passes on events and rounds, metrics."""

from __future__ import annotations

import gc

import pytest
from factories import job

from halyard.datamodel import EventKind, JobState, ValidationError
from halyard.policies import make_policy
from halyard.scheduling import Simulator, summarize


def simulate(cluster, perf, jobs, policy="fifo", round_s=300.0):
    sim = Simulator(cluster, make_policy(policy), perf, round_s=round_s)
    run = sim.run(jobs)
    return sim, run


def test_lone_job_runs_at_model_speed(small_cluster, perf):
    spec = job(8, iterations=2000, model="resnet18")
    sim, _ = simulate(small_cluster, perf, [spec])
    rec = sim.core.records[spec.job_id]
    # Nothing else runs, so JCT = iterations x the placement's iteration time.
    step = perf.iteration_time(spec, rec.allocation, small_cluster).total_s
    assert rec.state is JobState.COMPLETED
    assert rec.end_time == pytest.approx(2000 * step)
    assert rec.allocation.node_names == ("r0-n0", "r0-n1")


def test_fifo_queues_until_gpus_free(small_cluster, perf):
    first = job(16, iterations=500, job_id="first")
    second = job(16, iterations=500, job_id="second", submit=1.0)
    sim, _ = simulate(small_cluster, perf, [first, second])
    a, b = sim.core.records["first"], sim.core.records["second"]
    assert b.first_start == pytest.approx(a.end_time)
    assert b.queued_s == pytest.approx(a.end_time - 1.0)


def test_srtf_preempts_then_resumes_with_restart_cost(small_cluster, perf):
    long = job(16, iterations=20_000, job_id="long")
    short = job(16, iterations=100, job_id="short", submit=60.0)
    sim, _ = simulate(small_cluster, perf, [long, short], policy="srtf")
    L, S = sim.core.records["long"], sim.core.records["short"]
    kinds = [(e.job_id, e.kind) for e in sim.core.log if e.kind is not EventKind.SUBMITTED]
    assert kinds == [("long", EventKind.STARTED), ("long", EventKind.PREEMPTED),
                     ("long", EventKind.REQUEUED), ("short", EventKind.STARTED),
                     ("short", EventKind.COMPLETED), ("long", EventKind.STARTED),
                     ("long", EventKind.COMPLETED)]
    step = L.iteration_s
    done_before = int(60.0 / step)  # iterations checkpointed at preemption
    restore = perf.restart_cost_s(L.spec)
    assert L.end_time == pytest.approx(S.end_time + restore + (20_000 - done_before) * step)


def test_las_rounds_time_slice(small_cluster, perf):
    a = job(16, iterations=10**5, job_id="a")
    b = job(16, iterations=10**5, job_id="b", submit=10.0)
    sim, _ = simulate(small_cluster, perf, [a, b], policy="las", round_s=300.0)
    starts = [(e.time, e.job_id) for e in sim.core.log if e.kind is EventKind.STARTED]
    # b arrives with no attained service and takes the GPUs at once; from then on
    # the two swap at round boundaries, each time the waiting one has less service.
    assert starts[:4] == [(0.0, "a"), (10.0, "b"), (300.0, "a"), (600.0, "b")]
    first_end = min(r.end_time for r in sim.core.records.values())
    assert all(t % 300.0 == 0.0 for t, _ in starts[2:] if t < first_end)
    assert any(t == first_end for t, _ in starts)  # a completion triggers a pass too
    assert sim.core.records["a"].state is JobState.COMPLETED


def test_fifo_runs_no_round_passes(small_cluster, perf):
    jobs = [job(16, iterations=50_000, job_id=f"q{i}") for i in range(3)]
    sim, _ = simulate(small_cluster, perf, jobs)
    # Passes happen on events only: the arrival instant and two completions.
    assert sim.core.passes == 3


def test_rejected_jobs_are_reported_not_lost(small_cluster, perf):
    ok = job(1, job_id="ok")
    bad = job(64, job_id="toobig")
    sim, run = simulate(small_cluster, perf, [ok, bad])
    assert [r.job_id for r in run.rejected] == ["toobig"]
    assert "asks for 64 GPUs" in run.rejected[0].reason
    assert sim.core.records["ok"].state is JobState.COMPLETED


def test_unsorted_trace_is_refused(small_cluster, perf):
    with pytest.raises(Exception, match="not sorted"):
        simulate(small_cluster, perf, [job(1, submit=5.0), job(1, submit=1.0)])


def test_summary_metrics(small_cluster, perf):
    jobs = [job(16, iterations=500, job_id="a"), job(16, iterations=500, job_id="b")]
    sim, _run = simulate(small_cluster, perf, jobs)
    s = summarize(sim.core, policy="fifo", trace_jobs=2, rejected=0, wall_s=1.0)
    a, b = sim.core.records["a"], sim.core.records["b"]
    assert s["completed"] == 2
    assert s["makespan_s"] == pytest.approx(b.end_time)
    assert s["avg_jct_s"] == pytest.approx((a.end_time + b.end_time) / 2)
    assert s["avg_queue_s"] == pytest.approx(a.end_time / 2)
    assert s["gpu_utilization"] == pytest.approx(1.0)  # the cluster was never idle
    m = summarize(sim.core, policy="fifo", trace_jobs=2, rejected=0, wall_s=1.0, measure=(1, 2))
    assert m["completed"] == 1 and m["avg_jct_s"] == pytest.approx(b.end_time)


def test_until_ends_the_run_once_the_window_has_ended(small_cluster, perf):
    """Synergy's simulator stops once its measured jobs are done (runner.py,
    is_measurement_complete); arrivals go on until then, so later jobs stay unfinished."""
    jobs = [job(16, iterations=200, job_id=f"w{k}", submit=10.0 * k) for k in range(6)]
    sim = Simulator(small_cluster, make_policy("fifo"), perf)
    run = sim.run(jobs, until=(1, 3))
    records = sim.core.records
    assert records["w1"].state is JobState.COMPLETED and records["w2"].state is JobState.COMPLETED
    assert run.end_time == pytest.approx(records["w2"].end_time)
    assert records["w5"].state is not JobState.COMPLETED  # it arrived, but the run ended first
    whole = Simulator(small_cluster, make_policy("fifo"), perf)
    whole.run(jobs)
    # Stopping early changes nothing before the stop.
    assert whole.core.records["w2"].end_time == pytest.approx(records["w2"].end_time)


def test_until_past_the_trace_end_runs_to_the_end(small_cluster, perf):
    jobs = [job(16, iterations=200, job_id=f"e{k}", submit=10.0 * k) for k in range(3)]
    sim = Simulator(small_cluster, make_policy("fifo"), perf)
    sim.run(jobs, until=(2, 10))
    assert all(r.state is JobState.COMPLETED for r in sim.core.records.values())
    with pytest.raises(ValidationError, match="start < end"):
        Simulator(small_cluster, make_policy("fifo"), perf).run(jobs, until=(3, 3))


def test_starvation_guard_runs_a_job_starved_for_1000_hours(small_cluster, perf):
    """+starvation-guard (Synergy's public simulator, not its paper): a job that has not run for
    1,000 h goes ahead of every other, however short they are."""
    hour = 3600.0
    long = job(16, iterations=0, duration_s=50 * hour, job_id="long", submit=0.5 * hour)
    stream = [job(16, iterations=0, duration_s=10 * hour, job_id=f"s{k}", submit=k * 9 * hour) for k in range(130)]
    specs = sorted([long, *stream], key=lambda s: s.submit_time)

    def first_start(policy: str) -> float:
        sim = Simulator(small_cluster, make_policy(policy), perf, round_s=300.0)
        sim.run(specs)
        return sim.core.records["long"].first_start

    assert first_start("srtf") > 1100 * hour  # starved while the stream lasts
    assert 1000.5 * hour < first_start("srtf+starvation-guard") <= 1000.5 * hour + 300.0  # the next round
    assert make_policy("las+starvation-guard").name == "las+starvation-guard"
    with pytest.raises(ValidationError, match="srtf or las"):
        make_policy("fifo+starvation-guard")


def test_until_measured_needs_a_window(small_cluster):
    from halyard.experiments import simulate_jobs

    with pytest.raises(ValidationError, match="needs a --measure window"):
        simulate_jobs([job(1, iterations=10)], small_cluster, "fifo", until_measured=True)


def test_a_run_asked_to_freeze_the_earlier_objects_does_so_and_leaves_a_freeze_as_it_found_it(small_cluster, perf):
    """Simulator.run(freeze_gc=True) keeps Python's cyclic collector off the objects that existed before it
    (gc.freeze, 7-9 % of Synergy's public configuration was full collections over them) and unfreezes them
    after, also when the run raises; a freeze the caller made is neither added to nor undone. By default it
    freezes nothing: run back to back, each run would freeze the garbage the last one left."""
    seen: list[int] = []

    def progress(finished, known, now):
        seen.append(gc.get_freeze_count())

    jobs = [job(8, iterations=100, job_id=f"g{k}", submit=5.0 * k) for k in range(3)]
    assert gc.get_freeze_count() == 0
    Simulator(small_cluster, make_policy("fifo"), perf).run(jobs, on_progress=progress)
    assert seen and max(seen) == 0
    seen.clear()
    Simulator(small_cluster, make_policy("fifo"), perf).run(jobs, on_progress=progress, freeze_gc=True)
    assert seen and min(seen) > 0 and gc.get_freeze_count() == 0
    unsorted = [job(8, iterations=100, job_id="late", submit=50.0), job(8, iterations=100, job_id="early", submit=1.0)]
    with pytest.raises(ValidationError, match="not sorted"):
        Simulator(small_cluster, make_policy("fifo"), perf).run(unsorted, freeze_gc=True)
    assert gc.get_freeze_count() == 0
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        seen.clear()
        Simulator(small_cluster, make_policy("fifo"), perf).run(jobs, on_progress=progress, freeze_gc=True)
        assert seen and gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
