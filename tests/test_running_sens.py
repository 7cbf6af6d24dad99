"""Dally's Nw_sens of all running jobs at once (policies/running_sens.py) is nw_sens, to the last bit,
and its victim order is Dally's sort.

The vector form replaces one call of :func:`halyard.policies.dally_stages.nw_sens` per running job and
pass (issue 19); Dally's victims, their order and so its schedule depend on those floats, so the
test compares bits (``==`` on floats), not approximations, over the record's whole life: starts,
rate changes, restores, progress reports, checkpoints and migrations, and jobs that leave.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from factories import job
from test_dally_release import CountedWatch

from halyard.datamodel import Allocation, NodeAllocation
from halyard.policies.dally_stages import nw_sens
from halyard.policies.running_sens import FIRST_ROWS, RunningNwSens
from halyard.scheduling import JobRecord


def _allocation(k: int) -> Allocation:
    return Allocation((NodeAllocation(f"n{k}", (0,), 1, 1024),))


def _compute_s(record: JobRecord) -> float:
    return 0.01 + (record.arrival_seq % 7) * 0.037  # any fixed positive figure per job


def _check(table: RunningNwSens, running: dict[str, JobRecord], now: float) -> int:
    jobs, values = table.at(running, now, _compute_s)
    assert [j.job_id for j in jobs] == [j for j, r in running.items() if r.allocation is not None]
    for record, value in zip(jobs, values.tolist(), strict=True):
        assert value == nw_sens(record, now, _compute_s(record)), (record.job_id, now)
    # Dally's victim order (policies/dally.py NwSensPreemption.listed), for every other job
    chosen = np.arange(len(jobs)) % 2 == 0
    want = sorted(np.flatnonzero(chosen).tolist(),
                  key=lambda i: (-values[i], -jobs[i].spec.submit_time, -jobs[i].arrival_seq))
    assert table.worst_first(values, chosen) == want
    return len(jobs)


def test_vector_nw_sens_equals_nw_sens_through_a_records_life():
    rng = random.Random(7)
    records = {f"j{i}": JobRecord(job(1 + i % 4, submit=float(i % 5), iterations=50 + 37 * i, job_id=f"j{i}"),
                                  i, 50 + 37 * i, 0.1, 0.0)
               for i in range(FIRST_ROWS + 40)}  # more rows than at first; submit times tie
    running: dict[str, JobRecord] = {}
    table = RunningNwSens()
    now = 0.0
    looked = 0
    for step in range(1500):
        now += rng.choice([0.0, 0.25, 1.0 / 3.0, 7.5, 123.456])
        record = rng.choice(list(records.values()))
        if record.job_id not in running and record.end_time is None:
            record.begin_run(_allocation(step), now)
            record.set_rate(now, rng.uniform(0.05, 2.0), restore_s=rng.choice([0.0, 0.0, 3.3]))
            running[record.job_id] = record
        elif record.job_id in running:
            change = rng.randrange(5)
            if change == 0:
                record.set_rate(now, rng.uniform(0.05, 2.0))
            elif change == 1:
                record.report_progress(now, record.iterations_done(now) * rng.uniform(0.9, 1.1))
            elif change == 2:
                record.rearm(now, _allocation(step), checkpoint=True)  # a move: new allocation, no epoch after
                record.set_rate(now, rng.uniform(0.05, 2.0), restore_s=2.0)
            elif change == 3:
                record.end_run(now, checkpoint=True)
                record.release()
                del running[record.job_id]
            else:
                record.finish(now, record.state.COMPLETED)
                del running[record.job_id]
        if step % 3 == 0:
            looked += _check(table, running, now)
            table.prune(running)
    assert looked > 10_000  # the comparison above ran over many (job, time) pairs


def test_a_changed_record_is_read_again():
    """The table keeps a job's numbers between passes; a new rate (a new epoch) must be seen."""
    record = JobRecord(job(2, iterations=1000, job_id="a"), 0, 1000, 0.1, 0.0)
    record.begin_run(_allocation(0), 0.0)
    record.set_rate(0.0, 1.0)
    table = RunningNwSens()
    running = {"a": record}
    _, before = table.at(running, 100.0, _compute_s)
    record.set_rate(100.0, 0.25)  # four times faster from t = 100 s
    _, after = table.at(running, 200.0, _compute_s)
    assert after[0] == nw_sens(record, 200.0, _compute_s(record)) > before[0]


