"""Why jobs wait, when a pass's reasons are written late (issue 38).

A round-based policy (Synergy §3) gives each waiting job its reason at a round, then, at the passes
between rounds, only "waits for the next round" for all. The core no longer writes the round's ~1,200
reasons into the records at each such pass (``SchedulingCore._note_reasons``): a pass that looked at no job
and changed nothing leaves them where they are, marked earlier, until the next pass that looks at jobs.
What a client reads (``wait_of``, ``waiting``) must be what the eager write gave.
"""

from __future__ import annotations

from collections.abc import Callable

from factories import job

from halyard.datamodel import Allocation, JobState, NodeAllocation, load_cluster
from halyard.policies import ClusterView, PassState, Plan, Policy, make_policy
from halyard.policies.reasons import by_policy, cannot_fit
from halyard.scheduling import SchedulingCore, Simulator
from halyard.scheduling.timing import performance_model_for
from halyard.traces import generate_synergy_trace

Step = Callable[[Plan], None]


class _Scripted(Policy):
    """Pass i makes plan ``script[i]``."""

    name = "scripted"

    def __init__(self, script: list[list[Step]]) -> None:
        self.script, self.at = script, 0

    def schedule(self, view: ClusterView, state: PassState) -> Plan:
        plan = Plan()
        for step in self.script[self.at]:
            step(plan)
        self.at += 1
        return plan


R1 = cannot_fit("place", "round {}", 1)
R4 = cannot_fit("place", "round {}", 4)
BETWEEN = by_policy("place", "waits for the next round")
# Pass 1 looks at b and c; pass 2 at none ("otherwise" only); pass 3 at none, and says nothing; pass 4 at c
# only; pass 5 starts c (looking at none); pass 6 looks at none, says nothing.
SCRIPT: list[list[Step]] = [
    [lambda p: p.wait("b", R1), lambda p: p.wait("c", R1)],
    [lambda p: setattr(p, "otherwise", BETWEEN)],
    [],
    [lambda p: p.wait("c", R4)],
    [lambda p: p.start("c", Allocation((NodeAllocation("r0-n0", (0,), 3, 62_500),)))],
    [],
]


def test_a_pass_that_looks_at_nobody_leaves_the_reasons_as_the_eager_write_did(small_cluster, perf):
    """After each scripted pass, b's and c's reasons and the count per code equal the eager write's: the
    round's reason, "waits for the next round" between rounds, the round's reason again once a pass says
    nothing (written late), the later round's for c (b keeps round 1's), none once c runs."""
    seen = []
    for eager in (False, True):
        core = SchedulingCore(small_cluster, _Scripted(SCRIPT), perf)
        core.late_reasons = not eager
        for name in ("b", "c"):
            core.submit(job(1, job_id=name, iterations=10**6), 0.0)
        reads = []
        for t in range(len(SCRIPT)):
            core.schedule(10.0 * (t + 1))
            reads.append((core.wait_of(core.records["b"]), core.wait_of(core.records["c"]), core.waiting))
        seen.append(reads)
    late, now = seen
    assert late == now
    assert [(b, c) for b, c, _ in late] == [(R1, R1), (BETWEEN, BETWEEN), (R1, R1), (R1, R4), (R1, None),
                                            (R1, None)]


def test_a_loaded_round_based_run_reads_as_the_eager_one():
    """synergy-tune:fifo on a loaded trace, stopped between rounds with the round's reasons unwritten:
    every waiting job's reason and the count per code are the eager write's."""
    stops = []
    for eager in (False, True):
        jobs = generate_synergy_trace(600, rate_per_hour=5.0, multi_gpu=True, seed=1)
        policy = make_policy("synergy-tune:fifo")
        sim = Simulator(load_cluster("synergy-128"), policy, performance_model_for(policy, contention="fair"))
        sim.core.late_reasons = not eager
        sim.run(jobs, until=(300, 301))
        core = sim.core
        stops.append(({r.job_id: core.wait_of(r) for r in core.records.values() if r.state is JobState.PENDING},
                      core.waiting, core._told_earlier))
    (late, late_count, deferred), (now, now_count, _) = stops
    assert late == now and late and late_count == now_count
    assert deferred


def _changes(*steps: Step) -> list[Step]:
    """A pass whose plan says its reasons as changes over the view's (Plan.changes_from)."""
    return [lambda p: setattr(p, "since", _Scripted.view_reasons), *steps]


class _ChangeSets(_Scripted):
    """:class:`_Scripted` that also keeps the view's reasons for a change-set step to read."""

    view_reasons: object = None

    def __init__(self, script: list[list[Step]]) -> None:
        super().__init__(script)
        self.shown: list[dict] = []  # what each pass's view showed as the reasons, when it began

    def schedule(self, view: ClusterView, state: PassState) -> Plan:
        _Scripted.view_reasons = view.reasons
        self.shown.append(dict(view.reasons))
        return super().schedule(view, state)


def test_a_change_set_after_unwritten_reasons_reads_as_the_eager_write(small_cluster, perf):
    """A pass whose reasons are changes over the view's (Dally's, Plan.changes_from) after a pass that
    looked at nobody: what it keeps (c's new reason, b's kept one) reads as the eager write's. The late
    core still shows the reasons it left unwritten and keeps them as the ones the change set edits (no
    write: StagedPolicy.reason_changes after a pass between rounds); the eager one shows none."""
    script: list[list[Step]] = [
        [lambda p: p.wait("b", R1), lambda p: p.wait("c", R1)],
        [lambda p: setattr(p, "otherwise", BETWEEN)],
        _changes(lambda p: p.wait("b", R1), lambda p: p.wait("c", R4)),  # it looks at both (the promise)
        [],
    ]
    seen = []
    for eager in (False, True):
        policy = _ChangeSets(script)
        core = SchedulingCore(small_cluster, policy, perf)
        core.late_reasons = not eager
        for name in ("b", "c"):
            core.submit(job(1, job_id=name, iterations=10**6), 0.0)
        reads = []
        for t in range(len(script)):
            core.schedule(10.0 * (t + 1))
            reads.append((policy.shown[-1], core.wait_of(core.records["b"]), core.wait_of(core.records["c"]),
                          core.waiting))
        seen.append(reads)
    late, now = seen
    assert [read[1:] for read in late] == [read[1:] for read in now]
    assert [(b, c) for _, b, c, _ in late] == [(R1, R1), (BETWEEN, BETWEEN), (R1, R4), (R1, R4)]
    assert late[2][0] == {"b": R1, "c": R1} and now[2][0] == {}  # what the change-set pass was shown
