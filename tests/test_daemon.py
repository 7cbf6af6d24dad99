"""The daemons as an operator runs them: processes, the client CLI, /healthz, /metrics, SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

from test_failures import free_port

from halyard.testing.cluster import WAIT_TIMEOUT_S, small_cluster_toml

CLI = [sys.executable, "-m", "halyard.cli"]


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """A client command; plaintext to the loopback control plane unless ``env`` says otherwise."""
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60,
                          env=os.environ | ({"HALYARD_INSECURE": "1"} if env is None else env))


def test_daemon_serves_clients_http_and_stops_cleanly(tmp_path):
    cluster = tmp_path / "c.toml"
    cluster.write_text(small_cluster_toml(1), encoding="utf-8")
    port, http = free_port(), free_port()
    target = f"127.0.0.1:{port}"
    cp = subprocess.Popen([*CLI, "controlplane", "--cluster", str(cluster), "--db", str(tmp_path / "s.db"),
                           "--listen", target, "--http", f"127.0.0.1:{http}", "--speedup", "1", "--insecure"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ | {"PYTHONUNBUFFERED": "1"})
    agent = subprocess.Popen([*CLI, "agent", "--control-plane", target, "--node", "r0-n0", "--insecure"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert cp.stdout.readline().decode().startswith("listening on")
        deadline = time.monotonic() + WAIT_TIMEOUT_S  # an agent process starting on a loaded machine
        while json.loads(get(f"http://127.0.0.1:{http}/healthz"))["agents"] < 1:
            assert time.monotonic() < deadline, "agent did not register"
            time.sleep(0.05)
        sub = cli("submit", "--control-plane", target, "--id", "j1", "--model", "resnet50", "--gpus", "8",
                  "--iterations", "100000")
        assert sub.returncode == 0 and "j1 PENDING" in sub.stdout, sub.stderr
        bad = cli("submit", "--control-plane", target, "--id", "j1", "--model", "resnet50", "--gpus", "8",
                  "--iterations", "5")
        assert bad.returncode == 4 and "ALREADY_EXISTS" in bad.stderr  # EXIT_REJECTED: the server said no
        assert bad.stderr.startswith("halyard submit: error:")
        listed = json.loads(cli("jobs", "--control-plane", target, "--json").stdout)
        assert [(j["spec"]["job_id"], j["state"]) for j in listed] == [("j1", "RUNNING")]
        watched = cli("watch", "--control-plane", target, "--count", "2")
        assert [line.split()[3] for line in watched.stdout.splitlines()] == ["SUBMITTED", "STARTED"]
        cancelled = cli("cancel", "--control-plane", target, "j1")
        assert "j1 CANCELLED" in cancelled.stdout
        metrics = get(f"http://127.0.0.1:{http}/metrics")
        assert "halyard_gpus_total 8.0" in metrics and "halyard_agents_connected 1.0" in metrics
        submits = 'halyard_grpc_server_handled_total{code="%s",method="SubmitJob",service="halyard.v1.JobService"}'
        assert submits % "OK" + " 1.0" in metrics and submits % "ALREADY_EXISTS" + " 1.0" in metrics
        assert 'halyard_jobs_finished_total{state="CANCELLED",tenant="default"} 1.0' in metrics
        assert "<title>Halyard dashboard</title>" in get(f"http://127.0.0.1:{http}/")  # shipped as package data
        assert "halyard_pass_seconds_count" in metrics
    finally:
        agent.terminate()
        cp.send_signal(signal.SIGTERM)
        assert cp.wait(timeout=15) == 0  # graceful shutdown on SIGTERM
        agent.wait(timeout=15)
    logs = cp.stderr.read().decode()
    assert '"event": "shutting down"' in logs  # JSON logs when not on a terminal


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as reply:
        return reply.read().decode()
