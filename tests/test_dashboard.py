"""The web dashboard, its JSON views and /healthz over real HTTP, and the page in a real headless Chromium."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path

import aiohttp
import pytest

from halyard.controlplane.dashboard import DEFAULT_WINDOW_S, MIN_WINDOW_S
from halyard.testing import TestCluster
from halyard.testing.browser import browser_missing, headless_chromium
from halyard.v1 import cluster_service_pb2 as cpb
from halyard.v1 import cluster_service_pb2_grpc as cgrpc
from halyard.v1 import job_service_pb2 as jpb
from halyard.v1 import job_service_pb2_grpc as jgrpc
from halyard.v1 import types_pb2 as tpb

PAGE_TIMEOUT_S = 20.0


async def submit(tc: TestCluster, job_id: str, gpus: int, iterations: int, tenant: str = "default") -> jpb.Job:
    return await jgrpc.JobServiceStub(tc.channel).SubmitJob(jpb.SubmitJobRequest(
        spec=tpb.JobSpec(job_id=job_id, model="resnet50", num_gpus=gpus, iterations=iterations, tenant=tenant)))


async def get_json(session: aiohttp.ClientSession, url: str, status: int = 200) -> dict:
    async with session.get(url) as reply:
        assert reply.status == status, await reply.text()
        return await reply.json()


async def test_json_views_filter_validate_and_stream_events(tmp_path):
    async with TestCluster(2, http="127.0.0.1:0") as tc, aiohttp.ClientSession(tc.http_url) as http:
        for i, tenant in enumerate(("vision", "nlp", "vision")):
            await submit(tc, f"j{i}", 8, 200_000, tenant)
        await tc.wait_for(lambda: len(tc.control_plane.core.running) == 2)

        running = await get_json(http, "/api/jobs?state=running")
        assert sorted(j["spec"]["job_id"] for j in running["jobs"]) == ["j0", "j1"]
        assert all(j["allocation"]["nodes"] for j in running["jobs"])  # placement, as GetJob gives it
        vision = await get_json(http, "/api/jobs?tenant=vision")
        assert [j["spec"]["job_id"] for j in vision["jobs"]] == ["j2", "j0"]  # newest first
        assert vision["tenants"] == ["nlp", "vision"]
        queue = await get_json(http, "/api/queue?limit=1")
        assert [j["spec"]["job_id"] for j in queue["jobs"]] == ["j2"] and queue["total"] == 1
        why = tc.control_plane.core.wait_of(tc.job("j2"))  # the same reason GetJob gives
        assert queue["jobs"][0]["wait"] == {"code": why.code.value, "stage": why.stage, "reason": why.reason}

        cluster = await get_json(http, "/api/cluster")
        assert cluster["total_gpus"] == 16 and cluster["free_gpus"] == 0 and cluster["agents_connected"] == 2
        holders = {n["name"]: set(n["slots"]) for n in cluster["nodes"]}
        assert sorted(holders.values(), key=sorted) == [{"j0"}, {"j1"}]

        detail = await get_json(http, "/api/jobs/j0")
        assert [e["kind"] for e in detail["events"]] == ["SUBMITTED", "STARTED"]
        assert detail["events"][1]["detail"].endswith(":0,1,2,3,4,5,6,7")

        sessions = tc.control_plane.sessions.values()
        await tc.wait_for(lambda: all(s.heartbeat and s.heartbeat.gpu_utilization == 1.0 for s in sessions))
        young = await get_json(http, "/api/utilization")
        assert young["measured"][-1] == 1.0  # sampled at t=0
        assert young["window_s"] == MIN_WINDOW_S  # no window_s: the cluster's age, here under a minute
        await tc.advance(600)
        assert [j["waiting_s"] for j in (await get_json(http, "/api/queue"))["jobs"]] == [600.0]
        # Issue 33: the chart opened on 6 hours, so a 10-minute-old cluster was a sliver at its right edge.
        assert (await get_json(http, "/api/utilization"))["window_s"] == 600
        timeline = await get_json(http, "/api/utilization?window_s=1200")
        assert timeline["start"] == -600 and timeline["end"] == 600 and len(timeline["time"]) == 241
        half = len(timeline["time"]) // 2  # t = 0: every job submitted, two started
        assert timeline["gpus_busy"][half - 1:] == [0] + [16] * (half + 1)
        assert timeline["pending"][half - 1:] == [0] + [1] * (half + 1)
        assert timeline["running"][-1] == 2
        assert timeline["measured"][:half] == [None] * half and set(timeline["measured"][half:]) == {1.0}

        assert "state" in (await get_json(http, "/api/jobs?state=lost", 400))["error"]
        assert "window_s" in (await get_json(http, "/api/utilization?window_s=-1", 400))["error"]
        assert "limit" in (await get_json(http, "/api/jobs?limit=x", 400))["error"]
        assert "'nope'" in (await get_json(http, "/api/jobs/nope", 404))["error"]

        # Server-sent events resume after Last-Event-ID, then follow the log live.
        async with http.get("/api/events", headers={"Last-Event-ID": "3"}) as stream:
            assert stream.headers["Content-Type"].startswith("text/event-stream")
            first = await read_event(stream)
            assert int(first["seq"]) == 4  # uint64: a string in protobuf JSON
            await submit(tc, "live", 1, 100, "nlp")
            while (event := await read_event(stream))["job_id"] != "live":
                pass
            assert event["kind"] == "SUBMITTED"
            assert int(event["seq"]) == next(e.seq for e in tc.control_plane.core.log if e.job_id == "live")
        await tc.advance(DEFAULT_WINDOW_S)
        assert (await get_json(http, "/api/utilization"))["window_s"] == DEFAULT_WINDOW_S  # an old cluster: 6 h


async def read_event(stream: aiohttp.ClientResponse) -> dict:
    """The next ``data:`` line of a server-sent event stream, parsed."""
    while True:
        line = (await asyncio.wait_for(stream.content.readline(), PAGE_TIMEOUT_S)).decode()
        if line.startswith("data: "):
            return json.loads(line[len("data: "):])


async def test_healthz_fails_while_the_store_or_the_scheduling_loop_is_broken(tmp_path):
    from halyard.controlplane.store import SqliteStore

    db = tmp_path / "state.db"
    async with TestCluster(1, db=db, http="127.0.0.1:0") as tc, aiohttp.ClientSession(tc.http_url) as http:
        cp = tc.control_plane
        assert (await get_json(http, "/healthz"))["status"] == "ok"

        cp.store.close()  # the database is gone from under the control plane
        body = await get_json(http, "/healthz", 503)
        assert body["status"] == "unhealthy" and body["problems"][0].startswith(f"store: {db}")
        cp.store = SqliteStore(db)
        assert (await get_json(http, "/healthz"))["problems"] == []

        policy = cp.core.policy
        cp.core.policy = BrokenPolicy(policy)  # a policy bug: every pass raises
        await submit(tc, "a", 8, 100)
        await tc.wait_for(lambda: cp.pass_error is not None)
        body = await get_json(http, "/healthz", 503)
        assert body["problems"] == ["scheduler: the last scheduling pass failed: RuntimeError "
                                    "(the control plane's log has the message)"]  # no message: it may name a job
        async with http.get("/metrics") as reply:
            assert "halyard_healthy 0.0" in await reply.text()
        cp.core.policy = policy  # fixed: the next pass succeeds
        await submit(tc, "b", 8, 100)
        await tc.wait_for(lambda: tc.job("a").state.value == "RUNNING")
        assert (await get_json(http, "/healthz"))["status"] == "ok"


class BrokenPolicy:
    """The real policy with a scheduling pass that raises."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def schedule(self, view, state):
        raise RuntimeError("policy bug")


