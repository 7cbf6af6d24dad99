"""The HTTP port answers to the gRPC API's identities (issue 32, defect 1 and item 6).

A real control plane (TestCluster: real gRPC and HTTP sockets on loopback) with a token
file; tenants submit jobs with secrets in their environment over gRPC; the HTTP API,
the dashboard's login, gRPC GetJob/ListJobs/WatchEvents and reflection are then asked
by anonymous callers, by another tenant, by an operator and by a page on another Host.
"""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import grpc
import pytest
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from test_daemon import cli

from halyard.controlplane.auth import TokenFile
from halyard.testing import TestCluster
from halyard.v1 import job_service_pb2 as jpb
from halyard.v1 import job_service_pb2_grpc as jgrpc
from halyard.v1 import types_pb2 as tpb

ALICE_SECRET = "hf_secret_123_alice"  # a test value that must never come back
BOB_SECRET = "bob_value_456_private"
ALICE_JOB, BOB_JOB = "alice-train-7f3", "bob-train-9c1"
API_ROUTES = ("/api/session", "/api/cluster", "/api/jobs", f"/api/jobs/{ALICE_JOB}", "/api/queue",
              "/api/utilization", "/api/events")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def metadata(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


async def submit(tc: TestCluster, token: str, job_id: str, env: dict[str, str], gpus: int = 8) -> None:
    await jgrpc.JobServiceStub(tc.channel).SubmitJob(jpb.SubmitJobRequest(spec=tpb.JobSpec(
        job_id=job_id, model="resnet50", num_gpus=gpus, iterations=10_000_000, env=env)), metadata=metadata(token))


async def body(http: aiohttp.ClientSession, path: str, headers: dict[str, str], status: int = 200) -> str:
    """A route's answer; an event stream is read for what it has now (until quiet)."""
    async with http.get(path, headers=headers) as reply:
        if reply.content_type == "text/event-stream":
            assert reply.status == status
            return await read_stream(reply, 0.5)
        text = await reply.text()
        assert reply.status == status, (path, reply.status, text)
        return text


async def read_stream(reply: aiohttp.ClientResponse, quiet_s: float) -> str:
    out = []
    while True:
        try:
            line = await asyncio.wait_for(reply.content.readline(), quiet_s)
        except TimeoutError:
            return "".join(out)
        if not line:
            return "".join(out)
        out.append(line.decode())


def stream_jobs(text: str) -> list[str]:
    return [json.loads(line[len("data: "):])["job_id"] for line in text.splitlines() if line.startswith("data: ")]


@pytest.fixture
def tokens(tmp_path) -> tuple[TokenFile, str, str, str]:
    file = TokenFile(tmp_path / "tokens.json")
    alice, _ = file.create("alice", "tenant-user", "team-a")
    bob, _ = file.create("bob", "tenant-user", "team-b")
    ops, _ = file.create("olga", "operator")
    return file, alice, bob, ops


async def test_http_api_needs_a_token_shows_tenants_their_own_jobs_and_never_env_values(tokens):
    file, alice, bob, ops = tokens
    async with TestCluster(2, tokens=file.path, http="127.0.0.1:0") as tc, \
            aiohttp.ClientSession(tc.http_url) as http:
        await submit(tc, alice, ALICE_JOB, {"HF_TOKEN": ALICE_SECRET, "LR": "0.1"})
        await submit(tc, bob, BOB_JOB, {"B_SECRET": BOB_SECRET})
        await tc.wait_for(lambda: len(tc.control_plane.core.running) == 2)

        # The reproduction: another Host (DNS rebinding), even with a valid token, is refused.
        async with http.get(f"/api/jobs/{ALICE_JOB}", headers={"Host": "attacker.example", **bearer(alice)}) as r:
            assert r.status == 421 and ALICE_SECRET not in await r.text()
        for path in API_ROUTES:  # no credentials: nothing
            text = await body(http, path, {}, 401)
            assert ALICE_JOB not in text and "log in" in text
        async with http.get("/api/jobs", headers=bearer("hy_nope_nope")) as unknown:
            assert unknown.status == 401 and unknown.headers["WWW-Authenticate"] == "Bearer"

        seen = {}
        for name, token in (("alice", alice), ("bob", bob), ("olga", ops)):
            seen[name] = {path: await body(http, path, bearer(token), 403 if (
                name == "bob" and path.endswith(ALICE_JOB)) else 200) for path in API_ROUTES}
        for name, pages in seen.items():
            everything = "".join(pages.values())
            assert ALICE_SECRET not in everything and BOB_SECRET not in everything, name  # never a value
        alice_sees = "".join(seen["alice"].values())
        assert BOB_JOB not in alice_sees and "B_SECRET" not in alice_sees  # not even the other tenant's names
        assert stream_jobs(seen["alice"]["/api/events"]) == [ALICE_JOB, ALICE_JOB]  # SUBMITTED, STARTED
        jobs = json.loads(seen["alice"]["/api/jobs"])
        assert [j["spec"]["job_id"] for j in jobs["jobs"]] == [ALICE_JOB] and jobs["tenants"] == ["team-a"]
        assert jobs["jobs"][0]["env_names"] == ["HF_TOKEN", "LR"] and jobs["jobs"][0]["spec"]["env"] == {}
        slots = {s for n in json.loads(seen["alice"]["/api/cluster"])["nodes"] for s in n["slots"]}
        assert slots == {ALICE_JOB, ""}  # bob's GPUs are busy, without his job's name
        assert json.loads(seen["alice"]["/api/session"])["tenant"] == "team-a"
        assert "another tenant" in seen["bob"][f"/api/jobs/{ALICE_JOB}"]
        assert "field 'tenant'" in await body(http, "/api/jobs?tenant=team-b", bearer(alice), 403)
        olga = json.loads(seen["olga"]["/api/jobs"])
        assert {j["spec"]["job_id"] for j in olga["jobs"]} == {ALICE_JOB, BOB_JOB}  # an operator sees all
        assert sorted(stream_jobs(seen["olga"]["/api/events"])) == sorted([ALICE_JOB, ALICE_JOB, BOB_JOB, BOB_JOB])

        # /healthz and /metrics stay open for probes and Prometheus, with no job names.
        for path in ("/healthz", "/metrics"):
            text = await body(http, path, {})
            assert ALICE_JOB not in text and BOB_JOB not in text and ALICE_SECRET not in text

        # gRPC: GetJob, ListJobs, SubmitJob's answer and WatchEvents carry names only.
        stub = jgrpc.JobServiceStub(tc.channel)
        got = await stub.GetJob(jpb.GetJobRequest(job_id=ALICE_JOB), metadata=metadata(alice))
        assert dict(got.spec.env) == {} and list(got.env_names) == ["HF_TOKEN", "LR"]
        listed = await stub.ListJobs(jpb.ListJobsRequest(), metadata=metadata(ops))
        assert ALICE_SECRET.encode() not in listed.SerializeToString() and len(listed.jobs) == 2
        async for event in stub.WatchEvents(jpb.WatchEventsRequest(), metadata=metadata(ops), timeout=1.0):
            assert ALICE_SECRET not in str(event)
            if event.seq == 4:
                break
        assert dict(tc.job(ALICE_JOB).spec.env)["HF_TOKEN"] == ALICE_SECRET  # the agent still gets it


async def test_http_refuses_a_revoked_or_expired_token_and_grpc_says_it_expired(tokens):
    file, alice, _, _ = tokens
    short, _ = file.create("shortlived", "tenant-user", "team-a", expires_in_s=3600.0)
    async with TestCluster(1, tokens=file.path, http="127.0.0.1:0") as tc, \
            aiohttp.ClientSession(tc.http_url) as http:
        await body(http, "/api/jobs", bearer(short))
        stub = jgrpc.JobServiceStub(tc.channel)
        await stub.ListJobs(jpb.ListJobsRequest(), metadata=metadata(short))
        expire(file, "shortlived")  # an hour later
        assert "expired" in await body(http, "/api/jobs", bearer(short), 401)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.ListJobs(jpb.ListJobsRequest(), metadata=metadata(short))
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED and "expired" in err.value.details()
        await stub.ListJobs(jpb.ListJobsRequest(), metadata=metadata(alice))  # tokens without expiry still work


def expire(file: TokenFile, name: str) -> None:
    """Move a token's expiry into the past, as the passing of time would."""
    data = json.loads(file.path.read_text())
    for row in data["tokens"]:
        if row["name"] == name:
            row["expires"] = time.time() - 1
    file.path.write_text(json.dumps(data))


async def test_login_form_opens_a_strict_http_only_session_with_csrf_on_login_and_logout(tokens):
    file, alice, _, _ = tokens
    async with TestCluster(1, tokens=file.path, http="127.0.0.1:0") as tc, \
            aiohttp.ClientSession(tc.http_url, cookie_jar=aiohttp.DummyCookieJar()) as http:
        async with http.get("/", allow_redirects=False) as page:
            assert page.status == 303 and page.headers["Location"] == "/login"  # no session: the login form
        async with http.get("/login") as form:
            login_cookie = form.cookies["halyard_login"]
            csrf = login_cookie.value
            assert 'name="csrf"' in await form.text() and login_cookie["httponly"]
        cookie = {"Cookie": f"halyard_login={csrf}"}
        for headers, data in [  # a forged form: no CSRF token, a wrong one, or from another origin
                (cookie, {"token": alice}), (cookie, {"token": alice, "csrf": "guess"}),
                ({**cookie, "Origin": "http://attacker.example"}, {"token": alice, "csrf": csrf}),
                ({}, {"token": alice, "csrf": csrf})]:
            async with http.post("/login", data=data, headers=headers, allow_redirects=False) as refused:
                assert refused.status == 403 and "halyard_session" not in refused.cookies
        async with http.post("/login", data={"token": "hy_abc_wrong", "csrf": csrf}, headers=cookie,
                             allow_redirects=False) as wrong:
            assert wrong.status == 401 and "unknown or revoked token" in await wrong.text()
        async with http.post("/login", data={"token": alice, "csrf": csrf}, headers=cookie,
                             allow_redirects=False) as ok:
            assert ok.status == 303 and ok.headers["Location"] == "/"
            session = ok.cookies["halyard_session"]
            assert session["httponly"] and session["samesite"] == "Strict" and session["path"] == "/"
            assert alice not in session.value  # the token stays on the server
        me = {"Cookie": f"halyard_session={session.value}"}
        who = json.loads(await body(http, "/api/session", me))
        assert (who["name"], who["tenant"], who["insecure"]) == ("alice", "team-a", False) and who["csrf"]
        async with http.post("/logout", data={"csrf": "guess"}, headers=me, allow_redirects=False) as forged:
            assert forged.status == 403
        await body(http, "/api/jobs", me)  # a forged logout did nothing
        async with http.post("/logout", data={"csrf": who["csrf"]}, headers=me, allow_redirects=False) as out:
            assert out.status == 303 and out.headers["Location"] == "/login"
        assert "log in" in await body(http, "/api/jobs", me, 401)

        # Revoking the token ends its sessions on their next request.
        async with http.post("/login", data={"token": alice, "csrf": csrf}, headers=cookie,
                             allow_redirects=False) as again:
            me = {"Cookie": f"halyard_session={again.cookies['halyard_session'].value}"}
        await body(http, "/api/jobs", me)
        file.revoke("alice")
        assert "revoked" in await body(http, "/api/jobs", me, 401)


async def test_insecure_mode_without_tokens_keeps_the_port_open_and_says_so():
    async with TestCluster(1, http="127.0.0.1:0") as tc, aiohttp.ClientSession(tc.http_url) as http:
        who = json.loads(await body(http, "/api/session", {}))
        assert who["insecure"] is True and who["role"] == "operator"
        async with http.get("/login", allow_redirects=False) as login:
            assert login.status == 303  # nothing to log in with
        async with http.get("/", headers={"Host": "rebound.attacker.example:80"}) as rebound:
            assert rebound.status == 421  # the Host check holds in insecure mode too
        async with http.get("/healthz", headers={"Host": "localhost"}) as local:
            assert local.status == 200


async def test_reflection_answers_only_callers_with_credentials(tokens):
    file, alice, _, _ = tokens
    async with TestCluster(1, tokens=file.path) as tc:
        stub = reflection_pb2_grpc.ServerReflectionStub(tc.channel)
        ask = reflection_pb2.ServerReflectionRequest(list_services="")
        # No request written: the refusal comes from the call's metadata alone. (Writing one races the refusal: the
        # client's write can fail first and the call then ends INTERNAL on the client, whatever the server said.)
        refused = stub.ServerReflectionInfo()
        async with asyncio.timeout(10):
            assert await refused.code() == grpc.StatusCode.UNAUTHENTICATED
        async for reply in stub.ServerReflectionInfo(iter([ask]), metadata=metadata(alice)):
            names = {s.name for s in reply.list_services_response.service}
            assert "halyard.v1.JobService" in names


def test_tokens_expire_old_files_never_do_and_the_list_says_which(tmp_path):
    path = tmp_path / "tokens.json"
    old = {"tokens": [{"id": "0123456789ab", "name": "legacy", "role": "operator", "tenant": "",
                       "sha256": "0" * 64, "created": 1.0}]}  # a file written before expiries
    path.write_text(json.dumps(old))
    assert TokenFile(path).entries()[0].expires is None
    made = cli("tokens", "create", "--file", str(path), "--name", "temp", "--role", "operator",
               "--expires-in", "12h", env={})
    assert made.returncode == 0 and made.stdout.startswith("hy_"), made.stderr
    cli("tokens", "create", "--file", str(path), "--name", "gone", "--role", "operator", "--expires-in", "30d",
        env={})
    expire(TokenFile(path), "gone")
    listed = {line.split()[1]: line for line in cli("tokens", "list", "--file", str(path), env={}).stdout.splitlines()}
    assert "expire" not in listed["legacy"].lower()
    assert " expires " in listed["temp"] and "EXPIRED" in listed["gone"]
    for bad in ("0d", "12", "-3h", "forever", "11000d"):
        refused = cli("tokens", "create", "--file", str(path), "--name", "x", "--role", "operator",
                      "--expires-in", bad, env={})
        assert refused.returncode == 2 and "--expires-in" in refused.stderr, (bad, refused.stderr)
    assert json.loads(path.read_text())["tokens"][0] == old["tokens"][0]  # old entries are kept as they were



def test_the_http_port_binds_loopback_unless_told_and_knows_its_host_names():
    from halyard.controlplane.websession import allowed_hosts, host_name, http_listen

    assert http_listen("9090") == http_listen(":9090") == "127.0.0.1:9090"  # never every interface by default
    assert http_listen("0.0.0.0:9090") == "0.0.0.0:9090" and http_listen("[::1]:9090") == "[::1]:9090"
    assert allowed_hosts("127.0.0.1:9090") == {"localhost", "127.0.0.1", "::1"}
    assert allowed_hosts("10.0.0.5:9090") == {"10.0.0.5"}  # no loopback names for another address
    assert allowed_hosts("0.0.0.0:9090", ["Halyard.Example.org."]) == {"localhost", "127.0.0.1", "::1",
                                                                      "halyard.example.org"}
    assert [host_name(h) for h in ("LOCALHOST:80", "[::1]:9090", "::1", "a.example.", "127.000.0.1")] == [
        "localhost", "::1", "::1", "a.example", "127.000.0.1"]  # not an address: a name, refused unless given


async def test_a_reason_to_wait_does_not_name_another_tenants_job(tokens):
    """FIFO without backfilling (YARN-CS) says a job waits "behind J": to J's tenant and operators only."""
    file, alice, bob, ops = tokens
    async with TestCluster(1, policy="yarn-cs", tokens=file.path, http="127.0.0.1:0") as tc, \
            aiohttp.ClientSession(tc.http_url) as http:
        await submit(tc, bob, "bob-running", {}, gpus=4)
        await submit(tc, bob, "bob-head", {})
        await submit(tc, alice, "alice-waits", {}, gpus=1)
        await tc.wait_for(lambda: tc.control_plane.core.wait_of(tc.job("alice-waits")) is not None)
        assert "bob-head" in tc.control_plane.core.wait_of(tc.job("alice-waits")).reason
        stub = jgrpc.JobServiceStub(tc.channel)
        mine = await stub.GetJob(jpb.GetJobRequest(job_id="alice-waits"), metadata=metadata(alice))
        assert mine.wait.reason == "behind a job of another tenant, which cannot start (no backfilling)"
        listed = await stub.ListJobs(jpb.ListJobsRequest(), metadata=metadata(alice))
        assert "bob-" not in str(listed)
        for path in ("/api/jobs", "/api/queue", "/api/jobs/alice-waits"):
            assert "bob-" not in await body(http, path, bearer(alice)), path
        seen = await stub.GetJob(jpb.GetJobRequest(job_id="alice-waits"), metadata=metadata(ops))
        assert "bob-head" in seen.wait.reason  # an operator sees every job, so every name
