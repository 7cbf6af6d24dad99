"""Process backend safety (issue 16, item 4): every path stays under --work-dir; jobs can run unprivileged.

The agent is driven with Launch messages directly, as a control plane that does not
check job ids (an old one, or an impostor) would send them. On the main before this
change, ``../../escape`` made a checkpoint directory outside the work directory.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from halyard.agent.joblogs import read_log
from halyard.agent.process import ProcessAgent, RunAs
from halyard.clock import ManualClock
from halyard.datamodel import ValidationError, parse_cluster
from halyard.testing.cluster import WAIT_TIMEOUT_S, small_cluster_toml
from halyard.v1 import agent_service_pb2 as apb
from halyard.v1 import types_pb2 as tpb


def make_agent(work_dir: Path, **kw) -> ProcessAgent:
    agent = ProcessAgent("127.0.0.1:1", "r0-n0", work_dir=work_dir, **kw)
    agent.cluster = parse_cluster(small_cluster_toml(1), source="<test>")
    agent.clock = ManualClock(0.0)
    return agent


def launch(job_id: str, command: list[str], spec_id: str | None = None) -> apb.Launch:
    spec = tpb.JobSpec(job_id=job_id if spec_id is None else spec_id, model="resnet50", num_gpus=1, iterations=10,
                       command=command)
    allocation = tpb.Allocation(nodes=[tpb.NodeAllocation(node="r0-n0", gpus=[0], cpus=1, memory_mb=1000)])
    return apb.Launch(job_id=job_id, attempt=1, spec=spec, allocation=allocation, leader=True, iterations_total=10)


def exits(agent: ProcessAgent) -> dict[str, apb.Exited]:
    return {e.job_id: e for e in agent.pending_exits()}


async def wait_exit(agent: ProcessAgent, job_id: str, timeout: float = WAIT_TIMEOUT_S) -> apb.Exited:
    deadline = asyncio.get_running_loop().time() + timeout
    while job_id not in exits(agent):
        assert asyncio.get_running_loop().time() < deadline, f"{job_id} did not exit"
        await asyncio.sleep(0.01)
    return exits(agent)[job_id]


@pytest.mark.parametrize("job_id", ["../../escape", "/tmp/abs-escape", "a/../../escape", "..", "\x1b[2Jx", "a\0b",
                                    "x" * 3000])
async def test_a_launch_whose_id_would_leave_the_work_dir_is_refused(tmp_path, job_id):
    work = tmp_path / "deep" / "work"
    agent = make_agent(work)
    agent.on_launch(launch(job_id, ["true"]))
    exited = await wait_exit(agent, job_id)
    assert exited.status == apb.EXIT_FAILED and "launch refused" in exited.message and "job_id" in exited.message
    assert not agent.jobs
    made = {p.relative_to(tmp_path) for p in tmp_path.rglob("*")}
    assert made <= {Path("deep")} | {Path("deep/work")}, made  # nothing anywhere, least of all outside
    assert not Path("/tmp/abs-escape").exists()


async def test_a_launch_whose_spec_names_another_job_is_refused(tmp_path):
    agent = make_agent(tmp_path / "work")
    agent.on_launch(launch("mine", ["true"], spec_id="other"))
    exited = await wait_exit(agent, "mine")
    assert exited.status == apb.EXIT_FAILED and "launch.spec" in exited.message


async def test_a_planted_link_in_the_work_dir_is_not_followed(tmp_path):
    work, outside = tmp_path / "work", tmp_path / "outside"
    (work / "checkpoints").mkdir(parents=True)
    (work / "logs").mkdir()
    outside.mkdir()
    (work / "checkpoints" / "linked").symlink_to(outside)  # what a job running as the agent's user could plant
    (work / "logs" / "logged-1-r0-n0.log").symlink_to(outside / "victim")
    agent = make_agent(work)
    agent.on_launch(launch("linked", ["true"]))
    agent.on_launch(launch("logged", ["true"]))
    for job_id in ("linked", "logged"):
        exited = await wait_exit(agent, job_id)
        assert exited.status == apb.EXIT_FAILED and "leaves the work directory" in exited.message, exited.message
    assert list(outside.iterdir()) == []


def test_run_as_refuses_root_and_unknown_users():
    with pytest.raises(ValidationError, match="must not run as root"):
        RunAs.lookup("root")
    with pytest.raises(ValidationError, match="no user"):
        RunAs.lookup("no-such-user-halyard")


@pytest.mark.skipif(os.geteuid() != 0, reason="starting a job as another user needs root")
async def test_jobs_run_as_the_configured_unprivileged_user():
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user 'nobody' on this machine")
    base = Path(tempfile.mkdtemp(prefix="halyard-runas-"))  # not under pytest's 0700 tmp: nobody must reach it
    try:
        base.chmod(0o755)
        agent = make_agent(base / "work", run_as="nobody")
        agent.on_launch(launch("who", ["sh", "-c", 'id -u > "$HALYARD_CHECKPOINT_DIR/uid"; touch /root/.halyard-x']))
        await wait_exit(agent, "who")
        assert (base / "work" / "checkpoints" / "who" / "uid").read_text().strip() == str(nobody.pw_uid)
        assert not Path("/root/.halyard-x").exists()  # it could not write where its user may not
        log = (base / "work" / "logs" / "who-1-r0-n0.log").read_text()
        assert "Permission denied" in log
        await agent.stop_jobs()
    finally:
        shutil.rmtree(base, ignore_errors=True)


# --- every file the agent writes (issue 32, defect 5): no link under the work dir is followed --------------

LOG = "logs/$HALYARD_JOB_ID-$HALYARD_ATTEMPT-$HALYARD_NODE.log"
PRINT_PAST_THE_CAP = "i=0; while [ $i -lt 400 ]; do echo line-$i-of-output; i=$((i+1)); done"  # ~8 KB


def planted(tmp_path: Path) -> tuple[Path, Path, Path]:
    work, outside = tmp_path / "work", tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim"
    victim.write_text("precious")
    return work, outside, victim


def untouched(outside: Path, victim: Path) -> None:
    assert victim.read_text() == "precious"
    assert sorted(p.name for p in outside.iterdir()) == ["victim"], list(outside.iterdir())


@pytest.mark.parametrize("suffix", [".dropped", ".partial", ".dropped.partial"])
async def test_a_link_planted_beside_the_log_is_replaced_never_written_through(tmp_path, suffix):
    """The job links ``LOG<suffix>`` to a file outside the work dir, then prints past --log-max-mb: on the main
    before this change the agent wrote the dropped count into the victim (``.dropped``)."""
    work, outside, victim = planted(tmp_path)
    agent = make_agent(work, log_max_bytes=1024)
    script = f'ln -s "$VICTIM" "{LOG}{suffix}" && {PRINT_PAST_THE_CAP}; exit 3'
    body = launch("planter", ["sh", "-c", script])
    body.spec.env["VICTIM"] = str(victim)
    agent.on_launch(body)
    exited = await wait_exit(agent, "planter")
    assert "exit code 3" in exited.message and "line-399-of-output" in exited.message, exited.message
    untouched(outside, victim)
    log = work / "logs" / "planter-1-r0-n0.log"
    assert not log.is_symlink() and log.stat().st_size <= 1024
    dropped = log.with_name(log.name + ".dropped")
    assert not dropped.is_symlink() and int(dropped.read_text()) > 0  # the count went where it belongs
    start, data = read_log(log, 0)  # and a reader still gets the newest output at the right offsets
    assert start == int(dropped.read_text()) and data.endswith(b"line-399-of-output\n")


async def test_a_log_directory_swapped_for_a_link_is_not_followed(tmp_path):
    """The job moves ``logs`` away and links it to a directory outside, then prints past the cap: the agent
    keeps writing into the directory it opened (on the main before this change its trim wrote outside)."""
    work, outside, victim = planted(tmp_path)
    agent = make_agent(work, log_max_bytes=1024)
    bait = outside / "swapper-1-r0-n0.log"  # what the agent's trim would read, replace and count beside
    script = f'mv logs logs.moved && ln -s "$OUTSIDE" logs && : > "$OUTSIDE/{bait.name}" && {PRINT_PAST_THE_CAP}'
    body = launch("swapper", ["sh", "-c", script])
    body.spec.env["OUTSIDE"] = str(outside)
    agent.on_launch(body)
    await wait_exit(agent, "swapper")
    assert victim.read_text() == "precious" and bait.read_bytes() == b""
    assert sorted(p.name for p in outside.iterdir()) == [bait.name, "victim"]
    kept = work / "logs.moved" / "swapper-1-r0-n0.log"
    assert kept.read_bytes().endswith(b"line-399-of-output\n")


async def test_a_failed_jobs_last_words_are_not_read_through_a_link(tmp_path):
    """The job replaces its own log with a link to a file outside, then fails: its Exited.message (shown to its
    tenant) carries its own output, never the linked file's (the main before this change read through it)."""
    work, outside, victim = planted(tmp_path)
    victim.write_text("precious")
    agent = make_agent(work)
    script = f'echo my-own-words; rm -f "{LOG}"; ln -s "$VICTIM" "{LOG}"; exit 1'
    body = launch("reader", ["sh", "-c", script])
    body.spec.env["VICTIM"] = str(victim)
    agent.on_launch(body)
    exited = await wait_exit(agent, "reader")
    assert exited.status == apb.EXIT_FAILED and "precious" not in exited.message, exited.message
    untouched(outside, victim)
    answer = await read_log_answer(agent, "reader")
    assert b"precious" not in answer.data


