"""The persistent state store: exact round trips, atomic saves, crash survival, restore into a core."""

from __future__ import annotations

import heapq
import json
import math
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from factories import job
from hypothesis import given, settings
from hypothesis import strategies as st

from halyard.controlplane.store import (
    SCHEMA_VERSION,
    SqliteStore,
    allocation_from_dict,
    allocation_to_dict,
    spec_from_dict,
    spec_to_dict,
)
from halyard.datamodel import (
    Allocation,
    EventKind,
    JobEvent,
    JobSpec,
    JobState,
    NodeAllocation,
    Parallelism,
    StagePlan,
)
from halyard.policies import PassState, Plan, make_policy
from halyard.scheduling import SchedulingCore, SimulatedPool
from halyard.scheduling.records import PERSISTED, JobRecord
from halyard.scheduling.state import InconsistentState, StoredState, StoreError


def alloc(*parts: tuple[str, tuple[int, ...]], shift: float = 0.0) -> Allocation:
    return Allocation(tuple(NodeAllocation(n, g, 3 * len(g), 62_500 * len(g)) for n, g in parts), shift)


def typed(snapshot: dict) -> dict:
    """A snapshot with each value's type beside it: 3 and 3.0 must not pass for each other."""
    return {k: (type(v).__name__, json.dumps(v, sort_keys=True)) for k, v in snapshot.items()}


FULL_SPEC = JobSpec(
    job_id="full", submit_time=12.5, model="gpt2", num_gpus=8, iterations=0, batch_size=16,
    tenant="t1", user="ana", gpu_type="V100", min_gpus=2, max_gpus=16,
    parallelism=Parallelism(data=2, tensor=2, pipeline=2), priority=-3, deadline=1e6, duration_s=3600.25,
    command=("python", "train.py", "--lr=0.1"), env={"A": "1", "B": ""}, extra={"vc": "x", "status": "Pass"},
)


# --- conversions --------------------------------------------------------------


def test_spec_round_trip_every_field():
    data = json.loads(json.dumps(spec_to_dict(FULL_SPEC)))
    back = spec_from_dict(data)
    assert back == FULL_SPEC
    assert isinstance(back.command, tuple) and isinstance(back.parallelism, Parallelism)
    with pytest.raises(TypeError):
        back.env["C"] = "3"  # mappings come back read-only
    bare = job(1, job_id="bare")  # every optional field at its default (None, (), empty)
    assert spec_from_dict(json.loads(json.dumps(spec_to_dict(bare)))) == bare


@settings(max_examples=20, deadline=None)
@given(
    submit=st.floats(0, 1e9, allow_nan=False), gpus=st.sampled_from([1, 2, 4, 8]),
    user=st.text(max_size=8), gpu_type=st.none() | st.sampled_from(["V100", "A100"]),
    deadline=st.none() | st.floats(1e9, 2e9), command=st.lists(st.text(max_size=6), max_size=3),
    env=st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3),
)
def test_spec_round_trip_property(submit, gpus, user, gpu_type, deadline, command, env):
    spec = JobSpec(job_id="h", submit_time=submit, model="resnet50", num_gpus=gpus, iterations=7, user=user,
                   gpu_type=gpu_type, deadline=deadline, command=tuple(command), env=env,
                   parallelism=Parallelism(data=gpus) if gpus > 2 else None)
    assert spec_from_dict(json.loads(json.dumps(spec_to_dict(spec)))) == spec


def test_allocation_round_trip():
    a = Allocation((NodeAllocation("r0-n0", (0, 3), 6, 125_000), NodeAllocation("r1-n1", (1,), 2, 10)),
                   time_shift_s=0.125, stages=(StagePlan(2, data=2), StagePlan(1, tensor=1)))
    back = allocation_from_dict(json.loads(json.dumps(allocation_to_dict(a))))
    assert back == a and back.num_gpus == 3 and back.nodes[0].gpus == (0, 3)


