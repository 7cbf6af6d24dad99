"""Active and standby control planes over one PostgreSQL store (issue 36), as an operator runs them:
real ``halyard controlplane`` processes, a real agent process, a real throwaway PostgreSQL server.

The lease here is short (3 s, renew deadline 2 s, retry 0.5 s) so that a failover fits a test; the
defaults (15/10/2 s) are Kubernetes' and are what benchmarks/chaos_failover.py measures.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

from test_daemon import CLI, cli
from test_failures import free_port
from test_single_active import stop as stop_all

from halyard.controlplane.store_postgres import PostgresStore
from halyard.datamodel import EventKind
from halyard.testing.cluster import WAIT_TIMEOUT_S, small_cluster_toml

ENV = os.environ | {"PYTHONUNBUFFERED": "1"}
LEASE = ("--lease-duration-s", "3", "--lease-renew-deadline-s", "2", "--lease-retry-period-s", "0.5")


def controlplane(tmp_path, url: str, port: int) -> subprocess.Popen[str]:
    cluster = tmp_path / "c.toml"
    cluster.write_text(small_cluster_toml(1), encoding="utf-8")
    return subprocess.Popen([*CLI, "controlplane", "--cluster", str(cluster), "--db", url, "--insecure",
                             "--listen", f"127.0.0.1:{port}", "--heartbeat-s", "0.2", "--log-json", *LEASE],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)


def line(proc: subprocess.Popen[str], timeout: float = WAIT_TIMEOUT_S) -> str:
    """The next stdout line (readiness: "standby on ..." or "listening on ...")."""
    deadline = time.monotonic() + timeout
    text = proc.stdout.readline()
    assert text or time.monotonic() > deadline, f"exited {proc.poll()}: {proc.stderr.read()[-3000:]}"
    return text


def leads(proc: subprocess.Popen[str]) -> None:
    """Wait until it serves as the leader (every control plane on PostgreSQL starts as a standby)."""
    first = line(proc)
    assert first.startswith("standby on"), first
    assert line(proc).startswith("listening on")


def stop(*procs: subprocess.Popen[str]) -> None:
    for proc in procs:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)  # a paused one must run to take its SIGTERM
    stop_all(*procs)


def events_of(url: str, job_id: str) -> list[EventKind]:
    with PostgresStore(url) as store:
        return [e.kind for e in store.load().events if e.job_id == job_id]


def wait_for(what, timeout: float = WAIT_TIMEOUT_S, step: float = 0.2):
    deadline = time.monotonic() + timeout
    while not (got := what()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(step)
    return got


def state_of(targets: str, job_id: str) -> str | None:
    done = cli("jobs", "--control-plane", targets, "--json")
    if done.returncode:
        return None
    return next((j["state"] for j in json.loads(done.stdout) if j["spec"]["job_id"] == job_id), None)


def test_standby_names_the_leader_takes_over_after_kill_9_and_re_dispatches_nothing(tmp_path, pg_url):
    pa, pb = free_port(), free_port()
    a = controlplane(tmp_path, pg_url, pa)
    b = agent = None
    try:
        leads(a)
        b = controlplane(tmp_path, pg_url, pb)
        assert line(b).startswith("standby on")
        # A standby answers every call UNAVAILABLE, naming the leader; given both, a client finds the leader.
        direct = cli("jobs", "--control-plane", f"127.0.0.1:{pb}")
        assert direct.returncode != 0 and f"the leader serves at 127.0.0.1:{pa}" in direct.stderr, direct.stderr
        both = f"127.0.0.1:{pb},127.0.0.1:{pa}"
        agent = subprocess.Popen([*CLI, "agent", "--control-plane", both, "--node", "r0-n0", "--insecure"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        sub = cli("submit", "--control-plane", both, "--id", "long", "--model", "resnet50", "--gpus", "8",
                  "--iterations", "10000000")
        assert sub.returncode == 0, sub.stderr
        wait_for(lambda: state_of(both, "long") == "RUNNING")
        a.send_signal(signal.SIGKILL)
        a.wait(timeout=10)
        killed = time.monotonic()
        assert line(b).startswith("listening on")  # the lease ran out; the standby leads
        took = time.monotonic() - killed
        assert took < 3 + 0.5 + 10, took  # lease + retry (+ a loaded machine's start)
        # The agent followed the new leader and reported the job; it still runs, never re-dispatched.
        wait_for(lambda: state_of(both, "long") == "RUNNING")
        time.sleep(1.5)  # past a few heartbeats: a requeue would show by now
        assert events_of(pg_url, "long") == [EventKind.SUBMITTED, EventKind.STARTED]
        assert state_of(f"127.0.0.1:{pb}", "long") == "RUNNING"
    finally:
        stop(*(p for p in (agent, b, a) if p is not None))


def test_a_leader_paused_past_its_lease_commits_nothing_when_it_resumes(tmp_path, pg_url):
    pa, pb = free_port(), free_port()
    a = controlplane(tmp_path, pg_url, pa)
    b = None
    late = None
    try:
        leads(a)
        b = controlplane(tmp_path, pg_url, pb)
        assert line(b).startswith("standby on")
        os.kill(a.pid, signal.SIGSTOP)
        # A submission reaches the paused leader's socket; it is handled only when the leader resumes.
        late = subprocess.Popen([*CLI, "submit", "--control-plane", f"127.0.0.1:{pa}", "--id", "late",
                                 "--model", "resnet50", "--gpus", "1", "--iterations", "10"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=os.environ | {"HALYARD_INSECURE": "1"})
        assert line(b).startswith("listening on")  # the standby took over while the leader slept
        os.kill(a.pid, signal.SIGCONT)
        assert a.wait(timeout=WAIT_TIMEOUT_S) == 3  # it stepped down (lost lease or fenced write)
        out, err = late.communicate(timeout=WAIT_TIMEOUT_S)
        assert late.returncode != 0, (out, err)
        assert "late" not in {r.job_id for r in PostgresStore(pg_url).load().records}
        stderr = a.stderr.read()
        assert "leader" in stderr or "fenced" in stderr.lower() or "no longer leads" in stderr
        # The new leader serves on.
        sub = cli("submit", "--control-plane", f"127.0.0.1:{pa},127.0.0.1:{pb}", "--id", "after", "--model",
                  "resnet50", "--gpus", "1", "--iterations", "10")
        assert sub.returncode == 0, sub.stderr
    finally:
        if late is not None and late.poll() is None:
            late.kill()
        stop(*(p for p in (b, a) if p is not None))
