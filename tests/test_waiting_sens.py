"""Dally's exact shortcuts on a loaded queue (issue 19): the waiting jobs' offer order kept from pass
to pass (policies/waiting_sens.py), the tail of the order where no job can preempt answered with
reasons alone, and victims made only when reached (``_LazyVictims``). They must change nothing: the
kept order equals a fresh sort by (Nw_sens, submission, arrival) with the same Nw_sens bits on every
pass, and a loaded run logs the same events and gives every waiting job the same reason with the
shortcuts and without.
"""

from __future__ import annotations

import itertools
import math

from halyard.datamodel import JobState, load_cluster
from halyard.policies import make_policy
from halyard.policies.dally_preemption import _LazyVictims
from halyard.policies.dally_stages import nw_sens
from halyard.policies.waiting_sens import WaitingOrder
from halyard.scheduling import Simulator
from halyard.scheduling.timing import performance_model_for
from halyard.traces import generate_synergy_trace


def _jobs():
    # 1,000 jobs of the synthetic multi-GPU trace at about 120% of synergy-128: Dally preempts ~600 times.
    return generate_synergy_trace(1000, rate_per_hour=5.0, multi_gpu=True, seed=1)


class _Checked(WaitingOrder):
    """Answers from the kept order and checks, every pass, that a fresh sort agrees, bit for bit."""

    def __init__(self, policy) -> None:
        super().__init__()
        self.policy, self.checks, self.preempted_waiting = policy, 0, 0

    def ranked(self, view, sensitivity):
        kept = super().ranked(view, sensitivity)

        def fresh(job) -> float:
            if job.run_time_s(view.now) <= 0.0:
                return 1.0
            return nw_sens(job, view.now, self.policy.delay.statics.of(view, job).compute_s)

        values = {job.job_id: fresh(job) for job in view.pending}
        assert self.sens == values
        assert kept == sorted(view.pending, key=lambda j: (values[j.job_id], j.spec.submit_time, j.arrival_seq))
        # the ids and demands kept beside the order, and the lowest Nw_sens, for the pass's tail
        assert self.ids == [job.job_id for job in kept]
        assert self.demands == [job.spec.num_gpus for job in kept]
        assert self.lowest() == min(values.values(), default=-math.inf)
        self.checks += 1
        self.preempted_waiting += sum(v < 1.0 for v in values.values())
        return kept


def _run(*, shortcuts: bool, checked: bool = False):
    policy = make_policy("dally-literal")  # the paper's Nw_sens preemption (the preset re-auctions instead)
    policy.shortcuts = shortcuts
    if checked:
        policy._waiting = _Checked(policy)
    sim = Simulator(load_cluster("synergy-128"), policy, performance_model_for(policy, contention="fair"))
    sim.run(_jobs(), until=(600, 601))  # stopped with jobs waiting, so their reasons compare too
    core = sim.core
    log = [(e.seq, repr(e.time), e.job_id, e.kind, e.detail) for e in core.log]
    waits = {r.job_id: core.wait_of(r) for r in core.records.values() if r.state is JobState.PENDING}
    return policy, core, log, waits


def test_the_kept_order_equals_a_fresh_sort_on_every_pass():
    policy, core, _, _ = _run(shortcuts=True, checked=True)
    order = policy._waiting
    assert order.checks > 1000
    assert order.preempted_waiting > 0  # jobs preempted back to the queue, with Nw_sens below 1, were ordered
    assert sum(r.preemptions for r in core.records.values()) > 100


def test_the_shortcuts_change_no_event_and_no_wait_reason():
    _, fast_core, fast_log, fast_waits = _run(shortcuts=True)
    _, slow_core, slow_log, slow_waits = _run(shortcuts=False)
    assert fast_log == slow_log
    assert fast_waits == slow_waits
    assert len(fast_waits) > 10  # a queue at the stop: the reasons compared are of many jobs
    assert fast_core.passes == slow_core.passes


def test_lazy_victims_iterate_and_remove_as_the_list_does():
    cluster = load_cluster("synergy-128")
    jobs = [type("Running", (), {"job_id": f"j{i}", "allocation": type("A", (), {"num_gpus": 1})()})()
            for i in range(6)]
    lazy = _LazyVictims(jobs, [4, 1, 5, 0], [0.9, 0.8, 0.8, 0.5], cluster, {})
    first_two = list(itertools.islice(lazy, 2))  # only two made
    assert [v.job.job_id for v in first_two] == ["j4", "j1"] and lazy._next == 2
    lazy.remove(first_two[0])
    made = list(lazy)
    assert made[0] is first_two[1]  # made once, the same object on the next walk
    assert [(v.job.job_id, v.sens) for v in made] == [("j1", 0.8), ("j5", 0.8), ("j0", 0.5)]
    for v in made:
        lazy.remove(v)
    assert not lazy and list(lazy) == []
    assert not _LazyVictims(jobs, [], [], cluster, {})