# --- records ------------------------------------------------------------------


@pytest.fixture
def core(small_cluster, perf) -> SchedulingCore:
    return SchedulingCore(small_cluster, make_policy("fifo"), perf)


def lived(core: SchedulingCore) -> JobRecord:
    """A record that ran, was preempted, resumed and is restoring a checkpoint at a rate."""
    core.submit(job(2, job_id="a", iterations=5000), 0.0)
    plan = Plan()
    plan.start("a", alloc(("r0-n0", (0, 1))))
    core.apply(plan, 10.0)
    rec = core.records["a"]
    rec.set_rate(10.0, 0.3)
    plan = Plan()
    plan.preempt("a")
    core.apply(plan, 100.7)
    plan = Plan()
    plan.start("a", alloc(("r1-n1", (2, 3)), shift=0.5))
    core.apply(plan, 130.0)
    rec.set_rate(130.0, 0.25, restore_s=42.5)
    rec.attempt = 2
    assert rec.preemptions == 1 and rec.restarts == 1 and rec.resume_at == 172.5 and isinstance(rec._done, int)
    return rec


def test_record_round_trip_is_exact(core):
    rec = lived(core)
    snap = rec.snapshot()
    # the event log or the next pass says; the journal of epoch moves is the restoring core's
    unstored = {"end_reason", "journal", "suspensions", "time_shift_drift_s", "wait"}
    assert set(snap) == set(PERSISTED) == set(JobRecord.__slots__) - unstored
    assert {"_done", "_anchor", "_resume_at", "_rate", "_gpu_s", "_run_s", "_run_start"} <= snap.keys()
    back = JobRecord.restore(json.loads(json.dumps(snap)))
    assert typed(back.snapshot()) == typed(snap)
    # Every slot left out of the store is set on the restored record (to its fresh value).
    assert all(hasattr(back, name) for name in JobRecord.__slots__)
    assert back.wait is None and back.time_shift_drift_s is None and back.journal is None
    for t in (130.0, 150.0, 172.5, 500.0, 2000.0):
        assert back.iterations_done(t) == rec.iterations_done(t)
        assert back.attained_gpu_s(t) == rec.attained_gpu_s(t) and back.run_time_s(t) == rec.run_time_s(t)
    assert back.finish_time() == rec.finish_time() and back.allocation == rec.allocation


def test_record_restore_refuses_malformed(core):
    snap = lived(core).snapshot()
    del snap["_rate"]
    with pytest.raises(ValueError, match=r"missing \['_rate'\]"):
        JobRecord.restore(snap)


# --- both stores: SQLite (the default) and PostgreSQL --------------------------------


class Stores:
    """Opens a store of one kind by name: a file in ``tmp_path`` (SQLite) or a database on the test
    session's PostgreSQL server, the same one each time for the same name (so a test can reopen it)."""

    def __init__(self, kind: str, tmp_path, request) -> None:
        self.kind, self.tmp_path, self.request = kind, tmp_path, request
        self.urls: dict[str, str] = {}

    def where(self, name: str = "state.db") -> str:
        if self.kind == "sqlite":
            return str(self.tmp_path / name)
        if name not in self.urls:
            self.urls[name] = self.request.getfixturevalue("pg_server").create_database()
        return self.urls[name]

    def open(self, name: str = "state.db"):
        if self.kind == "sqlite":
            return SqliteStore(self.where(name))
        from halyard.controlplane.store_postgres import PostgresStore

        return PostgresStore(self.where(name))

    def raw(self, name: str, statement: str) -> None:
        """One statement straight to the database, as another program would."""
        if self.kind == "sqlite":
            db = sqlite3.connect(self.where(name))
            db.execute(statement)
            db.commit()
            db.close()
        else:
            import psycopg

            with psycopg.connect(self.where(name), autocommit=True) as db:
                db.execute(statement)


