"""The protocol as a client without Halyard's generated code sees it (docs/api.md).

The .proto files ship in the wheel; a client compiles them from the installed package into
a descriptor pool of its own and calls a running control plane by method name. Reflection
answers in both versions, and JobEvent carries its kind as an enum beside the old string.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from grpc_reflection.v1alpha import reflection_pb2

from halyard.datamodel import EventKind, JobState
from halyard.testing import TestCluster
from halyard.v1 import types_pb2
from halyard.wire import event_kind_to_pb

ROOT = Path(__file__).resolve().parents[1]


def installed_wheel(tmp: Path) -> Path:
    """Build the wheel from this checkout and install it (no dependencies) into ``tmp/site``."""
    pytest.importorskip("setuptools", reason="building the wheel without isolation needs setuptools")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp / "dist"), str(ROOT)],
                   check=True, timeout=120)
    wheel = next((tmp / "dist").glob("halyard-*.whl"))
    subprocess.run([*pip, "install", "--no-deps", "--target", str(tmp / "site"), str(wheel)], check=True, timeout=120)
    return tmp / "site"


def compile_protos(include: Path, files: list[str], out: Path) -> descriptor_pool.DescriptorPool:
    """protoc (grpcio-tools) over the shipped files into a fresh pool: no generated module involved."""
    from grpc_tools import protoc

    assert protoc.main(["protoc", f"-I{include}", "--include_imports", f"--descriptor_set_out={out}", *files]) == 0
    pool = descriptor_pool.DescriptorPool()
    for file in descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file:
        pool.Add(file)
    return pool


class GenericClient:
    """Calls any method by its full name, with messages built from a descriptor pool."""

    def __init__(self, channel: grpc.aio.Channel, pool: descriptor_pool.DescriptorPool) -> None:
        self.channel, self.pool = channel, pool

    def _method(self, service: str, name: str):
        method = self.pool.FindServiceByName(service).FindMethodByName(name)
        request = message_factory.GetMessageClass(method.input_type)
        response = message_factory.GetMessageClass(method.output_type)
        return f"/{service}/{name}", request, response

    async def call(self, service: str, name: str, body: dict) -> dict:
        path, request, response = self._method(service, name)
        call = self.channel.unary_unary(path, request_serializer=request.SerializeToString,
                                        response_deserializer=response.FromString)
        reply = await call(json_format.ParseDict(body, request()), timeout=5)
        return json_format.MessageToDict(reply, preserving_proto_field_name=True)

    async def stream(self, service: str, name: str, body: dict, count: int) -> list[dict]:
        path, request, response = self._method(service, name)
        call = self.channel.unary_stream(path, request_serializer=request.SerializeToString,
                                         response_deserializer=response.FromString)(
            json_format.ParseDict(body, request()), timeout=5)
        out = []
        async for reply in call:
            out.append(json_format.MessageToDict(reply, preserving_proto_field_name=True))
            if len(out) == count:
                call.cancel()
                break
        return out


@pytest.mark.slow
async def test_shipped_protos_drive_a_control_plane_without_generated_stubs(tmp_path):
    site = installed_wheel(tmp_path)
    where = subprocess.run(  # what the installed package says its include root (-S: not the editable install)
        [sys.executable, "-S", "-c", "import halyard.v1 as v; print(v.PROTO_INCLUDE); print(*v.PROTO_FILES)"],
        env={**os.environ, "PYTHONPATH": str(site)}, capture_output=True, text=True, check=True, timeout=30)
    include, files = where.stdout.splitlines()
    assert Path(include) == site.resolve()
    assert sorted(files.split()) == sorted(f"halyard/v1/{p.name}" for p in (ROOT / "src/halyard/v1").glob("*.proto"))
    pool = compile_protos(Path(include), files.split(), tmp_path / "halyard.pb")

    async with TestCluster(nodes=2) as tc:
        client = GenericClient(tc.channel, pool)
        job = await client.call("halyard.v1.JobService", "SubmitJob", {"spec": {
            "job_id": "plain", "model": "resnet50", "num_gpus": 2, "iterations": 100}})
        assert job["state"] == "PENDING" and job["iterations_total"] == "100"
        await tc.wait_for(lambda: tc.job("plain").state is JobState.RUNNING)
        got = await client.call("halyard.v1.JobService", "GetJob", {"job_id": "plain"})
        assert got["state"] == "RUNNING" and got["allocation"]["nodes"][0]["node"] == "r0-n0"
        listed = await client.call("halyard.v1.JobService", "ListJobs", {"states": ["RUNNING"]})
        assert [j["spec"]["job_id"] for j in listed["jobs"]] == ["plain"]
        cluster = await client.call("halyard.v1.ClusterService", "GetCluster", {})
        assert cluster["total_gpus"] == 16 and len(cluster["nodes"]) == 2
        events = await client.stream("halyard.v1.JobService", "WatchEvents", {"job_id": "plain"}, count=2)
        assert [(e["kind"], e["event_kind"]) for e in events] == [
            ("SUBMITTED", "EVENT_SUBMITTED"), ("STARTED", "EVENT_STARTED")]
        with pytest.raises(grpc.aio.AioRpcError) as err:  # errors arrive as status codes with the field named
            await client.call("halyard.v1.JobService", "SubmitJob", {"spec": {
                "job_id": "bad", "model": "resnet50", "num_gpus": 0, "iterations": 1}})
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "spec.num_gpus" in err.value.details()


@pytest.mark.parametrize("version", ["v1", "v1alpha"])
async def test_reflection_answers_in_both_versions(version: str):
    """v1 and v1alpha share their messages, so one set of classes speaks both; each version
    lists the services and returns the file that defines JobService, from which a pool builds."""
    path = f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo"
    async with TestCluster(nodes=1) as tc:
        call = tc.channel.stream_stream(
            path, request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
            response_deserializer=reflection_pb2.ServerReflectionResponse.FromString)
        replies = [r async for r in call(iter([
            reflection_pb2.ServerReflectionRequest(list_services=""),
            reflection_pb2.ServerReflectionRequest(file_containing_symbol="halyard.v1.JobService"),
            reflection_pb2.ServerReflectionRequest(file_containing_symbol=f"grpc.reflection.{version}.ServerReflection"),
        ]), timeout=5)]
    services = {s.name for s in replies[0].list_services_response.service}
    assert {"halyard.v1.JobService", "halyard.v1.ClusterService", "halyard.v1.AgentService", "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"} <= services
    pool = descriptor_pool.DescriptorPool()
    files = [descriptor_pb2.FileDescriptorProto.FromString(b)
             for b in replies[1].file_descriptor_response.file_descriptor_proto]
    for file in sorted(files, key=lambda f: len(f.dependency)):  # types.proto before job_service.proto
        pool.Add(file)
    assert pool.FindServiceByName("halyard.v1.JobService").FindMethodByName("WatchEvents").server_streaming
    own = replies[2].file_descriptor_response.file_descriptor_proto
    assert own and not replies[2].HasField("error_response")


def test_every_event_kind_has_an_enum_value():
    """A kind added to the data model without a protocol value would reach clients as UNSPECIFIED."""
    for kind in EventKind:
        assert types_pb2.EventKind.Name(event_kind_to_pb(kind)) == f"EVENT_{kind.value}"