def test_lazy_victims_above_a_bound_are_what_takewhile_gives():
    """_LazyVictims.above bisects where NwSensPreemption.eligible walked with takewhile: the same victims, made
    only as far as the bound reaches, removed ones left out, and none for a NaN bound."""
    cluster = load_cluster("synergy-128")
    jobs = [type("Running", (), {"job_id": f"j{i}", "allocation": type("A", (), {"num_gpus": 1})()})()
            for i in range(6)]
    sens = [0.9, 0.8, 0.8, 0.5, -0.0, -0.25]
    lazy = _LazyVictims(jobs, [4, 1, 5, 0, 2, 3], sens, cluster, {})

    def named(victims):
        return [v.job.job_id for v in victims]

    def walked(bound, inclusive):
        return list(itertools.takewhile(lambda v: v.sens >= bound if inclusive else v.sens > bound, lazy))

    assert named(lazy.above(0.8, False)) == ["j4"] and lazy._next == 1
    assert named(lazy.above(0.8, True)) == ["j4", "j1", "j5"] and lazy._next == 3
    lazy.remove(lazy.above(0.8, True)[1])
    for bound in (1.0, 0.9, 0.85, 0.8, 0.5, 0.0, -0.0, -0.25, -1.0, float("nan")):
        for inclusive in (False, True):
            assert lazy.above(bound, inclusive) == walked(bound, inclusive), (bound, inclusive)


def test_lazy_victims_first_sens_is_what_iterating_gives_first():
    """_LazyVictims.first_sens (NwSensPreemption.may_preempt's question at every offer that does not fit) is the Nw_sens
    of the first victim an iteration gives, as victims are made and removed, and None once there is none."""
    cluster = load_cluster("synergy-128")
    jobs = [type("Running", (), {"job_id": f"j{i}", "allocation": type("A", (), {"num_gpus": 1})()})()
            for i in range(3)]
    lazy = _LazyVictims(jobs, [2, 0, 1], [0.9, 0.7, 0.2], cluster, {})
    while True:
        first = next(iter(lazy), None)
        assert lazy.first_sens() == (None if first is None else first.sens)
        if first is None:
            break
        lazy.remove(first)


def test_eligible_victims_by_bisection_equal_the_walk_on_a_loaded_run(monkeypatch):
    """NwSensPreemption.eligible asks the lazy victims for those above a job's Nw_sens: on a loaded run every answer
    equals the takewhile walk over the same victims."""
    from halyard.policies.dally_preemption import NwSensPreemption

    real, calls = NwSensPreemption.eligible, [0, 0]

    def checked(self, victims, sens):
        got = real(self, victims, sens)
        walked = list(itertools.takewhile(lambda v: v.sens > sens, victims))
        assert got == walked
        calls[0] += 1
        calls[1] += bool(got)
        return got

    monkeypatch.setattr(NwSensPreemption, "eligible", checked)
    _run(shortcuts=True)
    assert calls[0] > 1000 and calls[1] > 100


def test_holders_kept_between_searches_equal_fresh_ones(monkeypatch):
    """_Searches keeps one holders per level for the pass's later searches, grown to the longest prefix of
    the victims asked for, across starts (which change only what is free) until a preemption changes the
    victims: on a loaded run, every one used, read below the search's count of eligible victims as
    _cheapest reads it, equals the holders made afresh from the victims eligible then."""
    from halyard.policies import dally_pass, dally_preemption

    real, seen, reused, longer = dally_preemption._with_victims, set(), 0, 0

    def named(holders, count):
        out = {domain: [(v.job.job_id, held, k) for v, held, k in here if k < count]
               for domain, here in holders.items()}
        return {domain: here for domain, here in out.items() if here}

    def checked(level, demand, free, avail, shape, eligible, gpu_types, holders=None):
        nonlocal reused, longer
        if holders is not None:
            assert named(holders, len(eligible)) == named(dally_preemption._holders(level, eligible), len(eligible))
            reused += id(holders) in seen
            longer += any(k >= len(eligible) for here in holders.values() for _, _, k in here)
            seen.add(id(holders))
        return real(level, demand, free, avail, shape, eligible, gpu_types, holders)

    for module in (dally_pass, dally_preemption):  # both call it; the searches with holders are in the latter
        monkeypatch.setattr(module, "_with_victims", checked)
    _run(shortcuts=True)
    assert len(seen) > 100 and reused > 100 and longer > 0  # (818, 3,151 and 5 when written)


def test_timers_kept_between_passes_equal_fresh_ones(monkeypatch):
    """AutoTuner.timers keeps a demand's timers while its lists are unchanged: on a loaded run every
    answer equals the timers worked out afresh from the lists then."""
    from halyard.policies.dally_timers import AutoTuner

    real, calls, fresh = AutoTuner.timers, [0], [0]
    real_fresh = AutoTuner._timers

    def counted(self, demand, lease_s, now, tentative=()):
        fresh[0] += 1
        return real_fresh(self, demand, lease_s, now, tentative)

    def checked(self, demand, lease_s, now, tentative=()):
        got = real(self, demand, lease_s, now, tentative)
        assert got == real_fresh(self, demand, lease_s, now, tentative)
        calls[0] += 1
        return got

    monkeypatch.setattr(AutoTuner, "_timers", counted)
    monkeypatch.setattr(AutoTuner, "timers", checked)
    _run(shortcuts=True)
    assert calls[0] > 1000 and fresh[0] < calls[0] // 2  # most answers were kept ones
