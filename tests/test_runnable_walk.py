"""The staged pass's runnable walk starts after the running jobs at the head of the order that fit
(``StagedPolicy._running_head``, issue 19): it must make the very plan the job-by-job walk makes,
preemptions, starts and every waiting job's reason."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from halyard.datamodel import EventKind, JobState, load_cluster
from halyard.policies import make_policy, staged
from halyard.policies.stages import Ranking
from halyard.scheduling import Simulator
from halyard.scheduling.timing import performance_model_for
from halyard.traces import generate_synergy_trace


def _run(policy_name: str, skip_from: int, monkeypatch: pytest.MonkeyPatch, until: tuple[int, int] | None):
    monkeypatch.setattr(staged, "WALK_SKIP_FROM", skip_from)
    heads = []
    running_head = staged.StagedPolicy._running_head

    def counted(ranking, budget):
        head = running_head(ranking, budget)
        heads.append(head[0])
        return head

    monkeypatch.setattr(staged.StagedPolicy, "_running_head", staticmethod(counted))
    policy = make_policy(policy_name)
    sim = Simulator(load_cluster("synergy-128"), policy, performance_model_for(policy, contention="fair"))
    sim.run(generate_synergy_trace(800, rate_per_hour=6.0, multi_gpu=True, seed=1), until=until)
    core = sim.core
    log = [(e.seq, repr(e.time), e.job_id, e.kind, e.detail) for e in core.log]
    waits = {r.job_id: core.wait_of(r) for r in core.records.values() if r.state is JobState.PENDING}
    return log, waits, heads


@pytest.mark.parametrize("policy_name", ["las", "tiresias", "srtf", "synergy-tune:las"])
def test_skipping_the_running_head_changes_no_event_and_no_wait_reason(policy_name, monkeypatch):
    """On a loaded trace (preemptions under every one of these orderings), skipping from every pass on
    and never skipping log the same events to the last bit and, stopped with jobs waiting, give every
    waiting job the same reason."""
    for until in ((500, 501), None):
        skip_log, skip_waits, heads = _run(policy_name, 0, monkeypatch, until)
        walk_log, walk_waits, none = _run(policy_name, 10**9, monkeypatch, until)
        assert not none and sum(heads) > 1000  # the skip ran, and skipped jobs
        assert skip_log == walk_log
        assert skip_waits == walk_waits
        assert bool(walk_waits) == (until is not None)  # stopped half-way, jobs wait; at the end none does
    assert any(kind is EventKind.PREEMPTED for _, _, _, kind, _ in walk_log)


@given(held=st.lists(st.integers(0, 8), max_size=300), budget=st.integers(-2, 600),
       walk=st.sampled_from([0, 1, 5, staged.HEAD_WALK]))
def test_the_running_head_is_the_leading_running_jobs_that_fit_one_after_another(held, budget, walk):
    """``_running_head``'s Python walk of the first HEAD_WALK entries and its numpy path past them (HEAD_WALK 0:
    numpy alone) both answer the definition: the running jobs (GPUs >= 1) before the first waiting one (0)
    whose GPUs fit the budget one after another, and the GPUs they hold."""
    head = fits = 0
    while head < len(held) and held[head] and fits + held[head] <= budget:
        fits += held[head]
        head += 1
    ranking = Ranking([], None, np.array(held, np.int64))
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(staged, "HEAD_WALK", walk)
        assert staged.StagedPolicy._running_head(ranking, budget) == (head, fits)
