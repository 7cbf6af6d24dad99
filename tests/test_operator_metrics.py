"""/metrics scraped over HTTP after real gRPC traffic: job counters, histograms, RPC codes, agents, Grafana."""

from __future__ import annotations

import json
import re
from pathlib import Path

import aiohttp
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from halyard.controlplane.prometheus import OTHER_TENANT, BoundedLabels
from halyard.testing import TestCluster
from halyard.v1 import job_service_pb2 as jpb
from halyard.v1 import job_service_pb2_grpc as jgrpc
from halyard.v1 import types_pb2 as tpb

GRAFANA = Path(__file__).parent.parent / "deploy" / "grafana" / "halyard-dashboard.json"
JOBS = "halyard.v1.JobService"


async def scrape(tc: TestCluster) -> dict[tuple[str, frozenset], float]:
    """Every sample of /metrics: (name, labels) -> value."""
    async with aiohttp.ClientSession() as http, http.get(tc.http_url + "/metrics") as reply:
        assert reply.status == 200
        text = await reply.text()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def test_metrics_after_real_grpc_traffic():
    async with TestCluster(2, http="127.0.0.1:0", heartbeat_timeout_s=0.6) as tc:
        stub = jgrpc.JobServiceStub(tc.channel)

        def spec(job_id: str, tenant: str, model: str = "resnet50", iterations: int = 2_000) -> tpb.JobSpec:
            return tpb.JobSpec(job_id=job_id, model=model, num_gpus=8, iterations=iterations, tenant=tenant)

        for job_id, tenant in (("a1", "alpha"), ("b1", "beta"), ("a2", "alpha")):
            await stub.SubmitJob(jpb.SubmitJobRequest(spec=spec(job_id, tenant)))
        codes = []
        for call in (stub.SubmitJob(jpb.SubmitJobRequest(spec=spec("a1", "alpha"))),  # duplicate
                     stub.SubmitJob(jpb.SubmitJobRequest(spec=spec("x", "alpha", model="no-such-model"))),
                     stub.GetJob(jpb.GetJobRequest(job_id="nope"))):
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await call
            codes.append(error.value.code())
        assert codes == [grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND]
        await stub.CancelJob(jpb.CancelJobRequest(job_id="a2"))  # pending: cancelled, never ran
        watch = stub.WatchEvents(jpb.WatchEventsRequest())  # a stream the client walks away from
        assert (await anext(aiter(watch))).job_id == "a1"
        watch.cancel()
        health = health_pb2_grpc.HealthStub(tc.channel)
        assert (await health.Check(health_pb2.HealthCheckRequest())).status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.aio.AioRpcError) as error:  # a method nobody serves: no series of its own
            await tc.channel.unary_unary("/halyard.v1.Invented/Method")(b"")
        assert error.value.code() == grpc.StatusCode.UNIMPLEMENTED

        # Measured utilisation: each busy node's agent reports 1.0 in its next heartbeat.
        cp = tc.control_plane
        await tc.wait_for(lambda: all(s.heartbeat is not None and s.heartbeat.gpu_utilization == 1.0
                                      for s in cp.sessions.values()))
        samples = await scrape(tc)
        assert value(samples, "halyard_gpu_utilization_measured") == 1.0
        assert {value(samples, "halyard_node_gpu_utilization", node=n) for n in ("r0-n0", "r0-n1")} == {1.0}
        assert value(samples, "halyard_agents_connected") == 2

        # A lost agent: b1 is preempted and waits for the node that a1 holds.
        lost = tc.job("b1").allocation.node_names[0]
        await tc.stop_agent(lost)
        await tc.wait_for(lambda: tc.job("b1").preemptions == 1)
        await tc.advance(3600)  # a1 completes; b1 starts on its node and completes too
        try:
            await tc.wait_for(lambda: tc.job("b1").state.value == "COMPLETED")
        except TimeoutError:
            raise AssertionError([(e.time, e.job_id, e.kind.value, e.detail) for e in cp.core.log]) from None

        samples = await scrape(tc)
        handled = "halyard_grpc_server_handled_total"
        assert value(samples, handled, service=JOBS, method="SubmitJob", code="OK") == 3
        assert value(samples, handled, service=JOBS, method="SubmitJob", code="ALREADY_EXISTS") == 1
        assert value(samples, handled, service=JOBS, method="SubmitJob", code="INVALID_ARGUMENT") == 1
        assert value(samples, handled, service=JOBS, method="GetJob", code="NOT_FOUND") == 1
        assert value(samples, handled, service=JOBS, method="CancelJob", code="OK") == 1
        assert value(samples, handled, service=JOBS, method="WatchEvents", code="CANCELLED") == 1
        assert value(samples, handled, service="grpc.health.v1.Health", method="Check", code="OK") == 1
        assert value(samples, handled, service="unknown", method="unknown", code="UNIMPLEMENTED") == 1
        assert not any("Invented" in str(labels) for _, labels in samples)

        assert value(samples, "halyard_jobs_submitted_total", tenant="alpha") == 2
        assert value(samples, "halyard_jobs_finished_total", state="COMPLETED", tenant="alpha") == 1
        assert value(samples, "halyard_jobs_finished_total", state="COMPLETED", tenant="beta") == 1
        assert value(samples, "halyard_jobs_finished_total", state="CANCELLED", tenant="alpha") == 1
        assert value(samples, "halyard_preemptions_total", tenant="beta") == 1
        assert value(samples, "halyard_preemptions_total", tenant="alpha") == 0

        done = [tc.job("a1"), tc.job("b1")]
        assert value(samples, "halyard_job_completion_seconds_count") == 2
        assert value(samples, "halyard_job_completion_seconds_sum") == pytest.approx(
            sum(r.end_time - r.spec.submit_time for r in done))
        assert value(samples, "halyard_job_queueing_seconds_sum") == pytest.approx(sum(r.queued_s for r in done))
        assert tc.job("b1").queued_s > 0  # it waited after its preemption: the histogram saw a real wait
        assert value(samples, "halyard_agents_connected") == 1
        assert value(samples, "halyard_healthy") == 1

        # Every series the Grafana dashboard plots is one this control plane exports.
        exported = {name for name, _ in samples}
        queried = {m for panel in grafana_panels() for t in panel["targets"]
                   for m in re.findall(r"\bhalyard_[a-z_]+", t["expr"])}
        assert queried and queried <= exported, sorted(queried - exported)


def grafana_panels() -> list[dict]:
    dashboard = json.loads(GRAFANA.read_text(encoding="utf-8"))
    return [p for p in dashboard["panels"] if p.get("type") != "row"]


def test_tenant_labels_are_bounded():
    label = BoundedLabels(limit=2)
    assert [label(t) for t in ("a", "b", "c", "a", "d", "b")] == ["a", "b", OTHER_TENANT, "a", OTHER_TENANT, "b"]