@pytest.fixture(params=["sqlite", "postgres"])
def stores(request, tmp_path) -> Stores:
    return Stores(request.param, tmp_path, request)


# --- the SQLite store -----------------------------------------------------------


def test_every_slot_has_a_column():
    from halyard.controlplane import store

    assert sorted(store._SLOTS) == sorted(PERSISTED)


def test_store_round_trip_through_a_file(core, stores):
    rec = lived(core)
    core.submit(job(1, job_id="b", submit=3.0), 3.0)
    core.cancel("b", 4.0)
    records, events = core.take_changes()
    with stores.open() as store:
        store.save(records, events)
        store.set_meta("cluster", "small")
    with stores.open() as store:
        state = store.load()
        assert store.get_meta("cluster") == "small" and store.get_meta("nope") is None
    assert [r.job_id for r in state.records] == ["a", "b"]
    assert typed(state.records[0].snapshot()) == typed(rec.snapshot())
    assert typed(state.records[1].snapshot()) == typed(core.records["b"].snapshot())
    assert state.events == list(core.log)
    assert state.meta == {"schema_version": str(SCHEMA_VERSION), "cluster": "small"}


def test_wal_mode_and_pragmas(tmp_path):
    path = tmp_path / "state.db"
    store = SqliteStore(path)
    assert store._db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    assert store._db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    other = sqlite3.connect(path)  # the mode is in the file: any connection sees it
    assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    other.close()
    store.close()
    memory = SqliteStore(":memory:")
    assert memory.load() == StoredState([], [], {"schema_version": str(SCHEMA_VERSION)})
    memory.close()


def test_upsert_updates_and_save_is_all_or_nothing(core, stores):
    store = stores.open()
    core.submit(job(1, job_id="a"), 0.0)
    store.save(*core.take_changes())
    core.cancel("a", 5.0)
    records, events = core.take_changes()
    assert [r.job_id for r in records] == ["a"] and [e.kind for e in events] == [EventKind.CANCELLED]
    ghost = JobEvent(events[-1].seq + 1, 5.0, "ghost", EventKind.SUBMITTED, JobState.PENDING)
    with pytest.raises(StoreError, match=r"(?i)FOREIGN KEY"):
        store.save(records, [*events, ghost])  # an event for a job never stored: the whole save fails
    state = store.load()
    assert state.records[0].state is JobState.PENDING and len(state.events) == 1
    store.save(records, events)
    state = store.load()
    assert state.records[0].state is JobState.CANCELLED and state.records[0].end_time == 5.0
    assert [e.seq for e in state.events] == [1, 2]
    with pytest.raises(StoreError, match=r"event #2 .* expects #3"):
        store.save([], events)  # twice
    with pytest.raises(ValueError, match="belongs to the store"):
        store.set_meta("schema_version", "0")
    store.close()


def test_newer_schema_is_refused_naming_the_file(stores):
    stores.open().close()
    stores.raw("state.db", f"UPDATE meta SET value = '{SCHEMA_VERSION + 1}' WHERE key = 'schema_version'")
    with pytest.raises(StoreError, match=rf"{re.escape(stores.where())}: .*schema version {SCHEMA_VERSION + 1}, "
                                         "newer than this Halyard reads"):
        stores.open()


def test_foreign_databases_are_refused(stores):
    stores.raw("other.db", "CREATE TABLE t (x integer)")
    with pytest.raises(StoreError, match=f"{re.escape(stores.where('other.db'))}: not a Halyard state database"):
        stores.open("other.db")


