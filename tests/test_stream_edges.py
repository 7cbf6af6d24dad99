"""No request can block the control plane's event loop (issue 32, defect 2).

One anonymous ``GET /api/events?after=-1`` on an empty event log used to spin the daemon at
100% CPU for good: ``log.since(-1)`` returned nothing while ``wait_events(-1)`` returned at
once, so the handler's loop never awaited. Here a real ``halyard controlplane`` process
(insecure mode without tokens, so every route is open to the probe) gets every HTTP route
and every streaming RPC with edge parameters (negative, huge, empty, not a number), on an
empty control plane and then on a full one (an agent process, running and queued jobs), and
after each of them ``/healthz`` must answer within 1 s.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from urllib.parse import quote

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from test_daemon import CLI
from test_failures import free_port

from halyard.controlplane.httpapi import build_app
from halyard.controlplane.server import SERVICE_NAMES
from halyard.testing.cluster import WAIT_TIMEOUT_S, small_cluster_toml
from halyard.v1 import agent_service_pb2 as apb
from halyard.v1 import agent_service_pb2_grpc as agrpc
from halyard.v1 import job_service_pb2 as jpb
from halyard.v1 import job_service_pb2_grpc as jgrpc
from halyard.v1 import types_pb2 as tpb

HEALTH_WITHIN_S = 1.0  # the bar: health answers within a second after any request
REQUEST_S = 3.0  # an ordinary request's answer
STREAM_READ_S = 0.3  # how long a stream is read before the client goes away
NUMBERS = ("-1", "0", "1", "-9223372036854775809", "9223372036854775807", "9223372036854775808", "9" * 40,
           "", "abc", "nan", "inf", "-inf", "1e308", "0x10", " 7", "\u0661", "%00")
QUERIES = {  # route -> the parameters it reads
    "/api/jobs": ("state", "tenant", "limit"),
    "/api/queue": ("limit",),
    "/api/utilization": ("window_s",),
    "/api/events": ("after",),
}
JOB_IDS = ("-1", "0", "x" * 2000, "%00", "..", "%2e%2e%2fetc", "nope", "j0")
U64 = (0, 1, 2**31, 2**63 - 1, 2**63, 2**64 - 1)
STRINGS = ("", "nope", "x" * 5000, "j0", "\u0000", "../..")


class Daemon:
    """``halyard controlplane`` as a process, with its gRPC and HTTP ports."""

    def __init__(self, tmp_path) -> None:
        self.cluster = tmp_path / "c.toml"
        self.cluster.write_text(small_cluster_toml(1), encoding="utf-8")
        self.grpc, self.http = f"127.0.0.1:{free_port()}", free_port()
        self.process = subprocess.Popen(
            [*CLI, "controlplane", "--cluster", str(self.cluster), "--db", str(tmp_path / "s.db"),
             "--listen", self.grpc, "--http", f"127.0.0.1:{self.http}", "--heartbeat-s", "0.1", "--insecure"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=os.environ | {"PYTHONUNBUFFERED": "1"})
        self.agent: subprocess.Popen[bytes] | None = None
        assert self.process.stdout.readline().decode().startswith("listening on")

    def healthy_within(self, seconds: float, after: str) -> None:
        started = time.monotonic()
        try:
            status, _, _ = request(self.http, "GET", "/healthz", timeout=seconds)
        except (TimeoutError, OSError) as exc:
            pytest.fail(f"/healthz did not answer within {seconds} s after {after}: {exc!r}")
        assert status == 200 and time.monotonic() - started <= seconds + 0.2, after

    def stop(self) -> None:
        for proc in (self.agent, self.process):
            if proc is None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # a hung daemon does not answer SIGTERM
                proc.kill()
                proc.wait(timeout=10)


def request(port: int, method: str, target: str, *, body: bytes | None = None, headers: dict[str, str] | None = None,
            timeout: float = REQUEST_S) -> tuple[int, str, bytes]:
    """One HTTP request over a real socket: (status, content type, body); an event stream is read for a moment."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, target, body=body, headers=headers or {})
        reply = conn.getresponse()
        kind = reply.getheader("Content-Type", "")
        if kind.startswith("text/event-stream"):
            conn.sock.settimeout(STREAM_READ_S)
            data = b""
            try:
                while chunk := reply.read1(65536):
                    data += chunk
            except TimeoutError:
                pass
            return reply.status, kind, data
        return reply.status, kind, reply.read()
    finally:
        conn.close()


