"""A cluster of emulated and process agents (issue 33, point 5): a job with a command runs only where a
command runs, one without only where it is emulated, whatever the policy; where neither can, it waits
and says why."""

from __future__ import annotations

import grpc
import pytest
from factories import job
from worlds import World, train_spec

from halyard.datamodel import JobState, parse_cluster
from halyard.policies import WaitCode, make_policy, policy_names
from halyard.scheduling import SchedulingCore
from halyard.scheduling.backends import EMULATES, RUNS_COMMANDS, backend_kind
from halyard.testing import TestCluster
from halyard.testing.cluster import small_cluster_toml
from halyard.v1 import job_service_pb2 as jpb
from halyard.v1 import job_service_pb2_grpc as jgrpc
from halyard.v1 import types_pb2 as tpb

COMMAND = ("python", "train.py")


def mixed_core(cluster, perf, policy: str, kinds: dict[str, int]) -> SchedulingCore:
    core = SchedulingCore(cluster, make_policy(policy), perf, backends=True)
    for node, kind in kinds.items():
        core.set_node_backend(node, kind)
    return core


@pytest.mark.parametrize("policy", policy_names())
def test_every_policy_places_each_kind_of_job_only_on_its_kind_of_node(perf, policy):
    """Half the nodes emulated, half running commands; jobs of both kinds, of 1 to 4 GPUs. Every preset's
    placements (after a few passes, rounds included) are on nodes of the job's kind, and both kinds run."""
    cluster = parse_cluster(small_cluster_toml(4), source="<mixed>")  # 24 cores a node: Synergy's demand fits
    kinds = {n.name: EMULATES if i % 2 == 0 else RUNS_COMMANDS for i, n in enumerate(cluster.nodes)}
    core = mixed_core(cluster, perf, policy, kinds)
    for i, gpus in enumerate((4, 2, 1, 4, 2, 1)):
        core.submit(job(gpus, job_id=f"cmd-{i}", command=COMMAND), 0.0)
        core.submit(job(gpus, job_id=f"emu-{i}"), 0.0)
    for t in (0.0, 300.0, 600.0):
        core.schedule(t)
    started = [r for r in core.records.values() if r.first_start is not None]
    assert {bool(r.spec.command) for r in started} == {True, False}, f"{policy} did not start both kinds"
    for record in core.running.values():
        want = RUNS_COMMANDS if record.spec.command else EMULATES
        assert {kinds[n] for n in record.allocation.node_names} == {want}, (record.job_id, record.allocation)


@pytest.mark.parametrize("policy", policy_names())
def test_a_job_larger_than_a_node_spans_only_nodes_of_its_kind(perf, policy):
    """Before: a job without a command placed partly on a process node FAILED there. A 16-GPU job of each
    kind on four 8-GPU nodes, two of each kind: wherever a preset places one, both its nodes are its kind."""
    cluster = parse_cluster(small_cluster_toml(4), source="<mixed>")
    kinds = dict(zip([n.name for n in cluster.nodes], (EMULATES, RUNS_COMMANDS, RUNS_COMMANDS, EMULATES),
                     strict=True))
    core = mixed_core(cluster, perf, policy, kinds)
    core.submit(job(16, job_id="cmd", command=COMMAND), 0.0)
    core.submit(job(16, job_id="emu"), 0.0)
    for t in (0.0, 300.0):
        core.schedule(t)
    for record in core.running.values():
        want = RUNS_COMMANDS if record.spec.command else EMULATES
        assert [kinds[n] for n in record.allocation.node_names] == [want, want], record.allocation
    if policy == "fifo":
        assert set(core.running) == {"cmd", "emu"}


def test_a_single_backend_cluster_passes_as_before(small_cluster, perf):
    """All nodes emulated and no job with a command: one pass over everything, the given policy's."""
    core = mixed_core(small_cluster, perf, "fifo", {n.name: EMULATES for n in small_cluster.nodes})
    core.submit(job(8, job_id="a"), 0.0)
    assert core.backends.split(core.free.schedulable, core._live) is None
    core.schedule(0.0)
    assert core.records["a"].state is JobState.RUNNING


