"""Priorities and tenant quotas as stages, over real gRPC (issue 18 item 1).

A lower-priority job is preempted for a higher one (Kubernetes' priority preemption); a tenant
within its quota is admitted, one above it borrows what nobody uses, one above it with nothing
idle waits with a reason naming the quota, and a tenant back within its quota reclaims borrowed
GPUs by preemption (Kueue's ClusterQueues, cohort borrowing and reclaim).
"""

from __future__ import annotations

import json

import pytest

from halyard.datamodel import ValidationError, parse_cluster
from halyard.policies import make_policy
from halyard.testing import TestCluster
from halyard.testing.cluster import small_cluster_toml
from halyard.v1 import job_service_pb2 as jpb
from halyard.v1 import job_service_pb2_grpc as jgrpc
from halyard.v1 import types_pb2 as tpb

QUOTAS = small_cluster_toml(2) + "\n[quotas]\nvision = 8\nnlp = 8\n"  # two 8-GPU nodes


async def submit(stub, job_id: str, gpus: int, *, tenant: str = "", priority: int = 0) -> None:
    await stub.SubmitJob(jpb.SubmitJobRequest(spec=tpb.JobSpec(
        job_id=job_id, model="resnet50", num_gpus=gpus, iterations=100_000, tenant=tenant, priority=priority)))


async def state(stub, job_id: str) -> jpb.Job:
    return await stub.GetJob(jpb.GetJobRequest(job_id=job_id))


async def test_a_higher_priority_job_preempts_a_lower_one():
    async with TestCluster(nodes=2, policy="fifo,priority=first,preempt=priority") as tc:
        stub = jgrpc.JobServiceStub(tc.channel)
        await submit(stub, "batch", 16, priority=0)
        await tc.wait_for(lambda: tc.job("batch").state.value == "RUNNING")
        await submit(stub, "equal", 8, priority=0)          # the same class never preempts
        assert (await state(stub, "equal")).state == tpb.PENDING and tc.job("batch").preemptions == 0
        await submit(stub, "urgent", 8, priority=10)
        await tc.wait_for(lambda: tc.job("urgent").state.value == "RUNNING")
        assert tc.job("batch").preemptions == 1
        # FIFO among equals after the preemption: the older 'equal' job takes the other 8 GPUs.
        await tc.wait_for(lambda: tc.job("equal").state.value == "RUNNING")
        assert tc.job("batch").state.value == "PENDING"


async def looked_at(tc: TestCluster, job_id: str) -> None:
    """Wait for the pass that gave ``job_id`` its reason: under group commit a job is answered once
    stored, and the pass for its burst may come a few pass-lengths later (docs/decisions/control-plane.md,
    "Group commit")."""
    await tc.wait_for(lambda: tc.control_plane.core.wait_of(tc.job(job_id)) is not None)


async def test_a_tenant_borrows_idle_quota_waits_when_none_is_idle_and_is_reclaimed_from():
    async with TestCluster(cluster_toml=QUOTAS, policy="fifo,admission=tenant-quota,preempt=quota-reclaim") as tc:
        stub = jgrpc.JobServiceStub(tc.channel)
        await submit(stub, "v1", 8, tenant="vision")        # within vision's 8
        await submit(stub, "v2", 8, tenant="vision")        # above it: borrows nlp's idle 8
        await tc.wait_for(lambda: tc.job("v2").state.value == "RUNNING")
        await submit(stub, "v3", 8, tenant="vision")        # above it, nothing idle: waits by policy
        await looked_at(tc, "v3")
        v3 = await state(stub, "v3")
        assert v3.state == tpb.PENDING
        assert (jpb.WaitCode.Name(v3.wait.code), v3.wait.stage) == ("WAITING_BY_POLICY", "tenant-quota")
        assert v3.wait.reason == "tenant vision: 16 of its 8 GPUs of quota in use, needs 8 more; 0 idle to borrow"
        await submit(stub, "n1", 8, tenant="nlp")           # within nlp's quota: reclaims from the borrower
        await tc.wait_for(lambda: tc.job("n1").state.value == "RUNNING")
        assert tc.job("v2").preemptions == 1 and tc.job("v1").preemptions == 0
        assert tc.job("v1").state.value == "RUNNING" and tc.job("v2").state.value == "PENDING"


