"""The runnable walk's tail skip (StagedPolicy.skip_tail, policies/staged.py ``_walk_tail``) against the walk
that looks at every job.

Issue 38: a loaded Synergy FIFO+TUNE round ranks ~1,300 jobs and only the first ~70 fit the GPU budget;
every job behind the cut waits for the same reason as at the last round unless it arrived or was
preempted since. With reasons said as changes (Plan.changes_from) the walk looks at none of those. The cut
is where the GPU budget runs out, which may be at the end of the running jobs at the head of the order (a
round that starts no job; before, such a round looked at every waiting job one by one). The two walks must
give the same event log, the same actions at every pass, and the same reason for every waiting job after
every pass (the core's ``wait_of``, what the API and the dashboard show).
"""

from __future__ import annotations

import pytest

from halyard.datamodel import JobState, load_cluster
from halyard.policies import make_policy
from halyard.policies.ordering import StarvationGuard
from halyard.policies.staged import WALK_SKIP_FROM
from halyard.scheduling import Simulator
from halyard.scheduling.timing import performance_model_for
from halyard.traces.generator import generate_synergy_trace


def _run(name: str, jobs: int, rate: float, seed: int, *, skip: bool, guard_s: float | None = None):
    drawn = generate_synergy_trace(jobs, rate_per_hour=rate, multi_gpu=True, seed=seed)
    policy = make_policy(name)
    policy.skip_tail = skip
    if guard_s is not None:  # a starvation guard that promotes within the run (the preset's is 1,000 h)
        policy.ordering.guard = StarvationGuard(guard_s)
    sim = Simulator(load_cluster("synergy-128"), policy, performance_model_for(policy, contention="fair"))
    core = sim.core
    passes = []
    skipped = {"told": 0, "tails": 0, "at_head": 0}
    schedule, walk_tail = core.schedule, policy._walk_tail

    def recorded(now):
        applied = schedule(now)
        waits = {r.job_id: core.wait_of(r) for r in core.pending}
        passes.append((now, [repr(a) for a in applied], waits))
        return applied

    def counted(view, ranking, start, *args):
        skipped["tails"] += 1
        # a tail from the running head that StagedPolicy._running_head skips (a long ranking, only running
        # jobs before the cut: a round that starts no job), which the walk did not hand over before
        skipped["at_head"] += len(ranking.jobs) >= WALK_SKIP_FROM and bool(ranking.held[:start].all())
        return walk_tail(view, ranking, start, *args)

    core.schedule = recorded
    policy._walk_tail = counted
    sim.run(drawn, until=(jobs - 100, jobs - 99))
    log = [(e.seq, repr(e.time), e.job_id, e.kind, e.state, e.detail) for e in core.log]
    return log, passes, skipped, {r.job_id: core.wait_of(r) for r in core.records.values()
                                  if r.state is JobState.PENDING}


# ``heads``: at least that many tails from a skipped running head (the last workload's queue is long enough).
# SRTF's tail key is its remaining time (Ordering.tail_key), with the starvation guard's rank first.
@pytest.mark.parametrize(("name", "jobs", "rate", "seed", "heads", "guard_s"), [
    ("synergy-tune:fifo", 400, 20.0, 1, 0, None),
    ("synergy-tune:fifo", 300, 30.0, 2, 0, None),
    ("proportional:fifo", 300, 20.0, 3, 0, None),
    ("synergy-greedy:fifo", 300, 20.0, 4, 0, None),
    ("synergy-tune:fifo", 700, 40.0, 5, 20, None),
    ("proportional:srtf", 400, 20.0, 6, 0, None),
    ("synergy-tune:srtf", 400, 20.0, 7, 0, None),
    ("proportional:srtf+starvation-guard", 400, 20.0, 8, 0, 10 * 3600.0),
])
def test_the_tail_skip_gives_every_waiting_job_the_reason_the_full_walk_gives(name, jobs, rate, seed, heads, guard_s):
    fast_log, fast_passes, fast_counts, fast_waits = _run(name, jobs, rate, seed, skip=True, guard_s=guard_s)
    full_log, full_passes, full_counts, full_waits = _run(name, jobs, rate, seed, skip=False, guard_s=guard_s)
    assert fast_log == full_log
    assert fast_passes == full_passes  # actions and every waiting job's reason, after every pass
    assert fast_waits == full_waits
    assert sum(len(waits) for _, _, waits in fast_passes) > 10_000  # waiting jobs' reasons compared
    assert fast_counts["tails"] > 50 and full_counts["tails"] == 0  # the skip ran, and only with it on
    assert fast_counts["at_head"] >= heads