def test_a_job_no_connected_node_can_run_waits_with_the_reason(small_cluster, perf):
    core = mixed_core(small_cluster, perf, "fifo", {n.name: EMULATES for n in small_cluster.nodes})
    core.submit(job(8, job_id="real", command=COMMAND), 0.0)
    core.submit(job(8, job_id="model"), 0.0)
    core.schedule(0.0)
    assert core.records["model"].state is JobState.RUNNING
    why = core.wait_of(core.records["real"])
    assert why.code is WaitCode.CANNOT_FIT_NOW and why.stage == "backend"
    assert "no connected agent runs commands" in why.reason
    assert f"; {len(small_cluster.nodes)} connected nodes are emulated," in why.reason
    assert core.waiting[WaitCode.CANNOT_FIT_NOW] == 1


def test_the_reason_counts_the_other_kinds_nodes_in_words():
    from halyard.scheduling.backends import no_node_for

    assert "; 1 connected node is emulated," in no_node_for(RUNS_COMMANDS, 1).reason
    assert "; 3 connected nodes are emulated," in no_node_for(RUNS_COMMANDS, 3).reason
    assert "; 1 connected node runs real processes," in no_node_for(EMULATES, 1).reason
    assert "; 0 connected nodes run real processes," in no_node_for(EMULATES, 0).reason


def test_the_core_refuses_a_plan_that_puts_a_command_on_an_emulated_node(small_cluster, perf):
    from halyard.datamodel import Allocation, NodeAllocation
    from halyard.policies import Plan
    from halyard.scheduling import PlanError

    core = mixed_core(small_cluster, perf, "fifo", {"r0-n0": EMULATES, "r0-n1": RUNS_COMMANDS})
    core.submit(job(2, job_id="real", command=COMMAND), 0.0)
    plan = Plan()
    plan.start("real", Allocation((NodeAllocation("r0-n0", (0, 1), 6, 125_000),)))
    with pytest.raises(PlanError, match="r0-n0's agent is emulated; job real has a command"):
        core.apply(plan, 0.0)


def test_a_split_pass_applies_all_its_plans_or_none(small_cluster, perf):
    """The kinds' plans are one pass: when the second is refused, the first (valid) one is not applied
    either, and both policies hear so, as a refused plan leaves everything as it was."""
    from halyard.datamodel import Allocation, NodeAllocation
    from halyard.policies import Plan, Policy
    from halyard.scheduling import PlanError

    class StartsOnR0N0(Policy):
        """Starts every pending job on all of r0-n0, schedulable for its kind or not."""

        name = "starts-on-r0-n0"

        def __init__(self) -> None:
            self.heard: list[str] = []

        def schedule(self, view, state):
            plan = Plan()
            for j in view.pending:
                plan.start(j.job_id, Allocation((NodeAllocation("r0-n0", tuple(range(j.spec.num_gpus)), 12,
                                                                250_000),)))
            return plan

        def on_rejected(self, view, plan, state):
            self.heard.append("rejected")

    core = SchedulingCore(small_cluster, StartsOnR0N0(), perf, backends=True)
    core.set_node_backend("r0-n0", EMULATES)
    core.set_node_backend("r0-n1", RUNS_COMMANDS)
    core.submit(job(4, job_id="model"), 0.0)
    core.submit(job(4, job_id="real", command=COMMAND), 0.0)
    with pytest.raises(PlanError, match="r0-n0's agent is emulated; job real has a command"):
        core.schedule(0.0)
    assert core.records["model"].state is JobState.PENDING and core.free.gpus[0] == 4
    assert core.policy.heard == ["rejected"] and core._command_policy.heard == ["rejected"]


