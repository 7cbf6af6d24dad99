"""A peer that keeps presenting bad tokens is refused for a while on every surface (controlplane/token_throttle.py).

The surfaces are real: a TestCluster with a token file, its gRPC and HTTP ports on loopback. The window's
expiry is checked on the throttle itself with a stepped clock (waiting a minute in a test is not worth it).
"""

from __future__ import annotations

import signal
import subprocess
import urllib.error
import urllib.request

import aiohttp
import grpc
import pytest
from test_daemon import CLI
from test_failures import free_port
from test_http_auth import bearer, metadata

from halyard.controlplane.auth import TokenFile
from halyard.controlplane.errors import TooManyFailures
from halyard.controlplane.token_throttle import FAILED_TOKENS_LIMIT, FailedTokens, peer_host
from halyard.testing import TestCluster
from halyard.testing.cluster import small_cluster_toml
from halyard.v1 import job_service_pb2 as jpb
from halyard.v1 import job_service_pb2_grpc as jgrpc

BAD = "hy_0000000000000000_" + "x" * 43  # well formed, never issued


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_the_window_slides_and_hosts_count_apart():
    clock = Clock()
    throttle = FailedTokens(limit=3, window_s=60.0, clock=clock)
    peer = "ipv4:10.0.0.7:50001"
    reached = []
    for _ in range(3):  # at 1000, 1010, 1020 s
        reached.append(throttle.failed(peer))
        clock.t += 10.0
    clock.t -= 10.0
    assert reached == [False, False, True]  # the third reaches the limit
    with pytest.raises(TooManyFailures, match=r"3 bad tokens from 10\.0\.0\.7") as refused:
        throttle.check("ipv4:10.0.0.7:61234")  # another port of the same host: still refused
    assert refused.value.retry_after_s == pytest.approx(40.0)  # until the first leaves the window
    throttle.check("ipv4:10.0.0.8:50001")  # another host is not
    clock.t += 39.9
    with pytest.raises(TooManyFailures):
        throttle.check(peer)
    clock.t += 0.2  # the first failure left the window; two remain
    throttle.check(peer)
    throttle.failed(peer)
    with pytest.raises(TooManyFailures):
        throttle.check(peer)


def test_peer_host_strips_the_port_of_every_grpc_peer_form():
    assert peer_host("ipv4:127.0.0.1:5050") == "127.0.0.1"
    assert peer_host("ipv6:[::1]:5050") == "::1"
    assert peer_host("127.0.0.1") == "127.0.0.1"  # aiohttp's request.remote
    assert peer_host("unix:/run/halyard.sock") == "unix:/run/halyard.sock"


def test_a_throttle_without_a_positive_limit_is_refused():
    with pytest.raises(ValueError, match="must be positive"):
        FailedTokens(limit=0)


async def test_bad_tokens_over_http_lock_the_host_out_of_grpc_too_and_calls_without_tokens_never_count(tmp_path):
    file = TokenFile(tmp_path / "tokens.json")
    good, _ = file.create("olga", "operator")
    async with TestCluster(1, tokens=file.path, http="127.0.0.1:0") as tc, \
            aiohttp.ClientSession(tc.http_url) as http:
        stub = jgrpc.JobServiceStub(tc.channel)
        for _ in range(3 * FAILED_TOKENS_LIMIT):  # anonymous calls are not guesses
            async with http.get("/api/jobs") as reply:
                assert reply.status == 401
        for _ in range(FAILED_TOKENS_LIMIT):
            async with http.get("/api/jobs", headers=bearer(BAD)) as reply:
                assert reply.status == 401
        async with http.get("/api/jobs", headers=bearer(good)) as reply:  # good or bad, refused now
            assert reply.status == 429
            assert 1 <= int(reply.headers["Retry-After"]) <= 60
            assert "bad tokens from 127.0.0.1" in (await reply.json())["error"]
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.ListJobs(jpb.ListJobsRequest(), metadata=metadata(good))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "bad tokens" in err.value.details()


async def test_bad_tokens_over_grpc_are_counted_and_refused_with_resource_exhausted(tmp_path):
    file = TokenFile(tmp_path / "tokens.json")
    good, _ = file.create("olga", "operator")
    async with TestCluster(1, tokens=file.path) as tc:
        stub = jgrpc.JobServiceStub(tc.channel)
        await stub.ListJobs(jpb.ListJobsRequest(), metadata=metadata(good))
        codes = []
        for _ in range(FAILED_TOKENS_LIMIT + 1):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.ListJobs(jpb.ListJobsRequest(), metadata=metadata(BAD))
            codes.append(err.value.code())
        assert codes == [grpc.StatusCode.UNAUTHENTICATED] * FAILED_TOKENS_LIMIT + [grpc.StatusCode.RESOURCE_EXHAUSTED]


def test_the_daemons_flags_set_the_limit_and_zero_turns_it_off(tmp_path):
    """`halyard controlplane --bad-token-limit N --bad-token-window-s S`, as an operator runs it."""
    cluster = tmp_path / "c.toml"
    cluster.write_text(small_cluster_toml(1), encoding="utf-8")
    file = TokenFile(tmp_path / "tokens.json")
    file.create("olga", "operator")
    for limit, refused_after in ((2, 2), (0, None)):
        http = free_port()
        cp = subprocess.Popen([*CLI, "controlplane", "--cluster", str(cluster), "--db", str(tmp_path / f"{limit}.db"),
                               "--listen", f"127.0.0.1:{free_port()}", "--http", f"127.0.0.1:{http}",
                               "--insecure", "--tokens", str(file.path), "--bad-token-limit", str(limit),
                               "--bad-token-window-s", "600"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            assert cp.stdout.readline().decode().startswith("listening on")
            codes = [_status(f"http://127.0.0.1:{http}/api/jobs", BAD) for _ in range(4)]
            expected = [401] * 4 if refused_after is None else [401] * refused_after + [429] * (4 - refused_after)
            assert codes == expected, (limit, codes)
        finally:
            cp.send_signal(signal.SIGTERM)
            assert cp.wait(timeout=15) == 0
    refused = subprocess.run([*CLI, "controlplane", "--cluster", str(cluster), "--db", str(tmp_path / "x.db"),
                              "--insecure", "--bad-token-limit", "-1"], capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "--bad-token-limit" in refused.stderr and "got -1" in refused.stderr


def _status(url: str, token: str) -> int:
    request = urllib.request.Request(url, headers=bearer(token))
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status
    except urllib.error.HTTPError as exc:
        return exc.code