def test_foreign_files_are_refused(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database, just some bytes " * 100)
    with pytest.raises(StoreError, match=f"{junk}: not a usable Halyard state database"):
        SqliteStore(junk)
    other = tmp_path / "other.db"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE t (x)")
    db.close()
    with pytest.raises(StoreError, match=f"{other}: not a Halyard state database"):
        SqliteStore(other)


# The best save of 100 records and 200 events. SQLite writes in this process; PostgreSQL's save is a
# pipelined batch and a commit to a server process on loopback, which a loaded machine must schedule too.
SAVE_BUDGET_S = {"sqlite": 0.010, "postgres": 0.030}


def test_save_latency(stores, core):
    """100 records and 200 events are saved in well under SAVE_BUDGET_S: the best of up to 200 saves (on a
    loaded machine most saves are preempted by other processes; one that is not shows the cost)."""
    budget = SAVE_BUDGET_S[stores.kind]
    for i in range(100):
        core.submit(job(1 + i % 4, job_id=f"j{i}", iterations=100 + i), float(i))
    records, _ = core.take_changes()

    def events(k: int) -> list[JobEvent]:
        return [JobEvent(n, float(n), f"j{(n - 1) % 100}", EventKind.SUBMITTED, JobState.PENDING, "x" * 20)
                for n in range(200 * k + 1, 200 * (k + 1) + 1)]

    store = stores.open()
    best = math.inf
    for k in range(200):
        batch = events(k)
        started = time.perf_counter()
        store.save(records, batch)
        best = min(best, time.perf_counter() - started)
        if k >= 7 and best < budget:  # at least the old 8 tries; more only while none has been fast
            break
    store.close()
    assert best < budget, f"best save took {best * 1000:.1f} ms"


# --- a real process killed mid-way --------------------------------------------------

CHILD = """
import sys
from halyard.scheduling.records import JobRecord
from halyard.controlplane.store import SqliteStore
from halyard.datamodel import EventKind, JobEvent, JobSpec, JobState

path, per = sys.argv[1], int(sys.argv[2])
if path.startswith("postgresql://"):
    from halyard.controlplane.store_postgres import PostgresStore
    store = PostgresStore(path)
else:
    store = SqliteStore(path)
def record(job_id, n, t):
    return JobRecord(JobSpec(job_id, t, "resnet50", 1, iterations=1), n, 1, 0.1, t)
counter = record("counter", 0, 0.0)
store.save([counter], [JobEvent(1, 0.0, "counter", EventKind.SUBMITTED, JobState.PENDING)])
seq = 1
for b in range(1, 1_000_000):
    records, events = [], []
    for i in range(per):
        r = record(f"b{b}-{i}", (b - 1) * per + i + 1, float(b))
        seq += 1
        records.append(r)
        events.append(JobEvent(seq, float(b), r.job_id, EventKind.SUBMITTED, JobState.PENDING, str(b)))
    counter.epoch = b  # every batch also updates a stored row
    records.append(counter)
    store.save(records, events)
    print(b, flush=True)
"""


def test_killed_process_keeps_exactly_the_committed_batches(stores):
    path, per = stores.where(), 150
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(path), str(per)], stdout=subprocess.PIPE, text=True)
    try:
        seen = 0
        while seen < 25:
            line = child.stdout.readline()
            assert line, f"child ended early (rc {child.poll()})"
            seen = int(line)
        os.kill(child.pid, signal.SIGKILL)  # while it builds or writes the next batches
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    store = stores.open()
    state = store.load()
    done = state.records[0].epoch  # the last committed batch
    assert state.records[0].job_id == "counter" and done >= seen
    assert len(state.records) == 1 + done * per  # every committed batch whole, no torn one
    assert [r.arrival_seq for r in state.records] == list(range(len(state.records)))
    assert [r.job_id for r in state.records[1:]] == [f"b{b}-{i}" for b in range(1, done + 1) for i in range(per)]
    assert [e.seq for e in state.events] == list(range(1, 2 + done * per))
    assert {e.detail for e in state.events[1:]} == {str(b) for b in range(1, done + 1)}
    # And the reopened store carries on where the log left off.
    nxt = JobRecord(JobSpec("after", 0.0, "resnet50", 1, iterations=1), len(state.records), 1, 0.1, 0.0)
    store.save([nxt], [JobEvent(len(state.events) + 1, 0.0, "after", EventKind.SUBMITTED, JobState.PENDING)])
    assert store.load().records[-1].job_id == "after"
    store.close()


