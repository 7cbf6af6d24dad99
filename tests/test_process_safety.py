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
import tempfile
from pathlib import Path

import pytest

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