def test_a_restart_on_the_same_allocation_object_is_read_again():
    """note6: begin_run does not bump ``epoch``. A job starts only from PENDING, which it reaches by
    submission or through end_run (which bumps), so a restart is seen even when a policy hands back the
    very allocation object of the earlier run and nothing else changes before the next pass."""
    record = JobRecord(job(2, iterations=1000, job_id="a"), 0, 1000, 0.1, 0.0)
    where = _allocation(0)
    record.begin_run(where, 0.0)
    record.set_rate(0.0, 1.0)
    table = RunningNwSens()
    table.at({"a": record}, 100.0, _compute_s)
    record.end_run(100.0, checkpoint=True)
    record.release()
    record.begin_run(where, 400.0)  # no set_rate yet: the row must still be read again
    _, after = table.at({"a": record}, 500.0, _compute_s)
    assert after[0] == nw_sens(record, 500.0, _compute_s(record))


def test_jobs_without_allocation_and_no_jobs():
    table = RunningNwSens()
    jobs, values = table.at({}, 5.0, _compute_s)
    assert jobs == [] and values.shape == (0,) and values.dtype == np.float64
    idle = JobRecord(job(1, iterations=10, job_id="idle"), 0, 10, 0.1, 0.0)  # never started
    jobs, values = table.at({"idle": idle}, 5.0, _compute_s)
    assert jobs == [] and values.size == 0


def test_a_new_performance_model_forgets_cached_rows():
    """Rows hold compute_s read from one view's facts: shown the same running job under another
    performance model, Dally's victims carry the new Nw_sens, as Dally.sensitivity does (review finding)."""
    from factories import job
    from policy_fakes import FakeJob, FakePerf, on, view_of

    from halyard.datamodel import load_cluster
    from halyard.policies.dally import Dally

    cluster = load_cluster("dally-2rack")
    running = FakeJob(job(1, job_id="r"), arrival_seq=0, done=100, run_s=200.0,
                      allocation=on(cluster, (cluster.nodes[0].name, 1)))
    dally = Dally()
    for compute_s in (1.0, 4.0):
        view = view_of(cluster, 1000.0, [running], [], perf=FakePerf(compute_s=compute_s))
        victims, _ = dally.nw_preemption.listed(view, float("-inf"))
        assert next(iter(victims)).sens == dally.sensitivity(view, running)


class _CheckedTable(RunningNwSens):
    """Answers from the jobs followed through the event log and checks, on every call, that a table
    that checks every running job afresh gives the same jobs with the same Nw_sens bits."""

    def __init__(self) -> None:
        super().__init__()
        self.checks, self.rate_changes, self._epochs_seen = 0, 0, {}

    def at(self, running, now, compute_s, basis=None, view=None):
        jobs, values = super().at(running, now, compute_s, basis, view)
        fresh_jobs, fresh = RunningNwSens().at(running, now, compute_s, basis)
        assert view is not None and view.events is not None
        assert dict(zip([j.job_id for j in jobs], values.tolist(), strict=True)) == \
            dict(zip([j.job_id for j in fresh_jobs], fresh.tolist(), strict=True))
        self.checks += 1
        # the victim order from the numbers kept between calls (gathered once, negated once) is Dally's sort
        chosen = np.arange(len(jobs)) % 3 != 1
        want = sorted(np.flatnonzero(chosen).tolist(),
                      key=lambda i: (-values[i], -jobs[i].spec.submit_time, -jobs[i].arrival_seq))
        assert self.worst_first(values, chosen) == want
        for record in jobs:  # a running job's epoch moved with no event (its rate changed): read again
            self.rate_changes += self._epochs_seen.get(record.job_id, record.epoch) != record.epoch
            self._epochs_seen[record.job_id] = record.epoch
        return jobs, values


@pytest.mark.parametrize("journal", [True, False])
def test_followed_running_jobs_equal_a_fresh_check_on_a_loaded_run(journal):
    """The followed jobs' epochs are checked through the core's journal of epoch moves (``EpochWatch``), or with
    ``journal`` off all compared, pass by pass: either way each answer is a fresh check's."""
    from halyard.datamodel import load_cluster
    from halyard.policies import make_policy
    from halyard.scheduling import Simulator
    from halyard.scheduling.timing import performance_model_for
    from halyard.traces import generate_synergy_trace

    policy = make_policy("dally-literal")  # the paper's Nw_sens preemption (the preset re-auctions instead)
    policy.nw_preemption.running_sens = table = _CheckedTable()
    table.watch = watch = CountedWatch(journal)
    sim = Simulator(load_cluster("synergy-128"), policy, performance_model_for(policy, contention="fair"))
    sim.run(generate_synergy_trace(1000, rate_per_hour=5.0, multi_gpu=True, seed=1), until=(600, 601))
    assert table.checks > 500
    assert table.rate_changes > 0
    assert sum(r.preemptions for r in sim.core.records.values()) > 100
    assert (watch.answered > table.checks // 2) if journal else watch.answered == 0