# --- the core: changes out, state back in ------------------------------------------


def test_take_changes(core):
    assert core.take_changes() == ([], [])
    core.submit(job(2, job_id="a"), 0.0)
    core.submit(job(1, job_id="b"), 0.0)
    records, events = core.take_changes()
    assert [r.job_id for r in records] == ["a", "b"] and [e.seq for e in events] == [1, 2]
    assert core.take_changes() == ([], [])
    plan = Plan()
    plan.start("b", alloc(("r0-n0", (0,))))
    core.apply(plan, 1.0)
    records, events = core.take_changes()
    assert [r.job_id for r in records] == ["b"] and [e.kind for e in events] == [EventKind.STARTED]
    core.records["b"].set_rate(1.0, 0.2)  # a driver's change, outside the core
    assert [r.job_id for r in core.take_changes()[0]] == ["b"]
    assert core.take_changes() == ([], [])
    core.requeue("b", 9.0, "node lost")
    records, events = core.take_changes()
    assert [r.job_id for r in records] == ["b"] and [e.kind for e in events] == [EventKind.PREEMPTED,
                                                                               EventKind.REQUEUED]


class Driver:
    """The simulator's loop by hand, so a run can stop half-way and go on in another core."""

    def __init__(self, core: SchedulingCore, perf, specs: list[JobSpec]) -> None:
        self.core, self.heap, self.n = core, [], 0
        self.pool = SimulatedPool(core, perf, self.push)
        self.round_at = math.inf
        for spec in specs:
            if spec.job_id not in core.records:
                self.push(spec.submit_time, 1, spec.job_id, 0, spec)
        for record in core.running.values():
            self.push(record.finish_time(), 0, record.job_id, record.epoch)
        self.arm(max((e.time for e in core.log), default=0.0))

    def push(self, when: float, kind: int, job_id: str, epoch: int, spec: JobSpec | None = None) -> None:
        if math.isfinite(when):
            self.n += 1
            heapq.heappush(self.heap, (when, kind, self.n, job_id, epoch, spec))

    def arm(self, now: float) -> None:
        if self.core.pending and self.round_at == math.inf:
            self.round_at = (math.floor(now / self.core.round_s) + 1) * self.core.round_s
            self.push(self.round_at, 2, "", 0)

    def step(self) -> float:
        core, now, changed = self.core, self.heap[0][0], False
        while self.heap and self.heap[0][0] == now:
            _, kind, _, job_id, epoch, spec = heapq.heappop(self.heap)
            if kind == 0 and core.records[job_id].epoch == epoch and core.records[job_id].state is JobState.RUNNING:
                core.complete(job_id, now)
                changed = True
            elif kind == 1:
                core.submit(spec, now)
                changed = True
            elif kind == 2:
                self.round_at = math.inf
                changed = True
        if changed and core.pending:
            self.pool.execute(core.schedule(now), now)
        self.arm(now)
        return now


def pass_state(core: SchedulingCore, now: float) -> tuple:
    view = core.view(now)
    return (list(view.running), [r.job_id for r in view.pending], dict(view.pending_demand),
            view.free.gpus.tolist(), view.free.cpus.tolist(), view.free.memory_mb.tolist(), view.free.gpu_mask,
            {j: typed(r.snapshot()) for j, r in core.records.items()}, list(core.log),
            core.policy.schedule(view, PassState()).actions)


