"""`halyard logs`: a job's output read from its node's agent through the control plane (issue 18, item 3)."""

from __future__ import annotations

import asyncio
import os
import sys

import grpc
import pytest
from worlds import World, train_spec

from halyard.agent.joblogs import CappedLog, read_log
from halyard.controlplane.auth import TokenFile
from halyard.datamodel import JobState
from halyard.testing import TestCluster
from halyard.v1 import job_service_pb2 as jpb
from halyard.v1 import job_service_pb2_grpc as jgrpc
from halyard.v1 import types_pb2 as tpb

LINES = 30
# Prints LINES numbered lines, a few to stderr, over about 2.5 s (longer than `halyard logs` takes to
# start, so it follows a running job); exits 3 (it is not a worker).
CHATTY = [sys.executable, "-u", "-c",
          "import sys, time\n"
          f"for i in range({LINES}):\n"
          "    print(f'line {i}', file=sys.stderr if i % 10 == 9 else sys.stdout, flush=True)\n"
          "    time.sleep(0.08)\n"
          "sys.exit(3)\n"]


async def halyard_logs(world: World, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "halyard.cli", "logs", *args, "--insecure", "--control-plane", world.server.address,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=os.environ | {"HALYARD_TOKEN": ""})
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode, out.decode(), err.decode()


async def test_logs_follows_a_process_job_and_prints_all_its_output(tmp_path):
    async with World("process", tmp_path) as w:
        await w.submit(train_spec("chatty", 10, command=CHATTY))
        await w.wait_for(lambda: w.job("chatty").state is JobState.RUNNING)
        await w.wait_for(lambda: (tmp_path / "logs" / "chatty-1-r0-n0.log").exists())
        code, followed, err = await halyard_logs(w, "chatty", "--follow")
        # --follow returns once the attempt has ended, with everything it printed, stderr included
        assert code == 0, err
        assert followed.splitlines() == [f"line {i}" for i in range(LINES)]
        await w.wait_for(lambda: w.job("chatty").state is JobState.FAILED)
        code, again, _ = await halyard_logs(w, "chatty", "--attempt", "1")
        assert code == 0 and again == followed  # after the end: the same output, from the file the agent kept
        code, _, err = await halyard_logs(w, "chatty", "--attempt", "2")
        assert code == 4 and "field 'attempt'" in err and "attempts 1 to 1" in err and "Traceback" not in err
        code, _, err = await halyard_logs(w, "nosuchjob")
        assert code == 4 and "NOT_FOUND" in err


async def test_the_size_cap_keeps_the_newest_output_and_says_what_was_dropped(tmp_path):
    async with World("process", tmp_path) as w:
        w.agents["r0-n0"].log_max_bytes = 4096
        spam = [sys.executable, "-c", "for i in range(2000): print(f'row {i:05d}')\nraise SystemExit(1)"]
        await w.submit(train_spec("spam", 10, command=spam))
        await w.wait_for(lambda: w.job("spam").state is JobState.FAILED)
        code, out, err = await halyard_logs(w, "spam")
    assert code == 0
    assert (tmp_path / "logs" / "spam-1-r0-n0.log").stat().st_size <= 4096
    assert out.endswith("row 01999\n") and "row 00000" not in out  # the tail is what a failed job needs
    assert "bytes of output before this were dropped" in err
    dropped = int(err.split("[halyard: ")[1].split()[0])
    assert dropped + len(out) == 2000 * len("row 00000\n")  # offsets count every byte ever written


def test_capped_log_offsets_survive_trimming(tmp_path):
    path = tmp_path / "a.log"
    log = CappedLog(path, max_bytes=100)
    for i in range(30):
        log.write(f"{i:09d}\n".encode())  # 10 bytes each: 300 in all
    log.close()
    assert log.written == 300 and path.stat().st_size <= 100
    start, data = read_log(path, 0)
    assert start == log.dropped and start + len(data) == 300 and data.endswith(b"000000029\n")
    assert read_log(path, 290) == (290, b"000000029\n")
    assert read_log(path, 300) == (300, b"")
    with pytest.raises(FileNotFoundError):
        read_log(tmp_path / "none.log", 0)


async def test_logs_respect_tenants_and_backends_without_output(tmp_path):
    tokens = TokenFile(tmp_path / "tokens.json")
    alice, _ = tokens.create("alice", "tenant-user", "team-a")
    bob, _ = tokens.create("bob", "tenant-user", "team-b")
    async with TestCluster(nodes=1, tls=True, tokens=tokens.path) as tc, tc.client_channel() as channel:
        jobs = jgrpc.JobServiceStub(channel)
        await jobs.SubmitJob(jpb.SubmitJobRequest(spec=tpb.JobSpec(job_id="a1", model="resnet50", num_gpus=1,
                                                                   iterations=100)),
                             metadata=(("authorization", f"Bearer {alice}"),))
        await tc.wait_for(lambda: tc.job("a1").state is JobState.RUNNING)
        for token, code, words in [(bob, grpc.StatusCode.PERMISSION_DENIED, "another tenant"),
                                   (alice, grpc.StatusCode.FAILED_PRECONDITION, "emulated jobs have no output")]:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                async for _ in jobs.StreamLogs(jpb.StreamLogsRequest(job_id="a1"),
                                               metadata=(("authorization", f"Bearer {token}"),)):
                    pass
            assert err.value.code() == code and words in err.value.details()
