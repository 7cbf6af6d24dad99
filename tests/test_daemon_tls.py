"""The daemons over mutual TLS as an operator runs them, and insecure mode only on request (issue 16, item 3).

Real processes and sockets: `halyard certs`, `halyard tokens`, the control plane, an
agent and the client commands, as README's "Running it as a service" shows them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

from test_daemon import CLI, cli
from test_failures import free_port

from halyard.testing.cluster import WAIT_TIMEOUT_S, small_cluster_toml


def tls_cli(*args: str, token: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HALYARD_")}
    return cli(*args, env=env | ({"HALYARD_TOKEN": token} if token else {}))


def test_control_plane_agent_and_clients_over_mutual_tls(tmp_path):
    certs, tokens = tmp_path / "certs", tmp_path / "tokens.json"
    assert tls_cli("certs", "init", "--dir", str(certs)).returncode == 0
    assert tls_cli("certs", "issue", "node", "r0-n0", "--dir", str(certs)).returncode == 0
    assert tls_cli("certs", "issue", "operator", "olga", "--dir", str(certs)).returncode == 0
    made = tls_cli("tokens", "create", "--file", str(tokens), "--name", "alice", "--role", "tenant-user",
                   "--tenant", "team-a")
    assert made.returncode == 0, made.stderr
    alice = made.stdout.strip()
    bob = tls_cli("tokens", "create", "--file", str(tokens), "--name", "bob", "--role", "tenant-user",
                  "--tenant", "team-b").stdout.strip()
    cluster = tmp_path / "c.toml"
    cluster.write_text(small_cluster_toml(1), encoding="utf-8")
    port, agent_port = free_port(), free_port()
    target, agent_target = f"127.0.0.1:{port}", f"127.0.0.1:{agent_port}"
    cp = subprocess.Popen([*CLI, "controlplane", "--cluster", str(cluster), "--db", str(tmp_path / "s.db"),
                           "--listen", target, "--agent-listen", agent_target, "--certs", str(certs),
                           "--tokens", str(tokens), "--heartbeat-s", "0.1"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ | {"PYTHONUNBUFFERED": "1"})
    agent = subprocess.Popen([*CLI, "agent", "--control-plane", agent_target, "--node", "r0-n0", "--certs", str(certs)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ca = ("--control-plane", target, "--ca", str(certs / "ca.crt"))
    try:
        assert cp.stdout.readline().decode().startswith("listening on")
        sub = tls_cli("submit", *ca, "--id", "j1", "--model", "resnet50", "--gpus", "8", "--iterations", "100000",
                      "--env", "API_KEY=secret", token=alice)
        assert sub.returncode == 0 and "j1 PENDING" in sub.stdout, sub.stderr
        deadline = time.monotonic() + WAIT_TIMEOUT_S  # processes starting on a loaded machine
        while True:
            listed = json.loads(tls_cli("jobs", *ca, "--json", token=alice).stdout)
            if listed[0]["state"] == "RUNNING":
                break
            assert time.monotonic() < deadline, listed  # the agent registered over mTLS and runs it
            time.sleep(0.1)
        assert listed[0]["spec"]["tenant"] == "team-a" and listed[0]["env_names"] == ["API_KEY"]
        assert "secret" not in json.dumps(listed)  # env values go to the agent only (issue 32)
        shown = tls_cli("job", *ca, "j1", token=alice).stdout
        assert "env:        API_KEY" in shown and "secret" not in shown
        assert json.loads(tls_cli("jobs", *ca, "--json", token=bob).stdout) == []  # another tenant sees nothing
        denied = tls_cli("cancel", *ca, "j1", token=bob)
        assert denied.returncode == 4 and "PERMISSION_DENIED" in denied.stderr  # rejected by the server
        none = tls_cli("jobs", *ca)
        assert none.returncode == 4 and "UNAUTHENTICATED" in none.stderr
        plain = tls_cli("jobs", "--control-plane", target, "--insecure", token=alice)  # plaintext to a TLS port
        assert plain.returncode == 5 and "UNAVAILABLE" in plain.stderr  # no plaintext server answered
        watched = tls_cli("watch", *ca, "--count", "2", token=alice)
        assert [line.split()[3] for line in watched.stdout.splitlines()] == ["SUBMITTED", "STARTED"]
        operator = tls_cli("jobs", "--control-plane", agent_target, "--ca", str(certs / "ca.crt"), "--cert",
                           str(certs / "operator-olga.crt"), "--key", str(certs / "operator-olga.key"), "--json")
        assert [j["spec"]["job_id"] for j in json.loads(operator.stdout)] == ["j1"], operator.stderr
        cancelled = tls_cli("cancel", *ca, "j1", token=alice)
        assert "j1 CANCELLED" in cancelled.stdout, cancelled.stderr
    finally:
        agent.terminate()
        cp.send_signal(signal.SIGTERM)
        assert cp.wait(timeout=15) == 0
        agent.wait(timeout=15)
    logs = cp.stderr.read().decode()
    assert "INSECURE" not in logs


def test_daemons_refuse_to_start_without_tls_unless_insecure_and_insecure_is_loopback_only(tmp_path):
    cluster = tmp_path / "c.toml"
    cluster.write_text(small_cluster_toml(1), encoding="utf-8")
    db = str(tmp_path / "s.db")
    cases = [
        (("controlplane", "--cluster", str(cluster), "--db", db), "--insecure"),
        (("controlplane", "--cluster", str(cluster), "--db", db, "--insecure", "--listen", "0.0.0.0:50999"),
         "loopback addresses only"),
        (("controlplane", "--cluster", str(cluster), "--db", db, "--insecure", "--http", "0.0.0.0:50998"),
         "--http 0.0.0.0:50998: insecure mode (no TLS) serves loopback addresses only"),
        (("agent", "--control-plane", "127.0.0.1:1", "--node", "r0-n0"), "--insecure"),
        (("agent", "--control-plane", "cp.example:50051", "--node", "r0-n0", "--insecure"), "loopback addresses only"),
        (("jobs", "--control-plane", "cp.example:50051", "--insecure"), "loopback addresses only"),
        (("jobs", "--control-plane", "127.0.0.1:1"), "--ca"),
    ]
    for args, words in cases:
        done = tls_cli(*args)
        assert done.returncode == 2 and words in done.stderr, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_insecure_mode_says_so(tmp_path):
    cluster = tmp_path / "c.toml"
    cluster.write_text(small_cluster_toml(1), encoding="utf-8")
    cp = subprocess.Popen([*CLI, "controlplane", "--cluster", str(cluster), "--db", str(tmp_path / "s.db"),
                           "--listen", f"127.0.0.1:{free_port()}", "--insecure"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ | {"PYTHONUNBUFFERED": "1"})
    try:
        assert cp.stdout.readline().decode().startswith("listening on")
    finally:
        cp.send_signal(signal.SIGTERM)
        assert cp.wait(timeout=15) == 0
    assert "INSECURE MODE" in cp.stderr.read().decode()