def test_restored_core_runs_on_identically(small_cluster, perf, stores):
    specs = [job(g, job_id=f"s{i}", submit=37.0 * i, iterations=400 + 173 * i % 900, model=m)
             for i, (g, m) in enumerate([(4, "resnet50"), (2, "bert-large"), (8, "resnet18"), (1, "gnmt"),
                                          (4, "resnet50"), (2, "alexnet"), (3, "resnet18"), (1, "bert-large"),
                                          (8, "gnmt"), (2, "resnet50"), (1, "alexnet"), (4, "bert-large")] * 2)]
    first = SchedulingCore(small_cluster, make_policy("las"), perf, round_s=60.0)
    driver = Driver(first, perf, specs)
    store = stores.open()
    now = 0.0
    for _ in range(10_000):
        if sum(r.state is JobState.COMPLETED for r in first.records.values()) >= len(specs) // 2:
            break
        now = driver.step()
        store.save(*first.take_changes())
    assert first.running and first.pending and any(r.preemptions for r in first.records.values())
    assert any(r.resume_at > now for r in first.running.values())  # a restore under way

    second = SchedulingCore(small_cluster, make_policy("las"), perf, round_s=60.0)
    second.restore(store.load())
    assert second.take_changes() == ([], [])
    assert pass_state(second, now) == pass_state(first, now)
    assert pass_state(second, now + 500.0) == pass_state(first, now + 500.0)
    assert pass_state(first, now + 500.0)[-1]  # the next round preempts and starts jobs

    again = Driver(second, perf, specs)
    for d in (driver, again):
        for _ in range(10_000):
            if not d.heap:
                break
            d.step()
    assert all(r.state is JobState.COMPLETED for r in second.records.values())
    assert list(second.log) == list(first.log)
    assert {j: typed(r.snapshot()) for j, r in second.records.items()} == \
        {j: typed(r.snapshot()) for j, r in first.records.items()}
    store.close()


def stored(core: SchedulingCore) -> StoredState:
    return StoredState([JobRecord.restore(r.snapshot()) for r in core.records.values()], list(core.log), {})


def running_pair(core: SchedulingCore) -> None:
    core.submit(job(2, job_id="a"), 0.0)
    core.submit(job(2, job_id="b"), 0.0)
    plan = Plan()
    plan.start("a", alloc(("r0-n0", (0, 1))))
    plan.start("b", alloc(("r0-n0", (2, 3))))
    core.apply(plan, 1.0)


def test_restore_refuses_a_gpu_held_twice(core, small_cluster, perf):
    running_pair(core)
    state = stored(core)
    state.records[1].allocation = alloc(("r0-n0", (1, 2)))
    fresh = SchedulingCore(small_cluster, make_policy("fifo"), perf)
    with pytest.raises(InconsistentState, match=r"job 'b' holds GPU 1 on node r0-n0, which job 'a' holds too"):
        fresh.restore(state)
    assert not fresh.records and not len(fresh.log) and fresh.free.gpus.tolist() == [4, 4, 4, 4]


@pytest.mark.parametrize(("spoil", "message"), [
    (lambda s: setattr(s.records[0], "allocation", None), r"job 'a' is RUNNING but holds no allocation"),
    (lambda s: setattr(s.records[1], "allocation", alloc(("r9-n9", (0, 1)))),
     r"job 'b': its allocation does not fit cluster 'small'"),
    (lambda s: setattr(s.records[1], "state", JobState.PENDING), r"job 'b' is stored PENDING but its last event"),
    (lambda s: s.events.pop(1), r"event #3 \(job 'a'\) where #2 belongs"),
    (lambda s: setattr(s.records[1], "arrival_seq", 5), r"job 'b' has arrival number 5, expected 1"),
])
def test_restore_names_the_inconsistent_job(core, small_cluster, perf, spoil, message):
    running_pair(core)
    state = stored(core)
    spoil(state)
    with pytest.raises(InconsistentState, match=message):
        SchedulingCore(small_cluster, make_policy("fifo"), perf).restore(state)


def test_restore_needs_a_fresh_core(core):
    running_pair(core)
    with pytest.raises(Exception, match="fresh core"):
        core.restore(stored(core))