# --- the page in a real browser ---------------------------------------------------------------


def chromium():
    """Headless Chromium; the test skips, saying why, only when no browser is installed."""
    if (why := browser_missing()) is not None:
        pytest.skip(why)
    return headless_chromium()


def rows(driver, table: str) -> list[str]:
    """The job ids of a table's rows, read in one script (the page re-renders between WebDriver calls)."""
    return driver.execute_script(f"return [...document.querySelectorAll('#{table} tr')].map(r => r.dataset.jobId)")


async def until(driver, predicate, what: str) -> None:
    """Wait (in a thread, so the control plane keeps serving) until ``predicate(driver)`` holds."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(driver, PAGE_TIMEOUT_S, poll_frequency=0.05,
                         ignored_exceptions=(StaleElementReferenceException,))  # re-rendered meanwhile: try again
    await asyncio.to_thread(wait.until, predicate, what)


async def test_dashboard_in_chromium_shows_jobs_and_follows_new_ones_without_reload(tmp_path):
    driver = chromium()
    try:
        async with TestCluster(8, http="127.0.0.1:0") as tc:
            tenants = ("vision", "nlp", "speech")
            sizes, lengths = (8, 4, 2, 1, 16, 4, 2), (400_000, 3_000, 60_000)
            for i in range(14):
                await submit(tc, f"job-{i:02d}", sizes[i % 7], lengths[i % 3], tenants[i % 3])
                await tc.advance(600)
            for i in range(3):  # more than fits: a queue
                await submit(tc, f"big-{i}", 16, 100_000, "speech")
            await cgrpc.ClusterServiceStub(tc.channel).DrainNode(cpb.NodeRequest(node="r1-n3"))
            await tc.stop_agent("r1-n2")  # its jobs go back to the queue after the heartbeat timeout
            core = tc.control_plane.core
            await tc.wait_for(lambda: all("r1-n2" not in r.allocation.node_names for r in core.running.values()))
            submitted = {*(f"job-{i:02d}" for i in range(14)), *(f"big-{i}" for i in range(3))}

            await asyncio.to_thread(driver.get, tc.http_url + "/")
            await until(driver, lambda d: set(rows(d, "jobs")) == submitted, "every submitted job is listed")
            await until(driver, lambda d: "offline" in d.execute_script(
                "return document.querySelector('#map .node[data-node=\"r1-n2\"]').className"), "the lost agent shows")
            nodes = driver.execute_script(
                "return Object.fromEntries([...document.querySelectorAll('#map .node')].map(n => [n.dataset.node, "
                "{cls: n.className, jobs: [...n.querySelectorAll('.gpu')].map(g => g.dataset.job || null)}]))")
            assert "drained" in nodes["r1-n3"]["cls"] and "offline" in nodes["r1-n2"]["cls"] and len(nodes) == 8
            for record in tc.control_plane.core.running.values():  # every GPU of every running job, in its colour
                for part in record.allocation.nodes:
                    assert all(nodes[part.node]["jobs"][g] == record.job_id for g in part.gpus)
            assert set(rows(driver, "queue")) == {r.job_id for r in tc.control_plane.core.pending}
            shown = driver.execute_script("return [...document.querySelectorAll('#queue td.why')]"
                                          ".map(td => td.textContent)")
            core = tc.control_plane.core
            assert shown and all(text.startswith(core.wait_of(r).code.value) for text, r in zip(
                shown, core.pending, strict=True))  # why each queued job waits, as GetJob says
            # Issue 33: the reasons (long sentences) wrap inside the queue's card; they used to widen it and
            # the page, which then scrolled sideways.
            width = driver.execute_script(
                "const panel = document.getElementById('queue-panel').getBoundingClientRect();"
                "return {page: document.documentElement.scrollWidth, view: document.documentElement.clientWidth,"
                " panel: panel.right, cells: Math.max(...[...document.querySelectorAll('#queue td')]"
                ".map(td => td.getBoundingClientRect().right))}")
            assert width["page"] <= width["view"] and width["cells"] <= width["panel"], width

            driver.execute_script("window.halyardLoaded = 'same page'")
            await submit(tc, "late-job", 2, 1_000, "nlp")
            await until(driver, lambda d: "late-job" in rows(d, "jobs"), "the new job appears without a reload")
            await until(driver, lambda d: d.find_elements("css selector", '#events li[data-job-id="late-job"]'),
                        "its events arrive on the live stream")
            assert driver.execute_script("return window.halyardLoaded") == "same page"  # no reload happened

            from selenium.webdriver.support.ui import Select

            Select(driver.find_element("id", "tenant-filter")).select_by_value("nlp")
            expected = {j for j in (*submitted, "late-job") if tc.job(j).spec.tenant == "nlp"}
            await until(driver, lambda d: set(rows(d, "jobs")) == expected, "the tenant filter applies")

            def opened(d) -> bool:  # a click can land on a row being re-rendered: click again until it shows
                if [e.text for e in d.find_elements("id", "detail-id")] != ["late-job"]:
                    d.find_element("css selector", '#jobs tr[data-job-id="late-job"]').click()
                    return False
                return "STARTED" in d.find_element("id", "detail").text

            await until(driver, opened, "a click on the job's row shows its events")
            assert driver.find_element("id", "detail-id").text == "late-job"
            Select(driver.find_element("id", "tenant-filter")).select_by_value("")
            await until(driver, lambda d: len(rows(d, "jobs")) == len(submitted) + 1, "no filter: every job again")

            shot = tmp_path / "dashboard.png"
            assert await asyncio.to_thread(driver.save_screenshot, str(shot))
            assert shot.stat().st_size > 20_000  # a rendered page, not a blank one
            if target := os.environ.get("HALYARD_DASHBOARD_SCREENSHOT"):  # regenerates docs/img/dashboard.png
                shutil.copyfile(shot, Path(target))
            errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
            assert errors == []  # no script error, no request blocked by the Content-Security-Policy
    finally:
        await asyncio.to_thread(driver.quit)


async def test_dashboard_in_chromium_logs_in_as_a_tenant_and_shows_only_its_jobs_never_env_values(tmp_path):
    """The login form, a tenant's view, and every response the page loaded read again with its session:
    no job of another tenant, and no environment value of anyone (issue 32, defect 1)."""
    from halyard.controlplane.auth import TokenFile

    tokens = TokenFile(tmp_path / "tokens.json")
    alice, _ = tokens.create("alice", "tenant-user", "vision")
    bob, _ = tokens.create("bob", "tenant-user", "nlp")
    driver = chromium()
    try:
        async with TestCluster(4, tokens=tokens.path, http="127.0.0.1:0") as tc:
            stub = jgrpc.JobServiceStub(tc.channel)
            for i in range(6):
                token, tenant = (alice, "vision") if i % 2 == 0 else (bob, "nlp")
                secret = f"{tenant}-secret-value-{i}"
                await stub.SubmitJob(jpb.SubmitJobRequest(spec=tpb.JobSpec(
                    job_id=f"{tenant}-{i}", model="resnet50", num_gpus=8, iterations=400_000,
                    env={"HF_TOKEN": secret})), metadata=(("authorization", f"Bearer {token}"),))
            await tc.wait_for(lambda: len(tc.control_plane.core.running) == 4)
            mine = {"vision-0", "vision-2", "vision-4"}

            await asyncio.to_thread(driver.get, tc.http_url + "/")
            await until(driver, lambda d: d.current_url.endswith("/login"), "an anonymous visit goes to the login form")
            driver.find_element("id", "token").send_keys(alice)
            await asyncio.to_thread(driver.find_element("id", "login").click)  # the page loads from this loop
            await until(driver, lambda d: set(rows(d, "jobs")) == mine, "alice's jobs, and only hers, are listed")
            await until(driver, lambda d: len(d.find_elements("css selector", "#events li")) >= 3, "her events")
            events = driver.execute_script("return [...document.querySelectorAll('#events li')]"
                                           ".map(li => li.dataset.jobId)")
            assert set(events) <= mine
            slots = driver.execute_script("return [...document.querySelectorAll('#map .gpu')]"
                                          ".map(g => g.dataset.job || (g.classList.contains('other') ? '*' : ''))")
            assert {s for s in slots if s} <= mine | {"*"} and "*" in slots  # bob's GPUs: busy, nameless
            assert "alice" in driver.find_element("id", "who").text

            def opened(d) -> bool:
                if [e.text for e in d.find_elements("id", "detail-id")] != ["vision-0"]:
                    d.find_element("css selector", '#jobs tr[data-job-id="vision-0"]').click()
                    return False
                return "HF_TOKEN" in d.find_element("id", "detail").text

            await until(driver, opened, "the job's detail names its environment")
            assert "vision-secret-value-0" not in driver.find_element("tag name", "body").text

            cookies = {c["name"]: c for c in driver.get_cookies()}
            session = cookies["halyard_session"]
            assert session["httpOnly"] and session["sameSite"] == "Strict" and alice not in session["value"]
            loaded = driver.execute_script(
                "return [location.href, ...performance.getEntriesByType('resource').map(e => e.name)]")
            urls = {u for u in loaded if u.startswith(tc.http_url)} | {tc.http_url + "/api/events?after=0"}
            assert any("/api/jobs" in u for u in urls) and any("/api/cluster" in u for u in urls)
            async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http:
                for url in sorted(urls):
                    async with http.get(url, headers={"Cookie": f"halyard_session={session['value']}"}) as reply:
                        assert reply.status == 200, url
                        text = await (read_for(reply, 1.0) if reply.content_type == "text/event-stream"
                                      else reply.text())
                    assert "secret-value" not in text, url  # no env value, not even alice's own
                    assert not any(f"nlp-{i}" in text for i in (1, 3, 5)), url  # nothing of bob's
            errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
            assert errors == []

            await asyncio.to_thread(driver.find_element("id", "logout").click)
            await until(driver, lambda d: d.current_url.endswith("/login"), "logging out goes back to the form")
            await asyncio.to_thread(driver.get, tc.http_url + "/")
            assert driver.current_url.endswith("/login")  # the session is gone
    finally:
        await asyncio.to_thread(driver.quit)


async def read_for(stream: aiohttp.ClientResponse, seconds: float) -> str:
    """What an event stream sends within ``seconds``."""
    out = b""
    try:
        async with asyncio.timeout(seconds):
            async for chunk in stream.content.iter_any():
                out += chunk
    except TimeoutError:
        pass
    return out.decode()


def test_timeline_follows_allocations_preemptions_and_resizes_through_the_event_log():
    from halyard.controlplane.dashboard import Timeline, allocation_gpus
    from halyard.datamodel import Allocation, EventKind, JobState, NodeAllocation
    from halyard.scheduling.eventlog import EventLog, describe

    two_nodes = describe(Allocation((NodeAllocation("n0", (0, 1), 8, 1000), NodeAllocation("n1", (2, 3), 8, 1000))))
    assert allocation_gpus(two_nodes) == 4 and allocation_gpus("n0:5") == 1
    log = EventLog()
    steps = [  # (time, job, kind, state after, detail) -> (GPUs busy, pending, running) after it
        (0, "a", EventKind.SUBMITTED, JobState.PENDING, "", (0, 1, 0)),
        (0, "b", EventKind.SUBMITTED, JobState.PENDING, "", (0, 2, 0)),
        (10, "a", EventKind.STARTED, JobState.RUNNING, two_nodes, (4, 1, 1)),
        (20, "a", EventKind.RESIZED, JobState.RUNNING, "n0:0", (1, 1, 1)),
        (25, "a", EventKind.TIME_SHIFT, JobState.RUNNING, "0.5s", (1, 1, 1)),
        (30, "a", EventKind.PREEMPTED, JobState.PREEMPTED, "by policy", (0, 1, 0)),
        (30, "a", EventKind.REQUEUED, JobState.PENDING, "", (0, 2, 0)),
        (40, "b", EventKind.CANCELLED, JobState.CANCELLED, "", (0, 1, 0)),
        (50, "a", EventKind.STARTED, JobState.RUNNING, "n1:0,1,2", (3, 0, 1)),
        (60, "a", EventKind.COMPLETED, JobState.COMPLETED, "", (0, 0, 0)),
    ]
    timeline = Timeline()
    for t, job, kind, state, detail, expected in steps:
        timeline.update([log.append(t, job, kind, state, detail)])
        point = timeline.sample(t, t, points=1)[-1]
        assert (point.gpus_busy, point.pending, point.running) == expected, (t, kind)
    assert [(p.time, p.gpus_busy) for p in timeline.sample(-10, 60, points=7)] == [
        (-10, 0), (0, 0), (10, 4), (20, 1), (30, 0), (40, 0), (50, 3), (60, 0)]
