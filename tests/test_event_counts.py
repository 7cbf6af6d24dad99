"""Per-job counts of event kinds reach every output from one table (scheduling/eventcounts.py).

Suspensions (Crius §6.1) were once wired by hand through the record, the metrics, the run tables and
Prometheus; each counted kind is now one row that all of them read. tests/test_policies_crius.py
holds a real suspension to its event, its counts and its recount after a restore;
tests/test_operator_metrics.py holds preemptions to Prometheus over real gRPC.
"""

from __future__ import annotations

from factories import job

from halyard.controlplane.runtables import JOB_COLUMNS
from halyard.datamodel import EventKind
from halyard.policies import make_policy
from halyard.scheduling import Simulator
from halyard.scheduling.eventcounts import BY_KIND, EVENT_COUNTS, count, recount, totals
from halyard.scheduling.metrics import job_metrics, summarize
from halyard.scheduling.records import NOT_PERSISTED, PERSISTED, JobRecord


def test_every_count_is_a_record_field_a_metric_and_a_column(small_cluster, perf):
    sim = Simulator(small_cluster, make_policy("fifo"), perf)
    sim.run([job(1, job_id="a", iterations=50), job(2, job_id="b", iterations=50)])
    summary = summarize(sim.core, policy="fifo", trace_jobs=2, rejected=0, wall_s=1.0)
    per_job = job_metrics(sim.core)[0]
    columns = [name for name, _ in JOB_COLUMNS]
    assert {c.kind for c in EVENT_COUNTS} == {EventKind.PREEMPTED, EventKind.SUSPENDED}
    for c in EVENT_COUNTS:
        assert c.field in JobRecord.__slots__ and c.field in summary and c.field in per_job and c.field in columns
        assert (c.field in PERSISTED) is c.stored and (c.field in NOT_PERSISTED) is not c.stored


def test_count_and_recount_follow_the_kind(small_cluster, perf):
    record = JobRecord(job(1, job_id="a"), 0, 100, 1.0, 0.0)
    for kind in (EventKind.PREEMPTED, EventKind.SUSPENDED, EventKind.SUSPENDED, EventKind.MIGRATED):
        count(record, kind)
    assert (record.preemptions, record.suspensions) == (1, 2)
    recount(record, EventKind.PREEMPTED)  # a stored column: the store already has it
    recount(record, EventKind.SUSPENDED)
    assert (record.preemptions, record.suspensions) == (1, 3)
    assert totals([record, record]) == {"preemptions": 2, "suspensions": 6}
    assert EventKind.MIGRATED not in BY_KIND
