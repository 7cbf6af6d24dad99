"""A test cluster for developers of gRPC clients: real gRPC, controllable time, faults.

    async with TestCluster(nodes=4) as tc:            # control plane + 4 emulated agents
        jobs = JobServiceStub(tc.channel)               # a real channel to 127.0.0.1:<free port>
        await jobs.SubmitJob(SubmitJobRequest(spec=...))
        await tc.advance(3600)                          # an hour of cluster time passes
        await tc.stop_agent("r0-n1")                    # fault injection
        await tc.wait_for(lambda: tc.job("j1").state is JobState.PENDING)

The clock is manual: nothing happens in cluster time until ``advance`` moves it,
and timers fire in order as it moves. Liveness (heartbeats, the agent-loss
timeout) stays in wall time, as in production. With pytest, the plugin
``halyard.testing.pytest_plugin`` gives a ``halyard_cluster`` fixture.

(DESIGN.md places the in-process test cluster in emulator/; it needs the control
plane, which emulator/ may not import, so it lives here.)
"""

from halyard.testing.cluster import ClusterNotStarted, TestCluster

__all__ = ["ClusterNotStarted", "TestCluster"]
