"""The paper's profiling time as a named option, off by default (papers/crius-cell-scheduling.txt §6.1, §8.2):
``Crius(profiling_s=PROFILE_S_PER_PARALLELISM)`` makes a job's Cells of a GPU type usable only once its
profilings on that type have taken 30 s each, one after another on one device, the types in parallel."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from factories import two_type_toml

from halyard.datamodel import EventKind, JobSpec, parse_cluster
from halyard.emulator import PerformanceModel
from halyard.policies.crius import PROFILE_S_PER_PARALLELISM, Crius, profile_requests
from halyard.policies.facts import ClusterFacts
from halyard.scheduling import Simulator

TOML = two_type_toml(1, 8)  # 8 x A40, 8 x A10
_A, _B = TOML.rsplit("gpus = 8", 1)
UNEVEN = _A + "gpus = 4" + _B  # 8 x A40, 4 x A10: the A10s hold fewer Cells, so fewer profilings
SPEC = JobSpec("p", 0.0, "bert-large", 4, iterations=200, min_gpus=2, max_gpus=8)


def _run(policy: Crius, jobs: list[JobSpec]) -> Simulator:
    sim = Simulator(parse_cluster(TOML), policy, PerformanceModel())
    sim.run(jobs)
    return sim


def _profilings_per_type(spec: JobSpec, toml: str = TOML) -> Counter:
    facts = ClusterFacts(parse_cluster(toml), PerformanceModel())
    return Counter(r.gpu_type for r in profile_requests(facts, spec))


def test_the_papers_figure_is_30_s_per_parallelism_and_off_by_default():
    """§8.2: about 30 s per parallelism, two per Cell, so about a minute per Cell; off unless asked."""
    assert PROFILE_S_PER_PARALLELISM == 30.0
    assert Crius().profiling_s == 0.0 and not Crius().needs_rounds
    with pytest.raises(ValueError, match="profiling_s must be a finite number of seconds >= 0, got -1"):
        Crius(profiling_s=-1.0)


def test_a_job_starts_once_its_profilings_have_taken_their_time_at_the_next_round():
    """§6.1: one device per GPU type profiles the job's Cells one after another, the types in parallel.
    The job waits (saying until when), and the round pass after its profilings end starts it (rounds
    every 300 s, §7's five-minute interval); without the option it starts on arrival."""
    per_type = _profilings_per_type(SPEC)
    assert set(per_type) == {"A40", "A10"} and min(per_type.values()) > 0
    done = PROFILE_S_PER_PARALLELISM * min(per_type.values())  # the first type done is usable
    sim = _run(Crius(profiling_s=PROFILE_S_PER_PARALLELISM), [SPEC])
    started = [e for e in sim.core.log if e.kind is EventKind.STARTED]
    assert started and started[0].time == math.ceil(done / 300.0) * 300.0
    plain = _run(Crius(), [SPEC])
    assert next(e.time for e in plain.core.log if e.kind is EventKind.STARTED) == 0.0


def test_a_job_waiting_for_its_profilings_says_so_and_only_ready_types_are_offered():
    """In a pass before its profilings end the job waits with the time they end; once one type is done
    only that type's Cells are offered (the other type's profilings still run)."""
    from policy_fakes import FakeJob, view_of

    from halyard.policies import PassState

    cluster, pm = parse_cluster(UNEVEN), PerformanceModel()
    policy = Crius(profiling_s=PROFILE_S_PER_PARALLELISM)
    per_type = _profilings_per_type(SPEC, UNEVEN)
    assert per_type["A10"] < per_type["A40"]
    plan = policy.schedule(view_of(cluster, 60.0, [], [FakeJob(SPEC)], perf=pm), PassState())
    assert not plan.actions
    first = PROFILE_S_PER_PARALLELISM * min(per_type.values())
    assert str(plan.unplaced["p"]).endswith(f"profiling its Cells until t={first:g}")
    view = view_of(cluster, first, [], [FakeJob(SPEC)], perf=pm)
    ready = {k[0] for k in policy._cells(view, SPEC)}
    later = {t for t, n in per_type.items() if PROFILE_S_PER_PARALLELISM * n > first}
    assert ready == {"A10"} and later == {"A40"}


def test_a_job_blocked_on_its_ready_type_asks_for_rounds_while_another_type_profiles():
    """Its A10 Cells are profiled but every GPU is taken, its A40 Cells still profiling: the pass must
    ask for round passes, or nothing wakes the job when the A40 profilings end (review finding: only a
    job with no usable Cell at all asked for them)."""
    from policy_fakes import FakeJob, on, view_of

    from halyard.policies import PassState

    cluster, pm = parse_cluster(UNEVEN), PerformanceModel()
    policy = Crius(profiling_s=PROFILE_S_PER_PARALLELISM)
    per_type = _profilings_per_type(SPEC, UNEVEN)
    first = PROFILE_S_PER_PARALLELISM * per_type["A10"]
    assert first < PROFILE_S_PER_PARALLELISM * per_type["A40"]
    blockers = [FakeJob(JobSpec(f"b-{n.gpu_type}", 0.0, "bert-large", n.gpus, iterations=10**6), arrival_seq=i,
                        allocation=on(cluster, (n.name, n.gpus))) for i, n in enumerate(cluster.nodes)]
    view = view_of(cluster, first, blockers, [FakeJob(SPEC, arrival_seq=2)], perf=pm)
    state = PassState()
    plan = policy.schedule(view, state)
    assert not any(a.job_id == "p" for a in plan.actions) and "p" in plan.unplaced, plan.actions
    policy.on_applied(view, plan, state)
    assert policy.needs_rounds