def http_probes() -> Iterator[tuple[str, str, dict[str, str], bytes | None]]:
    """(method, target, headers, body) for every route with every edge value of every parameter it reads."""
    for route in sorted(routes()):
        method, path = route
        if "{job_id}" in path:
            for job_id in JOB_IDS:
                yield method, path.replace("{job_id}", quote(job_id, safe="%")), {}, None
            continue
        if method == "POST":
            for value in NUMBERS:
                yield method, path, {"Content-Type": "application/x-www-form-urlencoded"}, \
                    f"token={quote(value)}&csrf={quote(value)}".encode()
            yield method, path, {"Content-Type": "application/x-www-form-urlencoded"}, b"%%%=&&=="
            continue
        yield method, f"{path}?junk=-1", {}, None
        yield "HEAD", f"{path}?junk=-1", {}, None
        for name in QUERIES.get(path, ()):
            for value in NUMBERS:
                yield method, f"{path}?{name}={quote(value, safe='%')}", {}, None
        if path == "/api/events":
            for value in NUMBERS:
                if value.isprintable() and value.isascii():
                    yield method, path, {"Last-Event-ID": value}, None


def routes() -> set[tuple[str, str]]:
    """Every (method, path) the HTTP port serves, read from the application itself (HEAD aside)."""
    app = build_app(None, None)  # type: ignore[arg-type] - routes only; no handler runs here
    return {(r.method, r.resource.canonical) for r in app.router.routes() if r.method != "HEAD"}


def streaming_methods() -> set[str]:
    """Every streaming RPC the control plane serves, from the descriptors (so a new one must be added below)."""
    from halyard.controlplane.reflection import reflection_pool

    pool = reflection_pool()
    out = set()
    for name in (*SERVICE_NAMES, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name):
        for method in pool.FindServiceByName(name).methods:
            if method.server_streaming:
                out.add(f"{name}/{method.name}")
    return out


def rpc_probes(channel: grpc.Channel) -> Iterator[tuple[str, Callable[[], None]]]:
    """(what, call) for every streaming RPC with edge requests; each call reads its stream briefly."""
    jobs, health = jgrpc.JobServiceStub(channel), health_pb2_grpc.HealthStub(channel)
    agents, reflection = agrpc.AgentServiceStub(channel), reflection_pb2_grpc.ServerReflectionStub(channel)
    for seq in U64:
        for job_id in STRINGS:
            yield f"WatchEvents(after_seq={seq}, job_id={job_id[:9]!r})", lambda s=seq, j=job_id: drain(
                jobs.WatchEvents(jpb.WatchEventsRequest(after_seq=s, job_id=j), timeout=STREAM_READ_S))
    for job_id in STRINGS:
        for number in U64:
            for follow in (False, True):
                req = jpb.StreamLogsRequest(job_id=job_id, attempt=number, offset=number, follow=follow,
                                            node=STRINGS[number % len(STRINGS)])
                yield f"StreamLogs({job_id[:9]!r}, {number}, follow={follow})", lambda r=req: drain(
                    jobs.StreamLogs(r, timeout=STREAM_READ_S))
    for service in (*STRINGS, SERVICE_NAMES[0]):
        yield f"Health.Watch({service[:9]!r})", lambda s=service: drain(
            health.Watch(health_pb2.HealthCheckRequest(service=s), timeout=STREAM_READ_S))
    asks = [reflection_pb2.ServerReflectionRequest(list_services=""),
            *(reflection_pb2.ServerReflectionRequest(file_by_filename=s) for s in STRINGS),
            *(reflection_pb2.ServerReflectionRequest(file_containing_symbol=s) for s in STRINGS),
            reflection_pb2.ServerReflectionRequest()]
    yield "ServerReflectionInfo(edges)", lambda: drain(reflection.ServerReflectionInfo(iter(asks),
                                                                                      timeout=STREAM_READ_S))
    for first in (apb.AgentMessage(), apb.AgentMessage(register=apb.Register(node=tpb.NodeSpec(name="x" * 5000))),
                  apb.AgentMessage(register=apb.Register(node=tpb.NodeSpec(name="")))):
        yield f"Connect({str(first)[:20]!r})", lambda f=first: drain(agents.Connect(iter([f]), timeout=STREAM_READ_S))