async def test_without_borrowing_a_tenant_stays_within_its_quota():
    async with TestCluster(cluster_toml=QUOTAS, policy="fifo,admission=tenant-quota-strict") as tc:
        stub = jgrpc.JobServiceStub(tc.channel)
        await submit(stub, "v1", 8, tenant="vision")
        await submit(stub, "v2", 8, tenant="vision")
        await tc.wait_for(lambda: tc.job("v1").state.value == "RUNNING")
        await looked_at(tc, "v2")
        v2 = await state(stub, "v2")
        assert v2.state == tpb.PENDING and v2.wait.reason.endswith("; borrowing is off")
        assert tc.control_plane.core.free.total_gpus == 8  # idle, and kept for nlp


def test_quotas_are_validated_naming_the_field():
    with pytest.raises(ValidationError, match="quotas"):
        parse_cluster(small_cluster_toml(2) + "\n[quotas]\nvision = -1\n")
    assert dict(parse_cluster(QUOTAS).quotas) == {"vision": 8, "nlp": 8}
    with pytest.raises(ValidationError, match="priority='high'"):
        make_policy("fifo,priority=high")


async def test_an_unhealthy_heartbeat_drains_its_node_and_requeues_its_jobs():
    """Issue 18 item 2: the reason is kept and shown by GetCluster; the job resumes elsewhere from
    its checkpoint; measured utilisation reaches NodeStatus."""
    from halyard.v1 import cluster_service_pb2 as cpb
    from halyard.v1 import cluster_service_pb2_grpc as cgrpc

    async with TestCluster(nodes=2, heartbeat_s=0.05) as tc:
        stub = jgrpc.JobServiceStub(tc.channel)
        await submit(stub, "j", 8)
        await tc.wait_for(lambda: tc.job("j").state.value == "RUNNING")
        sick = tc.job("j").allocation.node_names[0]
        await tc.advance(60)
        done_before = tc.job("j").iterations_done(tc.now())
        tc.set_health(sick, False, "GPU 3: Xid 79 (fallen off the bus)")
        await tc.wait_for(lambda: tc.job("j").preemptions == 1)
        await tc.wait_for(lambda: tc.job("j").state.value == "RUNNING")
        assert tc.job("j").allocation.node_names[0] != sick
        assert tc.job("j").iterations_done(tc.now()) >= int(done_before)  # from its checkpoint, not zero
        other = tc.job("j").allocation.node_names[0]
        beat = lambda: tc.control_plane.sessions[other].heartbeat  # noqa: E731
        await tc.wait_for(lambda: beat() is not None and beat().gpu_utilization == 1.0)  # all 8 GPUs busy
        clusters = cgrpc.ClusterServiceStub(tc.channel)
        nodes = {n.spec.name: n for n in (await clusters.GetCluster(cpb.GetClusterRequest())).nodes}
        assert nodes[sick].drained and nodes[sick].drain_reason == "unhealthy: GPU 3: Xid 79 (fallen off the bus)"
        assert not nodes[other].drained and nodes[other].gpu_utilization == 1.0  # measured, from the heartbeat
        # An operator's drain keeps the reason given.
        drained = await clusters.DrainNode(cpb.NodeRequest(node=other, reason="BIOS update"))
        assert drained.drain_reason == "BIOS update"


async def test_the_operator_cli_shows_the_cluster_and_drains_with_a_reason():
    from test_wait_reasons import halyard

    async with TestCluster(nodes=2, policy="fifo,priority=first,preempt=priority") as tc:
        connect = ("--control-plane", tc.address, "--insecure")
        drained = await halyard("drain", "r0-n1", "--reason", "kernel upgrade", *connect)
        assert "r0-n1 drained: kernel upgrade" in drained
        shown = await halyard("cluster", *connect)
        assert "kernel upgrade" in shown and "16/16 GPUs free" in shown
        await halyard("submit", "--id", "p", "--model", "resnet50", "--gpus", "4", "--iterations", "100",
                      "--priority", "7", "--min-gpus", "2", "--max-gpus", "8", "--parallelism", "4,1,1", *connect)
        spec = tc.job("p").spec
        assert (spec.priority, spec.min_gpus, spec.max_gpus, spec.parallelism.data) == (7, 2, 8, 4)
        assert "r0-n1 takes work" in await halyard("undrain", "r0-n1", *connect)
        listed = await halyard("jobs", "--limit", "1", "--json", *connect)
        assert [j["spec"]["job_id"] for j in json.loads(listed)] == ["p"]


