"""`halyard agent --backend process` as an operator runs it: a real job submitted with `halyard submit --command`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from test_daemon import CLI, cli
from test_failures import free_port
from worlds import EXAMPLE

from halyard.testing.cluster import WAIT_TIMEOUT_S, small_cluster_toml


def test_process_agent_daemon_runs_a_submitted_command_to_completion(tmp_path):
    cluster = tmp_path / "c.toml"
    cluster.write_text(small_cluster_toml(1), encoding="utf-8")
    target = f"127.0.0.1:{free_port()}"
    cp = subprocess.Popen([*CLI, "controlplane", "--cluster", str(cluster), "--db", str(tmp_path / "s.db"),
                           "--listen", target, "--heartbeat-s", "0.1", "--insecure"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=os.environ | {"PYTHONUNBUFFERED": "1"})
    agent = subprocess.Popen([*CLI, "agent", "--control-plane", target, "--node", "r0-n0", "--backend", "process",
                              "--work-dir", str(tmp_path / "work"), "--log-json", "--insecure"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert cp.stdout.readline().decode().startswith("listening on")
        command = f"{sys.executable} {EXAMPLE} --checkpoint-every 20"
        sub = cli("submit", "--control-plane", target, "--id", "t1", "--model", "resnet50", "--gpus", "8",
                  "--iterations", "100", "--command", command, "--env", "EXTRA=1")
        assert sub.returncode == 0, sub.stderr
        deadline = time.monotonic() + WAIT_TIMEOUT_S
        while True:
            jobs = json.loads(cli("jobs", "--control-plane", target, "--json").stdout)
            if jobs[0]["state"] in ("COMPLETED", "FAILED"):
                break
            assert time.monotonic() < deadline, jobs
            time.sleep(0.2)
        assert jobs[0]["state"] == "COMPLETED", jobs
    finally:
        agent.send_signal(signal.SIGTERM)
        cp.send_signal(signal.SIGTERM)
        agent.wait(timeout=15)
        cp.wait(timeout=15)
    summary = json.loads((tmp_path / "work" / "checkpoints" / "t1" / "summary.json").read_text())
    assert summary["accuracy"] > 0.8
    logs = agent.stderr.read().decode()
    assert "memory" in logs  # the agent states what it enforces (unenforced memory is logged as a warning)