DRIVEN = {"halyard.v1.JobService/WatchEvents", "halyard.v1.JobService/StreamLogs",
          "grpc.health.v1.Health/Watch", "halyard.v1.AgentService/Connect"}  # and reflection, served apart


def drain(stream) -> None:
    """Read a stream until it ends, fails or its deadline passes; a failure must be a status the API documents."""
    try:
        for _ in stream:
            pass
    except grpc.RpcError as exc:
        assert exc.code() not in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL), exc.details()


def probe_everything(daemon: Daemon, channel: grpc.Channel, phase: str) -> int:
    count = 0
    for method, target, headers, body in http_probes():
        status, kind, data = request(daemon.http, method, target, body=body, headers=headers)
        assert status < 500, (phase, method, target, status, data[:200])
        if target.startswith("/api/") and status >= 400:
            assert kind.startswith("application/json") and "error" in json.loads(data), (target, data[:200])
        daemon.healthy_within(HEALTH_WITHIN_S, f"{phase}: {method} {target[:80]} {headers}")
        count += 1
    for what, call in rpc_probes(channel):
        call()
        daemon.healthy_within(HEALTH_WITHIN_S, f"{phase}: {what}")
        count += 1
    return count


def test_edge_parameters_on_every_route_and_stream_never_block_the_control_plane(tmp_path):
    assert streaming_methods() == DRIVEN  # a new streaming RPC gets its edge probes here
    assert ("GET", "/api/events") in routes() and len(routes()) >= 12
    daemon = Daemon(tmp_path)
    try:
        with grpc.insecure_channel(daemon.grpc) as channel:
            # The reproduction first: an empty log, one anonymous request.
            status, _, data = request(daemon.http, "GET", "/api/events?after=-1")
            daemon.healthy_within(HEALTH_WITHIN_S, "GET /api/events?after=-1 on an empty event log")
            assert status == 400 and b"after" in data  # a position before the first event is refused, naming it
            empty = probe_everything(daemon, channel, "empty")

            daemon.agent = subprocess.Popen([*CLI, "agent", "--control-plane", daemon.grpc, "--node", "r0-n0",
                                             "--insecure"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            stub = jgrpc.JobServiceStub(channel)
            for i in range(20):
                stub.SubmitJob(jpb.SubmitJobRequest(spec=tpb.JobSpec(
                    job_id=f"j{i}", model="resnet50", num_gpus=8 if i % 2 else 2, iterations=10**9,
                    env={"SECRET": "s3cr3t"})), timeout=WAIT_TIMEOUT_S)
            deadline = time.monotonic() + WAIT_TIMEOUT_S
            while stub.GetJob(jpb.GetJobRequest(job_id="j0")).state != tpb.RUNNING:
                assert time.monotonic() < deadline, "the agent process never started j0"
                time.sleep(0.1)
            full = probe_everything(daemon, channel, "full")
            assert empty == full and full > 250
            for path in ("/api/jobs", "/api/jobs/j0", "/api/queue", "/api/events?after=0"):
                assert b"s3cr3t" not in request(daemon.http, "GET", path)[2]  # env values stay inside
    finally:
        daemon.stop()
    assert daemon.process.returncode == 0  # it still stopped cleanly on SIGTERM