async def read_log_answer(agent: ProcessAgent, job_id: str) -> apb.LogData:
    sent: list[apb.AgentMessage] = []
    agent.send = lambda msg, keep: sent.append(msg)  # what the agent would put on its stream
    agent.on_read_log(apb.ReadLog(request_id=1, job_id=job_id, attempt=1, max_bytes=1 << 16))
    return sent[-1].log_data


async def test_a_checkpoint_directory_linked_outside_meanwhile_is_not_followed(tmp_path):
    """A link planted where the next attempt's checkpoint directory goes (after the path check) is not made
    or chowned through: the agent walks to it by directory descriptors that follow no link."""
    work, outside, victim = planted(tmp_path)
    agent = make_agent(work)
    original = agent.inside_work_dir

    def plant_after_check(*parts: str) -> Path:
        path = original(*parts)
        if parts == ("checkpoints", "late"):  # the check passed; now the job's link appears
            (work / "checkpoints").mkdir(parents=True, exist_ok=True)
            if not (work / "checkpoints" / "late").is_symlink():
                (work / "checkpoints" / "late").symlink_to(outside)
        return path

    agent.inside_work_dir = plant_after_check
    agent.on_launch(launch("late", ["sh", "-c", 'echo hi > "$HALYARD_CHECKPOINT_DIR/x"']))
    exited = await wait_exit(agent, "late")
    assert exited.status == apb.EXIT_FAILED and "cannot prepare the job's files" in exited.message, exited.message
    untouched(outside, victim)