def test_backend_names():
    assert backend_kind("emulated") == EMULATES
    assert backend_kind("process") == backend_kind("gpu") == RUNS_COMMANDS
    assert backend_kind("unknown") == backend_kind("") == 0


async def test_a_mixed_cluster_runs_both_kinds_of_job_each_on_its_node(tmp_path):
    """A real control plane, one emulated and one process agent: a job with a command runs as a real
    process on the process node, one without on the emulated node, both complete; a job nothing can run
    waits with the reason over gRPC; and the emulated job's `logs` say it has no output."""
    async with World(("emulated", "process"), tmp_path, nodes=2, speedup=50.0) as w:
        await w.submit(train_spec("real", 40, gpus=8))
        await w.submit(tpb.JobSpec(job_id="model", model="resnet50", num_gpus=8, iterations=200))
        await w.wait_for(lambda: w.job("real").state is JobState.COMPLETED
                         and w.job("model").state is JobState.COMPLETED, timeout=60)
        placed = {job: nodes for action, job, nodes in w.decisions if action == "Start"}
        assert placed == {"real": ("r0-n1",), "model": ("r0-n0",)}
        assert (tmp_path / "logs" / "real-1-r0-n1.log").exists()  # it ran as a real process
        stub = jgrpc.JobServiceStub(w.channel)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in stub.StreamLogs(jpb.StreamLogsRequest(job_id="model")):
                pass
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "emulated" in err.value.details() and "no output" in err.value.details()


@pytest.mark.parametrize(("backend", "spec", "phrase"), [
    ("emulated", train_spec("real", 10), "no connected agent runs commands"),
    ("process", train_spec("bare", 10, command=[]), "it has no command, so it runs only on an emulated agent"),
])
async def test_a_job_no_agent_can_run_waits_and_getjob_says_why(tmp_path, backend, spec, phrase):
    """Before issue 33 the command job "ran" on the emulated node without executing anything, and the
    job without a command FAILED on the process node; now each waits, and says why."""
    async with World(backend, tmp_path) as w:
        await w.submit(spec)
        stub = jgrpc.JobServiceStub(w.channel)

        async def why() -> str:
            return (await stub.GetJob(jpb.GetJobRequest(job_id=spec.job_id))).wait.reason

        await w.wait_for(lambda: w.cp.core.passes > 0)
        got = await why()
        assert phrase in got and w.job(spec.job_id).state is JobState.PENDING
        with pytest.raises(grpc.aio.AioRpcError) as err:  # its logs say it has not started, and why
            async for _ in stub.StreamLogs(jpb.StreamLogsRequest(job_id=spec.job_id)):
                pass
        assert "has not started" in err.value.details() and phrase in err.value.details()


@pytest.mark.parametrize("emulate_commands", [True, False])
async def test_the_test_kit_runs_a_clients_command_jobs_emulated_unless_told_not_to(emulate_commands):
    """halyard.testing's emulated agents stand in for real ones: a client's job with a command runs there
    (its command not run) and its logs say it ran emulated; with emulate_commands=False it waits, as in a
    real cluster of emulated agents."""
    async with TestCluster(nodes=1, emulate_commands=emulate_commands) as tc:
        stub = jgrpc.JobServiceStub(tc.channel)
        await stub.SubmitJob(jpb.SubmitJobRequest(spec=tpb.JobSpec(job_id="c", model="resnet50", num_gpus=8,
                                                                   iterations=100, command=["python", "x.py"])))
        if not emulate_commands:
            await tc.wait_for(lambda: tc.control_plane.core.passes > 0)
            assert "no connected agent runs commands" in tc.control_plane.core.wait_of(tc.job("c")).reason
            return
        await tc.wait_for(lambda: tc.job("c").state is JobState.RUNNING)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in stub.StreamLogs(jpb.StreamLogsRequest(job_id="c")):
                pass
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "whose agent is emulated" in err.value.details()
