"""One active control plane per state file and per port (issue 36): real processes, real files, real sockets.

On the main branch before this change, a second ``halyard controlplane`` on the same ``--db`` restored
the state and scheduled it too, and one on the same ``--listen`` port bound it as well (gRPC's default
SO_REUSEPORT), so the kernel split the clients between the two.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess

import pytest
from test_daemon import CLI
from test_failures import free_port

from halyard.controlplane.storelock import StoreLock, StoreLocked
from halyard.testing.cluster import WAIT_TIMEOUT_S, small_cluster_toml

ENV = os.environ | {"PYTHONUNBUFFERED": "1"}


def controlplane(tmp_path, db: str, port: int, *extra: str) -> subprocess.Popen[str]:
    cluster = tmp_path / "c.toml"
    cluster.write_text(small_cluster_toml(1), encoding="utf-8")
    return subprocess.Popen([*CLI, "controlplane", "--cluster", str(cluster), "--db", str(tmp_path / db),
                             "--listen", f"127.0.0.1:{port}", "--insecure", "--log-level", "warning", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)


def ready(proc: subprocess.Popen[str]) -> None:
    line = proc.stdout.readline()
    assert line.startswith("listening on"), (line, proc.poll(), proc.stderr.read() if proc.poll() is not None else "")


def stop(*procs: subprocess.Popen[str]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def outcome(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    """A process expected to exit on its own: its exit status, stdout and stderr."""
    try:
        rc = proc.wait(timeout=WAIT_TIMEOUT_S)
        return rc, proc.stdout.read(), proc.stderr.read()
    finally:
        stop(proc)


def test_a_second_control_plane_on_the_same_db_exits_naming_the_holder(tmp_path):
    first = controlplane(tmp_path, "s.db", free_port())
    try:
        ready(first)
        rc, _, err = outcome(controlplane(tmp_path, "s.db", free_port()))
        assert rc == 2, err
        assert str(tmp_path / "s.db") in err and f"pid {first.pid}" in err and socket.gethostname() in err
        assert first.poll() is None  # the first one serves on
    finally:
        stop(first)


def test_a_second_control_plane_on_the_same_port_fails_address_in_use(tmp_path):
    port = free_port()
    first = controlplane(tmp_path, "a.db", port)
    try:
        ready(first)
        rc, out, err = outcome(controlplane(tmp_path, "b.db", port))
        assert rc == 2 and "listening on" not in out, (out, err)
        assert f"127.0.0.1:{port}" in err and "address in use" in err
    finally:
        stop(first)


def test_a_second_http_site_on_a_busy_port_is_refused(tmp_path):
    http = free_port()
    first = controlplane(tmp_path, "a.db", free_port(), "--http", f"127.0.0.1:{http}")
    try:
        ready(first)
        rc, _, err = outcome(controlplane(tmp_path, "b.db", free_port(), "--http", f"127.0.0.1:{http}"))
        assert rc != 0 and "address already in use" in err.lower(), err
    finally:
        stop(first)


def test_a_restart_after_kill_9_starts(tmp_path):
    port = free_port()
    first = controlplane(tmp_path, "s.db", port)
    try:
        ready(first)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=15)
    finally:
        stop(first)
    assert (tmp_path / "s.db.lock").exists()  # left behind, and no obstacle: the kernel dropped the lock
    again = controlplane(tmp_path, "s.db", port)  # the same port too: no SO_REUSEPORT leftovers
    try:
        ready(again)
    finally:
        stop(again)


def test_the_lock_in_process(tmp_path):
    db = tmp_path / "s.db"
    with StoreLock(db) as held:
        assert held.held
        holder = rf"in use by another control plane \(host .*, pid {os.getpid()}\)"
        with pytest.raises(StoreLocked, match=rf"{db}: .*{holder}"):
            StoreLock(db).acquire()
    with StoreLock(db):  # released on exit
        pass
