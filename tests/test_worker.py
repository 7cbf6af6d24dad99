"""The worker library: reporting, checkpoints and resume, time-shift pacing with drift correction, preemption."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from halyard.agent.worker import DRIFT_TOLERANCE, Pacer, Worker, clock_env


def test_pacer_aligns_to_the_shift_then_corrects_drift():
    pacer = Pacer()
    assert pacer.wait_s(123.0) == 0.0  # no shift: never waits
    pacer.set_shift(0.3, period_s=1.0)  # starts at 0.3, 1.3, 2.3, ... of the cluster clock
    assert pacer.wait_s(10.0) == pytest.approx(0.3)  # first start after a new shift: on the grid
    assert pacer.wait_s(11.3 + 0.5 * DRIFT_TOLERANCE) == 0.0  # a little late: go
    assert pacer.wait_s(12.3 - 0.05) == pytest.approx(0.05)  # a little early: wait for the grid point
    assert pacer.wait_s(13.3 + 0.4) == pytest.approx(0.6)  # drifted: re-align on the next grid point


def test_pacer_measures_the_period_when_none_is_given():
    pacer = Pacer()
    pacer.set_shift(0.0)
    assert pacer.wait_s(5.0) == 0.0  # no period yet
    for _ in range(20):
        pacer.observe(2.0)
    assert pacer.period == pytest.approx(2.0)
    assert pacer.wait_s(5.0) == pytest.approx(1.0)


def test_worker_runs_alone_checkpoints_and_resumes(tmp_path):
    saved: list[int] = []
    env = {"HALYARD_CHECKPOINT_DIR": str(tmp_path), "HALYARD_ITERATIONS_TOTAL": "25"}
    worker = Worker(checkpoint=saved.append, checkpoint_every=10, env=env, handle_sigterm=False)
    assert not worker.resuming
    assert list(worker.iterations(12)) == list(range(12))
    assert saved == [10, 12]  # every 10 and after the last
    again = Worker(checkpoint=saved.append, env=env, handle_sigterm=False)
    assert again.resuming and again.start_iteration == 12  # the marker, not HALYARD_START_ITERATION
    assert list(again.iterations()) == list(range(12, 25))


def test_start_iteration_comes_from_the_agent_without_a_marker(tmp_path):
    env = {"HALYARD_CHECKPOINT_DIR": str(tmp_path), "HALYARD_START_ITERATION": "7"}
    assert Worker(env=env, handle_sigterm=False).start_iteration == 7


def test_worker_reports_to_the_agent_socket_and_follows_its_time_shift(tmp_path):
    path = str(tmp_path / "a.sock") if len(str(tmp_path)) < 90 else f"/tmp/halyard-test-{os.getpid()}.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    received: list[dict] = []

    def agent() -> None:
        conn, _ = server.accept()
        with conn, conn.makefile("r") as lines:
            for line in lines:
                message = json.loads(line)
                received.append(message)
                if message["type"] == "hello":
                    conn.sendall(b'{"type": "time_shift", "seconds": 0.0, "period_s": 0.05}\n')

    thread = threading.Thread(target=agent, daemon=True)
    thread.start()
    origin = time.time() - 100.0  # cluster time 100 s now
    env = {"HALYARD_AGENT_SOCKET": path, "HALYARD_JOB_ID": "j", "HALYARD_ATTEMPT": "2",
           "HALYARD_CHECKPOINT_DIR": str(tmp_path / "ck"), "HALYARD_CLOCK": clock_env(origin, 0.0, 1.0)}
    worker = Worker(env=env, handle_sigterm=False)
    deadline = time.monotonic() + 30.0  # the shift arrives (a condition, not a guess at how long it takes)
    while worker.pacer.shift is None:
        assert time.monotonic() < deadline, "the time_shift message never reached the worker"
        time.sleep(0.005)
    starts = []
    for _ in worker.iterations(6):
        starts.append(time.time())
        worker.add_bytes(100)
    worker.close()
    thread.join(2)
    server.close()
    assert received[0] == {"type": "hello", "job_id": "j", "attempt": 2, "rank": 0, "pid": os.getpid()}
    iterations = [m for m in received if m["type"] == "iteration"]
    assert [m["index"] for m in iterations] == [1, 2, 3, 4, 5, 6] and all(m["bytes"] == 100 for m in iterations)
    assert received[-1] == {"type": "done", "iterations": 6}
    phases = [(s - origin) % 0.05 for s in starts]  # every start on the 50 ms grid of the cluster clock
    assert all(min(p, 0.05 - p) < 0.01 for p in phases), phases


def test_sigterm_checkpoints_the_finished_iterations_and_exits_cleanly(tmp_path):
    script = textwrap.dedent("""
        import sys, time
        from halyard.agent.worker import Worker
        w = Worker(checkpoint=lambda done: print("saved", done, flush=True))
        for i in w.iterations(1_000_000):
            if i == 3:
                print("ready", flush=True)
            time.sleep(0.01)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            env=os.environ | {"HALYARD_CHECKPOINT_DIR": str(tmp_path)})
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0
    done = int(out.split()[-1])
    assert out.split()[0] == "saved" and done >= 4
    assert json.loads((tmp_path / "halyard-checkpoint.json").read_text())["iteration"] == done
