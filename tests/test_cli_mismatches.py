"""Mismatched TLS, CAs and agent identities end in one line that says what is wrong (issue 33, point 7).

Before: a plaintext client at a TLS port got "UNAVAILABLE ... Socket closed" and nothing said the
server speaks TLS; a wrong CA printed gRPC core's raw handshake log; an agent the control plane
refused printed its clean log line and then a 35-line traceback. Real daemons, real CLI processes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_daemon import CLI, cli
from test_failures import free_port

from halyard.testing.cluster import WAIT_TIMEOUT_S, small_cluster_toml

NOISE = ("Traceback", "ssl_transport_security", "Handshake failed", "Socket closed")


def run(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HALYARD_", "GRPC_"))}
    return cli(*args, env=env)


def quiet(result: subprocess.CompletedProcess) -> str:
    """stderr, checked to hold no traceback and none of gRPC core's own output."""
    for word in NOISE:
        assert word not in result.stderr, result.stderr
    return result.stderr


def start(*args: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    target = f"127.0.0.1:{port}"
    proc = subprocess.Popen([*CLI, "controlplane", "--listen", target, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=os.environ | {"PYTHONUNBUFFERED": "1"})
    line = proc.stdout.readline().decode()
    assert line.startswith("listening on"), line
    return proc, target


@pytest.fixture(scope="module")
def servers(tmp_path_factory) -> Iterator[dict[str, object]]:
    """A control plane over TLS and one in insecure mode, on a two-node cluster; two CAs."""
    tmp = tmp_path_factory.mktemp("mismatch")
    certs, other = tmp / "certs", tmp / "other"
    for args in (("init", "--dir", str(certs)), ("issue", "node", "r0-n0", "--dir", str(certs)),
                 ("issue", "operator", "olga", "--dir", str(certs)), ("init", "--dir", str(other))):
        assert run("certs", *args).returncode == 0
    cluster = tmp / "c.toml"
    cluster.write_text(small_cluster_toml(2), encoding="utf-8")
    agent_port = free_port()
    tls, tls_target = start("--cluster", str(cluster), "--db", str(tmp / "tls.db"), "--certs", str(certs),
                            "--agent-listen", f"127.0.0.1:{agent_port}")
    plain, plain_target = start("--cluster", str(cluster), "--db", str(tmp / "plain.db"), "--insecure")
    try:
        yield {"certs": certs, "other": other, "tls": tls_target, "agents": f"127.0.0.1:{agent_port}",
               "plain": plain_target}
    finally:
        for proc in (tls, plain):
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=15)


def operator(certs: Path, ca: Path) -> tuple[str, ...]:
    return ("--ca", str(ca), "--cert", str(certs / "operator-olga.crt"), "--key", str(certs / "operator-olga.key"))


def test_a_plaintext_client_at_a_tls_port_is_told_the_server_may_require_tls(servers):
    result = run("jobs", "--control-plane", servers["tls"], "--insecure")
    assert result.returncode == 5
    assert "may require TLS" in quiet(result) and "pass --ca" in result.stderr


def test_a_tls_client_at_a_plaintext_port_is_told_to_pass_insecure(servers):
    certs = servers["certs"]
    result = run("jobs", "--control-plane", servers["plain"], *operator(certs, certs / "ca.crt"))
    assert result.returncode == 5
    assert "does not speak TLS" in quiet(result) and "pass --insecure" in result.stderr


def test_a_wrong_ca_is_one_line_naming_the_ca_file(servers):
    certs, other = servers["certs"], servers["other"]
    result = run("jobs", "--control-plane", servers["tls"], *operator(certs, other / "ca.crt"))
    assert result.returncode == 5
    assert f"not signed by the CA in {other / 'ca.crt'}" in quiet(result)
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_an_agent_with_another_nodes_certificate_exits_with_the_refusal_only(servers, tmp_path):
    certs = tmp_path / "certs"
    shutil.copytree(servers["certs"], certs)
    for suffix in ("crt", "key"):  # r0-n0's certificate, under r0-n1's name
        shutil.copy(certs / f"node-r0-n0.{suffix}", certs / f"node-r0-n1.{suffix}")
    result = run("agent", "--control-plane", servers["agents"], "--node", "r0-n1", "--certs", str(certs),
                 "--backend", "emulated")
    assert result.returncode == 4
    assert "control plane refused this agent" in quiet(result) and "may not speak for node" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_an_agent_for_a_node_not_in_the_cluster_exits_with_the_refusal_only(servers):
    result = run("agent", "--control-plane", servers["plain"], "--node", "r9-n9", "--insecure",
                 "--backend", "emulated")
    assert result.returncode == 4
    assert "no node 'r9-n9'" in quiet(result)
    assert len(result.stderr.strip().splitlines()) == 2, result.stderr  # the insecure-mode warning, the refusal


def held(target: str, node: str) -> bool:
    cluster = run("cluster", "--control-plane", target, "--insecure", "--json")
    return any(n["spec"]["name"] == node and n.get("connected") for n in json.loads(cluster.stdout)["nodes"])


def test_a_second_agent_for_a_held_node_says_so_and_exits(servers):
    """The README's real-training agent for r0-n0 started while its emulated one runs: it retried forever;
    now it says another agent holds the node and exits (after HELD_GIVE_UP_S, 15 s)."""
    first = subprocess.Popen([*CLI, "agent", "--control-plane", servers["plain"], "--node", "r0-n0", "--insecure",
                              "--backend", "emulated"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + WAIT_TIMEOUT_S
        while not held(servers["plain"], "r0-n0"):  # the first has registered
            assert time.monotonic() < deadline and first.poll() is None
            time.sleep(0.2)
        result = run("agent", "--control-plane", servers["plain"], "--node", "r0-n0", "--insecure",
                     "--backend", "emulated")
        assert result.returncode == 4
        assert "another agent holds this node; this one stops" in quiet(result)
        assert first.poll() is None  # the first keeps its node
    finally:
        first.terminate()
        first.wait(timeout=15)


def test_an_agent_with_another_clusters_ca_says_so_without_grpc_core_noise(servers):
    """An agent keeps retrying (the control plane may come back), but says once what is wrong."""
    other = servers["other"]
    assert run("certs", "issue", "node", "r0-n1", "--dir", str(other)).returncode == 0
    agent = subprocess.Popen([*CLI, "agent", "--control-plane", servers["agents"], "--node", "r0-n1", "--certs",
                              str(other), "--backend", "emulated"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True, env={k: v for k, v in os.environ.items() if not k.startswith("GRPC_")})
    lines: list[str] = []
    try:
        for line in agent.stderr:
            lines.append(line)
            if "cannot connect, as logged above" in line:  # the first retry after the error
                break
    finally:
        agent.terminate()
        agent.wait(timeout=15)
    text = "".join(lines)
    assert f"not signed by this agent's CA ({other / 'ca.crt'})" in text
    for word in NOISE:
        assert word not in text, text
