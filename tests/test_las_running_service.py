"""LAS ranks from running jobs' service lines kept between passes (``RunningService``, issue 19): the
order must be the one sorting every running and pending job by ``Las.key`` gives, on every pass."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from factories import job

from halyard.datamodel import load_cluster
from halyard.policies import StagedPolicy, make_policy
from halyard.policies.ordering import Las, RunningService
from halyard.policies.placement import FirstFitConsolidated
from halyard.policies.stages import Ordering
from halyard.scheduling import SchedulingCore, Simulator
from halyard.scheduling.timing import performance_model_for
from halyard.traces import generate_synergy_trace


def held_by_id(ranking):
    """Each ranked job's held GPUs (0: waiting), by job id."""
    return {job.job_id: int(ranking.held[i]) for i, job in enumerate(ranking.jobs)}


class _Checked(Las):
    checks = 0

    def ranking(self, view, state, pending):
        kept = super().ranking(view, state, pending)
        fresh = Ordering.ranking(self, view, state, pending)
        assert [j.job_id for j in kept.ranked()] == [j.job_id for j in fresh.ranked()]
        assert held_by_id(kept) == held_by_id(fresh)
        self.checks += 1
        return kept


def test_the_kept_lines_give_the_sorted_order_on_every_pass():
    """The synthetic trace at 6 jobs/h on 128 GPUs (~1,500 preemptions): jobs start, are preempted,
    restart and end between passes."""
    ordering = _Checked()
    policy = StagedPolicy("las", ordering, placement=FirstFitConsolidated())
    sim = Simulator(load_cluster("synergy-128"), policy, performance_model_for(policy, contention="fair"))
    sim.run(generate_synergy_trace(600, rate_per_hour=6.0, multi_gpu=True, seed=1))
    assert ordering.checks > 200
    assert sum(r.preemptions for r in sim.core.records.values()) > 1000


def test_a_running_service_follows_a_new_event_log_from_scratch(small_cluster, perf):
    """A view of another core (another log) starts over instead of reading past its end."""
    kept = RunningService()
    for name in ("first", "second"):
        core = SchedulingCore(small_cluster, make_policy("las"), perf)
        core.submit(job(4, job_id=f"{name}-a"), 0.0)
        core.schedule(0.0)
        core.submit(job(2, job_id=f"{name}-b"), 1.0)
        view = core.view(2.0)
        assert [j.job_id for j in kept.ranking(view, view.pending).ranked()] == [f"{name}-b", f"{name}-a"]


def test_a_running_service_that_misses_a_job_is_rebuilt_from_the_view(small_cluster, perf):
    """Should the kept lines ever count other jobs than the view runs (a change no event told of), the
    next call reads them afresh from the view."""
    core = SchedulingCore(small_cluster, make_policy("las"), perf)
    core.submit(job(4, job_id="a"), 0.0)
    core.submit(job(2, job_id="b"), 0.0)
    core.schedule(0.0)
    kept = RunningService()
    view = core.view(10.0)
    assert [j.job_id for j in kept.ranking(view, view.pending).ranked()] == ["b", "a"]
    kept._forget("a")  # as if an event had been missed
    view = core.view(20.0)
    assert [j.job_id for j in kept.ranking(view, view.pending).ranked()] == ["b", "a"]


def _jobs(*keys):
    return [SimpleNamespace(spec=SimpleNamespace(submit_time=t), arrival_seq=s) for t, s in keys]


def test_a_running_job_tied_with_a_pending_one_on_service_is_ordered_by_submit_time_and_arrival():
    """The stable sort by service alone is taken only without such a tie (jobs of one part come in
    (submit time, arrival) order already); with one, all three keys decide: a pending job submitted
    earlier goes before the running job it ties with."""
    jobs = _jobs((1.0, 0), (2.0, 1), (0.5, 2))  # two running jobs, then one pending job
    assert RunningService._order(np.array([5.0, 3.0, 5.0]), 2, jobs).tolist() == [1, 2, 0]
    # Running jobs tied with each other, and pending jobs tied with each other, keep their parts' order.
    jobs = _jobs((1.0, 0), (2.0, 1), (4.0, 3), (5.0, 4))
    assert RunningService._order(np.array([3.0, 3.0, 0.0, 0.0]), 2, jobs).tolist() == [2, 3, 0, 1]
