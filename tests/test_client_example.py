# The README's example of a client test written against Halyard's test kit; CI runs it as is.
import pytest

from halyard.testing import TestCluster
from halyard.v1 import job_service_pb2 as jpb
from halyard.v1 import job_service_pb2_grpc as jgrpc
from halyard.v1 import types_pb2 as tpb

pytest_plugins = ["halyard.testing.pytest_plugin"]
pytestmark = pytest.mark.asyncio  # pytest-asyncio (pip install 'halyard[test]'); needless under asyncio_mode = "auto"


async def my_client_submits(channel, job_id: str) -> int:
    """The code under test: a client that submits a job and returns its state."""
    reply = await jgrpc.JobServiceStub(channel).SubmitJob(jpb.SubmitJobRequest(
        spec=tpb.JobSpec(job_id=job_id, model="resnet50", num_gpus=8, iterations=500)))
    return reply.state


@pytest.mark.parametrize("halyard_cluster", [{"nodes": 2}], indirect=True)
async def test_my_client_survives_a_lost_node(halyard_cluster: TestCluster):
    tc = halyard_cluster
    assert await my_client_submits(tc.channel, "train-1") == tpb.PENDING
    await tc.wait_for(lambda: "train-1" in tc.agents[tc.job("train-1").allocation.node_names[0]].jobs)
    await tc.stop_agent(tc.job("train-1").allocation.node_names[0])   # inject a fault
    await tc.wait_for(lambda: tc.job("train-1").preemptions == 1)      # requeued after the heartbeat timeout
    await tc.advance(3600)                                              # an hour of cluster time
    await tc.wait_for(lambda: tc.job("train-1").state.value == "COMPLETED")