async def test_submit_takes_a_job_file_and_exit_codes_say_what_failed(tmp_path):
    from test_wait_reasons import halyard_status

    job_file = tmp_path / "job.toml"
    job_file.write_text('id = "from-file"\nmodel = "resnet50"\ngpus = 4\niterations = 100\npriority = 3\n'
                        'parallelism = [2, 2, 1]\nenv = { LR = "0.1" }\ncommand = ["python", "train.py"]\n')
    async with TestCluster(nodes=2) as tc:
        connect = ("--control-plane", tc.address, "--insecure")
        code, _, _ = await halyard_status("submit", "--file", str(job_file), "--priority", "5", *connect)
        assert code == 0
        spec = tc.job("from-file").spec
        assert (spec.priority, spec.parallelism.tensor, dict(spec.env), spec.command) == (
            5, 2, {"LR": "0.1"}, ("python", "train.py"))  # the flag wins over the file
        code, _, err = await halyard_status("job", "nosuch", *connect)
        assert code == 4 and "NOT_FOUND" in err                      # the server rejected it
        code, _, err = await halyard_status("submit", "--model", "resnet50", "--gpus", "1", *connect)
        assert code == 2 and "--id" in err                           # bad input, named
    code, _, err = await halyard_status("jobs", "--control-plane", "127.0.0.1:9", "--insecure")
    assert code == 5 and "UNAVAILABLE" in err                        # nobody answered


async def test_a_daemon_reads_its_options_from_a_config_file(tmp_path):
    """`halyard controlplane --config FILE`: the file's keys are the options; --log-level warning
    keeps the info lines out."""
    import asyncio
    import sys

    config = tmp_path / "cp.toml"
    config.write_text(f'cluster = "default"\ndb = "{tmp_path / "state.db"}"\nlisten = "127.0.0.1:0"\n'
                      'insecure = true\nlog_level = "warning"\n')
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "halyard.cli", "controlplane", "--config",
                                                str(config), stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    try:
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        assert line.startswith("listening on"), line
    finally:
        proc.terminate()
        _, err = await proc.communicate()
    assert "INSECURE MODE" in err.decode() and "control plane listening" not in err.decode()
    bad = tmp_path / "bad.toml"
    bad.write_text(f'cluster = "default"\ndb = "{tmp_path / "b.db"}"\nnosuch_option = 1\n')
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "halyard.cli", "controlplane", "--config",
                                                str(bad), stderr=asyncio.subprocess.PIPE)
    _, err = await proc.communicate()
    assert proc.returncode == 2 and "--nosuch-option" in err.decode()


async def test_a_field_the_policy_ignores_is_said_at_submission():
    """Issue 18: priority and deadline are acted on by the policies that honour them; any other
    policy says so in the SubmitJob reply (and the SUBMITTED event) instead of ignoring them silently."""
    spec = tpb.JobSpec(job_id="p", model="resnet50", num_gpus=1, iterations=100, priority=5, deadline=3600.0)
    async with TestCluster(nodes=2, policy="fifo") as tc:
        reply = await jgrpc.JobServiceStub(tc.channel).SubmitJob(jpb.SubmitJobRequest(spec=spec))
        assert reply.ignored == "priority and deadline ignored by policy fifo"
        submitted = next(e for e in tc.control_plane.core.log if e.job_id == "p")
        assert submitted.detail == reply.ignored
    async with TestCluster(nodes=2, policy="fifo,priority=first,preempt=priority") as tc:
        reply = await jgrpc.JobServiceStub(tc.channel).SubmitJob(jpb.SubmitJobRequest(spec=spec))
        assert reply.ignored == "deadline ignored by policy fifo,priority=first,preempt=priority"
    assert make_policy("crius-ddl").honours == {"deadline"} and make_policy("elasticflow-ls").honours == set()
