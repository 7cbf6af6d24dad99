"""The core's journal of epoch moves (scheduling/records.py ``EpochJournal``, issue 38): a rate change or a progress
report moves a running job's ``epoch`` without an event, and policies that keep per-job numbers checked by epoch
(Dally's lease ends, policies/dally_release.py; its running jobs' Nw_sens, policies/running_sens.py) read which jobs
moved from the journal instead of comparing every running job's epoch at every pass. That is exact only if every
move of every record's epoch is in its core's journal: held here on a loaded run with the links shared (a co-runner's
start re-rates a job with no event for it), on progress reports, and across a restore."""

from __future__ import annotations

import random

from factories import job

from halyard.datamodel import EventKind, JobSpec, parse_cluster
from halyard.policies import make_policy
from halyard.policies.event_order import EpochWatch
from halyard.scheduling import JobRecord, SchedulingCore, Simulator
from halyard.scheduling.records import EpochJournal
from halyard.scheduling.state import StoredState
from halyard.scheduling.timing import performance_model_for
from halyard.testing.cluster import small_cluster_toml


def _loaded_jobs(n: int, seed: int) -> list[JobSpec]:
    rng = random.Random(seed)
    jobs = [JobSpec(job_id=f"j{i}", submit_time=rng.uniform(0.0, 3000.0), model=rng.choice(("resnet50", "vgg11")),
                    num_gpus=rng.choice((1, 2, 4, 4, 6, 8)), iterations=rng.randint(2_000, 60_000)) for i in range(n)]
    return sorted(jobs, key=lambda spec: spec.submit_time)


def test_every_epoch_move_of_a_loaded_run_is_in_the_journal():
    """At every pass of a loaded ``dally`` run with fair link sharing, each job whose epoch differs from the last
    pass's is named by the journal's entries since then; and some moved with no event for them (what the journal is
    for: the event log alone would miss them)."""
    cluster = parse_cluster(small_cluster_toml(8, gpus_per_node=4))
    policy = make_policy("dally")
    sim = Simulator(cluster, policy, performance_model_for(policy, contention="fair"), round_s=300.0)
    core = sim.core
    seen: dict[str, int] = {}
    marks = {"position": 0, "events": 0, "passes": 0, "without_event": 0, "moves": 0}
    schedule = policy.schedule

    def checked(view, state):
        journal = view.epochs
        assert journal is core.epochs
        named = set(journal.since(marks["position"]))
        evented = {event.job_id for event in view.events.since(marks["events"])}
        for job_id, record in core.records.items():
            if seen.get(job_id, 0) != record.epoch:
                assert job_id in named, (job_id, view.now)
                marks["moves"] += 1
                marks["without_event"] += job_id not in evented
            seen[job_id] = record.epoch
        marks["position"], marks["events"] = len(journal), len(view.events)
        marks["passes"] += 1
        return schedule(view, state)

    policy.schedule = checked
    sim.run(_loaded_jobs(60, seed=7))
    assert marks["passes"] > 100 and marks["moves"] > 100
    assert marks["without_event"] > 0


def test_progress_reports_and_restored_records_note_their_moves():
    """A progress report (a real agent's) moves the epoch with no event; a core that restores records from the store
    hands them its own journal (the record's is not persisted)."""
    cluster = parse_cluster(small_cluster_toml(2, gpus_per_node=4))
    policy = make_policy("fifo")
    core = SchedulingCore(cluster, policy, performance_model_for(policy))
    record = core.submit(job(2, job_id="a", iterations=1000), 0.0)
    core.schedule(0.0)
    assert record.allocation is not None and record.journal is core.epochs
    position = len(core.epochs)
    core.report_progress(record, 10.0, 5.0)
    assert core.epochs.since(position) == ["a"]
    assert "journal" not in record.snapshot()

    restored = SchedulingCore(cluster, make_policy("fifo"), performance_model_for(policy))
    restored.restore(StoredState([JobRecord.restore(r.snapshot()) for r in core.records.values()], list(core.log), {}))
    again = restored.records["a"]
    assert again.journal is restored.epochs and again.journal is not core.epochs
    again.set_rate(20.0, 0.5)
    assert restored.epochs.since(0) == ["a"] and core.epochs.since(position) == ["a"]
    assert [e.kind for e in core.log.since(0)] == [EventKind.SUBMITTED, EventKind.STARTED]


def test_a_journal_that_dropped_what_a_reader_missed_says_so():
    """Bounded: once it holds twice ``keep`` entries it drops the older half; a position before what it keeps answers
    None, and a follower's watch then asks for every epoch to be compared (as it does on its first call, for a view
    without the journal, and with ``use`` off)."""
    journal = EpochJournal(keep=4)
    for i in range(7):
        journal.note(f"j{i}")
    assert len(journal) == 7 and journal.since(3) == ["j3", "j4", "j5", "j6"]
    journal.note("j7")  # eight: the first four go
    assert len(journal) == 8 and journal.since(3) is None and journal.since(4) == ["j4", "j5", "j6", "j7"]

    class View:
        epochs = journal

    watch = EpochWatch()
    assert watch.moved(View()) is None  # first call: compare every job
    journal.note("j2")
    assert watch.moved(View()) == {"j2"}
    for i in range(8):
        journal.note(f"k{i}")  # the watch's position is dropped
    assert watch.moved(View()) is None
    journal.note("j9")
    assert watch.moved(View()) == {"j9"}
    watch.use = False
    journal.note("j9")
    assert watch.moved(View()) is None
    View.epochs = None
    assert watch.moved(View()) is None