# --- the job's environment (issue 32, defect 6) ---------------------------------------------------------

async def test_a_job_gets_an_allow_list_of_the_agents_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "agent-secret-1")
    monkeypatch.setenv("HALYARD_TOKEN", "agent-secret-2")  # the agent's own credentials are never a job's
    monkeypatch.setenv("MASTER_ADDR", "agent-secret-3")  # nor its rendezvous: the agent sets the job's
    monkeypatch.setenv("LC_TIME", "C")
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "eth9")
    monkeypatch.setenv("SITE_SCRATCH", "/scratch")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")  # the agent's view: a job sees its allocation's only
    work = tmp_path / "work"
    agent = make_agent(work, pass_env=("SITE_*",))
    body = launch("envy", ["sh", "-c", 'env > "$HALYARD_CHECKPOINT_DIR/env"'])
    body.spec.env["MY_OWN"] = "mine"
    agent.on_launch(body)
    exited = await wait_exit(agent, "envy")
    assert exited.status == apb.EXIT_COMPLETED or "before its last iteration" in exited.message, exited.message
    env = dict(line.split("=", 1) for line in (work / "checkpoints" / "envy" / "env").read_text().splitlines()
               if "=" in line)
    assert "agent-secret" not in (work / "checkpoints" / "envy" / "env").read_text()
    assert "AWS_SECRET_ACCESS_KEY" not in env and "HALYARD_TOKEN" not in env and "CUDA_VISIBLE_DEVICES" not in env
    assert env["PATH"] == os.environ["PATH"] and env["LC_TIME"] == "C" and env["NCCL_SOCKET_IFNAME"] == "eth9"
    assert env["SITE_SCRATCH"] == "/scratch"  # passed on by the operator (--pass-env SITE_*)
    assert env["MY_OWN"] == "mine" and env["HALYARD_JOB_ID"] == "envy"
    assert env["MASTER_ADDR"] == "r0-n0" and env["RANK"] == "0" and env["LOCAL_RANK"] == "0"


WORKER_SAYS_NAN = r'''
import json, os, socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ["HALYARD_AGENT_SOCKET"])
say = lambda **m: s.sendall((json.dumps(m) + "\n").encode())
say(type="hello", job_id=os.environ["HALYARD_JOB_ID"], attempt=int(os.environ["HALYARD_ATTEMPT"]))
say(type="iteration", index=5, duration_s=float("nan"))   # json writes NaN; the agent refuses this message
say(type="iteration", index=float("inf"), duration_s=0.5)
say(type="iteration", index=10, duration_s=0.25)          # and takes the next
go = os.path.join(os.environ["HALYARD_CHECKPOINT_DIR"], "go")
while not os.path.exists(go):
    time.sleep(0.01)
say(type="done", iterations=10)
'''


async def test_a_workers_non_finite_numbers_are_refused_and_the_next_report_taken(tmp_path):
    """What a job's worker reports is range-checked at the agent: a NaN or an infinity is refused (on the
    main before this change it went into Progress, which the control plane then refused whole, every time)."""
    work = tmp_path / "work"
    agent = make_agent(work)
    await agent.serve_workers()
    agent.on_launch(launch("nan", [sys.executable, "-c", WORKER_SAYS_NAN]))
    deadline = asyncio.get_running_loop().time() + WAIT_TIMEOUT_S
    while not (agent.jobs.get("nan") and agent.jobs["nan"].iterations_done == 10):
        assert asyncio.get_running_loop().time() < deadline and "nan" not in exits(agent), exits(agent)
        await asyncio.sleep(0.01)
    (report,) = agent.progress_reports(0.0)
    assert list(report.recent_iteration_s) == [0.25] and report.iterations_done == 10
    (work / "checkpoints" / "nan" / "go").touch()
    try:
        assert (await wait_exit(agent, "nan")).status == apb.EXIT_COMPLETED
    finally:
        await agent.stop_jobs()
