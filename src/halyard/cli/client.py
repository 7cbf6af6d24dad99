"""Client commands against a running control plane: submit, job, jobs, cancel, watch, whatif."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path

import grpc
from google.protobuf.json_format import MessageToDict
from rich.console import Console
from rich.table import Table

from halyard import tls
from halyard.cli.errors import RpcFailed, ServerUnreachable
from halyard.cli.node_spec import parse_node_specs
from halyard.datamodel import ValidationError
from halyard.datamodel.limits import MAX_REQUEST_BYTES, MAX_SUBMIT_BATCH
from halyard.peer_enums import enum_name
from halyard.tls import ClientTLS, is_loopback
from halyard.v1 import cluster_service_pb2 as cpb
from halyard.v1 import cluster_service_pb2_grpc as cgrpc
from halyard.v1 import job_service_pb2 as jpb
from halyard.v1 import job_service_pb2_grpc as jgrpc
from halyard.v1 import types_pb2 as tpb

DEFAULT_TARGET = "127.0.0.1:50051"


def rpc_failed(exc: grpc.RpcError, args: argparse.Namespace | None = None) -> RpcFailed:
    """The CLI's error for a failed call: unreachable or rejected, with gRPC's code and message; a
    connection the transport refused for TLS reasons says which, in our words (:func:`tls_mismatch`)."""
    unreachable = exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    if unreachable and args is not None:
        hint = tls_mismatch(exc.details() or "", args)
        if hint is not None:
            return ServerUnreachable(f"could not connect to {args.control_plane}: {hint} (gRPC {exc.code().name})")
    return (ServerUnreachable if unreachable else RpcFailed)(f"{exc.code().name}: {exc.details()}")


def tls_mismatch(details: str, args: argparse.Namespace) -> str | None:
    """What a failed connection's transport error means when the client's and the server's TLS disagree
    (:func:`halyard.tls.tls_mismatch`), in the client's flags; None when it is none of these."""
    kind = tls.tls_mismatch(details, plaintext=args.insecure)
    if kind == tls.NEEDS_TLS:
        return ("the server closed the plaintext connection: it may require TLS (a control plane started with "
                "--certs); pass --ca CA.crt with --token or --cert/--key instead of --insecure")
    if kind == tls.NOT_TLS:
        return ("the server does not speak TLS (a control plane started with --insecure?); pass --insecure "
                "instead of --ca")
    if kind == tls.UNKNOWN_CA:
        return (f"the server's certificate is not signed by the CA in {args.ca} (--ca / HALYARD_CA); give the "
                "ca.crt of the cluster this control plane was started with (its --certs directory)")
    if kind == tls.WRONG_NAME:
        return (f"the server's certificate does not name {args.control_plane.rsplit(':', 1)[0]}; dial a name it "
                "was issued for, or reissue it with `halyard certs init --server-name HOST`")
    return None


def register(commands: argparse._SubParsersAction) -> None:
    def client(name: str, help_: str) -> argparse.ArgumentParser:
        p = commands.add_parser(name, help=help_)
        p.add_argument("--control-plane", default=os.environ.get("HALYARD_CONTROL_PLANE") or DEFAULT_TARGET,
                       help=f"the control plane's client port, HOST:PORT (env HALYARD_CONTROL_PLANE; default "
                            f"{DEFAULT_TARGET}), or several, comma-separated: the active control plane and its "
                            "standbys (the leader is found)")
        p.add_argument("--ca", type=Path, default=_env_path("HALYARD_CA"),
                       help="the cluster CA certificate that signed the control plane's (env HALYARD_CA)")
        p.add_argument("--token", default=os.environ.get("HALYARD_TOKEN"),
                       help="bearer token from `halyard tokens create` (env HALYARD_TOKEN)")
        p.add_argument("--cert", type=Path, default=_env_path("HALYARD_CERT"),
                       help="client certificate, instead of a token (env HALYARD_CERT)")
        p.add_argument("--key", type=Path, default=_env_path("HALYARD_KEY"), help="its key (env HALYARD_KEY)")
        p.add_argument("--insecure", action="store_true", default=os.environ.get("HALYARD_INSECURE") == "1",
                       help="plaintext, to a control plane on a loopback address started with --insecure "
                            "(env HALYARD_INSECURE=1)")
        return p

    s = client("submit", "submit a job, from flags or a TOML job file (--file), flags winning")
    s.add_argument("--file", type=Path, default=None, metavar="JOB.toml",
                   help="the job as TOML: id, model, gpus, iterations or duration_s, and any option below by its "
                        "name (command as a string or a list, env as a table, parallelism as [d, t, p]); or "
                        "many jobs as [[job]] tables, sent in batches (SubmitJobs), flags applying to each")
    s.add_argument("--id", dest="job_id", help="the job's id, e.g. --id resnet-1")
    s.add_argument("--model", help="a catalog model (halyard profiles list), e.g. --model resnet50")
    s.add_argument("--gpus", type=int, help="GPUs it asks for, e.g. --gpus 8")
    work = s.add_mutually_exclusive_group()
    work.add_argument("--iterations", type=int, help="the work to do, e.g. --iterations 5000")
    work.add_argument("--duration-s", type=float, help="or its ideal run time, converted by the model")
    s.add_argument("--batch-size", type=int, help="per GPU; default: the model's reference batch")
    s.add_argument("--gpu-type", help="only this GPU type, e.g. --gpu-type A100")
    s.add_argument("--tenant", help="an operator's submission for a tenant (a tenant's user submits as itself)")
    s.add_argument("--command", dest="job_command", help="what process/gpu agents run, one shell-quoted string "
                                     "(e.g. 'python train.py --lr 0.1'); a job with a command runs only on "
                                     "process/gpu agents, one without only on emulated agents")
    s.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="environment for the command")
    s.add_argument("--priority", type=int,
                   help="a higher number goes first where the policy orders by priority (e.g. 10); default 0")
    s.add_argument("--deadline-s", type=float,
                   help="seconds after submission the job should finish by (deadline-aware policies)")
    s.add_argument("--min-gpus", type=int, help="elastic jobs: the fewest GPUs it may run on, e.g. 2")
    s.add_argument("--max-gpus", type=int, help="elastic jobs: the most GPUs it may run on, e.g. 16")
    s.add_argument("--logical-workers", type=int,
                   help="EasyScale logical workers (maxP): the job's result does not depend on its GPU count")
    s.add_argument("--parallelism", metavar="DATA,TENSOR,PIPELINE",
                   help="degrees whose product is --gpus, e.g. 2,4,1 (default: data parallel)")
    s.set_defaults(run=run_submit)
    g = client("job", "one job: state, progress, placement, and why it waits")
    g.add_argument("job_id")
    g.add_argument("--json", action="store_true")
    g.set_defaults(run=run_job)
    j = client("jobs", "list jobs")
    states = [name for name in tpb.JobState.keys() if name != "JOB_STATE_UNSPECIFIED"]  # noqa: SIM118 (enum wrapper)
    j.add_argument("--state", action="append", default=[], choices=states)
    j.add_argument("--tenant", default="")
    j.add_argument("--limit", type=int, default=0, help="at most this many jobs, oldest first (0: all)")
    j.add_argument("--json", action="store_true")
    j.set_defaults(run=run_jobs)
    k = client("cluster", "nodes: GPUs free, agent connected, drained and why, measured utilisation")
    k.add_argument("--json", action="store_true")
    k.set_defaults(run=run_cluster)
    for verb, drained in (("drain", True), ("undrain", False)):
        d = client(verb, f"{verb} a node (operators)" + (": no new work; running jobs stay" if drained else ""))
        d.add_argument("node")
        if drained:
            d.add_argument("--reason", default="", help="kept with the node and shown by `halyard cluster`")
        d.set_defaults(run=run_drain, drained=drained)
    wi = client("whatif", "operators: today's forecast beside one with a change applied to a copy of the live "
                          "state (nothing on the cluster changes); example: halyard whatif --policy tiresias")
    wi.add_argument("--policy", default="", help="switch to this policy (a preset or a pipeline, as --policy)")
    wi.add_argument("--drain", action="append", default=[], metavar="NODE", help="drain this node (repeatable)")
    wi.add_argument("--undrain", action="append", default=[], metavar="NODE", help="undrain this node (repeatable)")
    wi.add_argument("--cancel", action="append", default=[], metavar="JOB", help="cancel this job (repeatable)")
    wi.add_argument("--add-node", action="append", default=[], metavar="SPEC",
                    help="add a node with its agent up (repeatable): KEY=VALUE,... with the keys of a cluster "
                         "file's [[racks.nodes]] and rack, e.g. rack=r3,gpu_type=A100,gpus=8 or rack=r3,count=4; "
                         "keys left out are those of the rack's first node (docs/forecast.md)")
    wi.add_argument("--json", action="store_true")
    wi.set_defaults(run=run_whatif)
    c = client("cancel", "cancel a job")
    c.add_argument("job_id")
    c.set_defaults(run=run_cancel)
    w = client("watch", "stream job events")
    w.add_argument("--after", type=int, default=0, help="resume after this sequence number")
    w.add_argument("--job", default="")
    w.add_argument("--count", type=int, default=0, help="stop after this many events (0: run until interrupted)")
    w.set_defaults(run=run_watch)
    lg = client("logs", "a job's output (stdout and stderr) from the node that ran it; "
                        "example: halyard logs train-7 --follow")
    lg.add_argument("job_id")
    lg.add_argument("--follow", "-f", action="store_true", help="keep printing new output until the attempt ends")
    lg.add_argument("--attempt", type=int, default=0,
                    help="which run of the job (1 = its first; default: the latest), e.g. --attempt 1")
    lg.add_argument("--node", default="", help="whose part of a multi-node job (default: its first node)")
    lg.set_defaults(run=run_logs)


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None


def open_channel(args: argparse.Namespace) -> grpc.Channel:
    """A channel as the flags say: TLS with the cluster CA (and a client certificate), or insecure on loopback.

    ``--control-plane`` may list several addresses (``a:1,b:2``: an active control plane and its standbys):
    the channel goes to the one that leads (:func:`leader_channel`)."""
    targets = [t.strip() for t in args.control_plane.split(",") if t.strip()] or [args.control_plane]
    if args.insecure:
        for target in targets:
            if not is_loopback(target):
                raise ValidationError(f"{target}: insecure mode connects to loopback addresses only",
                                      field="--control-plane")

        def make(target: str) -> grpc.Channel:
            return grpc.insecure_channel(target)
    else:
        if args.ca is None:
            raise ValidationError("give --ca (the cluster CA) and --token or --cert/--key, or --insecure for a "
                                  "control plane on loopback started with --insecure", field="--ca")
        credentials = ClientTLS.from_files(args.ca, args.cert, args.key).credentials()

        def make(target: str) -> grpc.Channel:
            return grpc.secure_channel(target, credentials)
    return make(targets[0]) if len(targets) == 1 else leader_channel(targets, make)


LEADER_METADATA_KEY = "halyard-leader"  # a standby's UNAVAILABLE names the leader (controlplane/standby.py)
PROBE_TIMEOUT_S = 5.0


def leader_channel(targets: list[str], make) -> grpc.Channel:
    """A channel to the leading control plane among ``targets``: the first that answers a health check, or
    the leader a standby names in its answer; :class:`ServerUnreachable` when none does."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    tried: list[str] = []
    for target in targets:
        channel = make(target)
        try:
            # types-grpcio-health-checking's HealthStub declares no methods; the generated class has Check.
            health_pb2_grpc.HealthStub(channel).Check(  # type: ignore[attr-defined]
                health_pb2.HealthCheckRequest(), timeout=PROBE_TIMEOUT_S)
            return channel
        except grpc.RpcError as exc:
            channel.close()
            metadata = exc.trailing_metadata() or ()
            leader = next((str(m.value) for m in metadata if m.key == LEADER_METADATA_KEY), "")
            if leader:
                return make(leader)
            tried.append(f"{target}: {exc.code().name}: {exc.details()}")
    raise ServerUnreachable("no control plane leads among the addresses given: " + "; ".join(tried))


def call_metadata(args: argparse.Namespace) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {args.token}"),) if args.token else ()


def _stub(args: argparse.Namespace) -> tuple[grpc.Channel, jgrpc.JobServiceStub]:
    channel = open_channel(args)
    return channel, jgrpc.JobServiceStub(channel)


def _rpc(args: argparse.Namespace, fn, request):
    try:
        return fn(request, metadata=call_metadata(args))
    except grpc.RpcError as exc:
        raise rpc_failed(exc, args) from None


# Job-file keys and the flag each one stands for (the file's key is the flag's name).
_JOB_FILE_KEYS = {"id": "job_id", "model": "model", "gpus": "gpus", "iterations": "iterations",
                  "duration_s": "duration_s", "batch_size": "batch_size", "gpu_type": "gpu_type", "tenant": "tenant",
                  "command": "job_command", "env": "env", "priority": "priority", "deadline_s": "deadline_s",
                  "min_gpus": "min_gpus", "max_gpus": "max_gpus", "logical_workers": "logical_workers",
                  "parallelism": "parallelism"}


def _job_options(args: argparse.Namespace) -> list[dict[str, object]]:
    """Each job's options: the job file's (one job, or one per ``[[job]]`` table), then every flag
    given on the command line over them."""
    tables: list[dict[str, object]] = [{}]
    if args.file is not None:
        try:
            table = tomllib.loads(args.file.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ValidationError(f"{args.file}: {exc}", field="--file") from None
        many = table.get("job")
        if many is not None:
            if not isinstance(many, list) or not many or set(table) != {"job"}:
                raise ValidationError(f"{args.file}: a file of many jobs holds only [[job]] tables, at least one",
                                      field="--file")
            if args.job_id is not None:
                raise ValidationError(f"--id names one job; {args.file} holds {len(many)}", field="--id")
            tables = many
        else:
            tables = [table]
    return [_one_job(args, table, f"{args.file}" + (f": job {i + 1}" if len(tables) > 1 else ""))
            for i, table in enumerate(tables)]


def _one_job(args: argparse.Namespace, table: dict[str, object], where: str) -> dict[str, object]:
    unknown = sorted(set(table) - set(_JOB_FILE_KEYS))
    if unknown:
        raise ValidationError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(_JOB_FILE_KEYS)})",
                              field="--file")
    options = {_JOB_FILE_KEYS[k]: v for k, v in table.items()}
    for name in _JOB_FILE_KEYS.values():
        value = getattr(args, name)
        if value is not None and value != []:
            options[name] = value
    for name, flag in (("job_id", "--id"), ("model", "--model"), ("gpus", "--gpus")):
        if name not in options:
            raise ValidationError(f"is required (give the flag, or its key in --file{': ' + where if table else ''})",
                                  field=flag)
    if "iterations" not in options and "duration_s" not in options:
        raise ValidationError("give --iterations or --duration-s (or iterations / duration_s in --file)",
                              field="--iterations")
    return options


def _text(o: Mapping[str, object], key: str, default: str | None = None) -> str:
    """Job option ``key`` (``o[key]``, or ``o.get(key) or default`` where a default is given) when it is
    text; else the ``TypeError`` the ``JobSpec`` constructor raises for it, naming the key."""
    value = o[key] if default is None else o.get(key) or default
    if not isinstance(value, str):
        raise TypeError(f"{key} = {value!r} is not text")
    return value


def _whole(o: Mapping[str, object], key: str, default: int | None = None) -> int:
    """As :func:`_text`, for a whole number (not a bool, which protobuf refuses for an integer field)."""
    value = o[key] if default is None else o.get(key) or default
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{key} = {value!r} is not a whole number")
    return value


def _real(o: Mapping[str, object], key: str, default: float | None = None) -> float:
    """As :func:`_text`, for a number (an int too, as protobuf takes one for a double field)."""
    value = o[key] if default is None else o.get(key) or default
    if not isinstance(value, int | float):
        raise TypeError(f"{key} = {value!r} is not a number")
    return value


def _items(key: str, value: object) -> Iterable[object]:
    """Job option ``key``'s items (a list's, a table's keys), or a ``TypeError`` naming it."""
    if not isinstance(value, Iterable):
        raise TypeError(f"{key} = {value!r} is not a list")
    return value


def _env_of(value: object) -> dict[str, str]:
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    env = {}
    for item in _items("env", value or ()):
        key, sep, val = str(item).partition("=")
        if not sep or not key:
            raise ValidationError(f"expected KEY=VALUE, got {item!r}", field="--env")
        env[key] = val
    return env


def _spec_of(o: dict[str, object]) -> tpb.JobSpec:
    command = o.get("job_command") or ""
    parallelism = o.get("parallelism")
    try:
        spec = tpb.JobSpec(job_id=_text(o, "job_id"), model=_text(o, "model"), num_gpus=_whole(o, "gpus"),
                           iterations=_whole(o, "iterations", 0), duration_s=_real(o, "duration_s", 0.0),
                           batch_size=_whole(o, "batch_size", 0), gpu_type=_text(o, "gpu_type", ""),
                           tenant=_text(o, "tenant", ""), env=_env_of(o.get("env")),
                           command=(shlex.split(command) if isinstance(command, str)
                                    else [str(c) for c in _items("command", command)]),
                           priority=_whole(o, "priority", 0), min_gpus=_whole(o, "min_gpus", 0),
                           max_gpus=_whole(o, "max_gpus", 0), logical_workers=_whole(o, "logical_workers", 0))
        if o.get("deadline_s") is not None:
            spec.deadline = _real(o, "deadline_s")
        text = (None if not parallelism else parallelism if isinstance(parallelism, str)
                else ",".join(str(x) for x in _items("parallelism", parallelism)))
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"a value has the wrong type: {exc}", field="--file") from None
    if text is not None:
        spec.parallelism.CopyFrom(_parallelism(text))
    return spec


def _print_submitted(job: jpb.Job) -> None:
    print(f"{job.spec.job_id} {enum_name(tpb.JobState, job.state)} ({job.iterations_total} iterations)")
    if job.ignored:
        print(f"halyard submit: note: {job.spec.job_id}: {job.ignored}", file=sys.stderr)


# Protobuf framing around each job of a SubmitJobs call: the tags and length prefixes of the
# repeated SubmitJobRequest and its spec field (at most 1 + 5 bytes each), rounded up.
_FRAMING_BYTES_PER_JOB = 16


def _batches(specs: list[tpb.JobSpec]) -> list[list[tpb.JobSpec]]:
    """SubmitJobs calls within both limits the control plane sets: MAX_SUBMIT_BATCH jobs and
    MAX_REQUEST_BYTES a message (long commands or environments fill a call before the count does)."""
    batches: list[list[tpb.JobSpec]] = []
    size = 0
    for spec in specs:
        cost = spec.ByteSize() + _FRAMING_BYTES_PER_JOB
        if not batches or len(batches[-1]) == MAX_SUBMIT_BATCH or size + cost > MAX_REQUEST_BYTES:
            batches.append([])
            size = 0
        batches[-1].append(spec)
        size += cost
    return batches


def run_submit(args: argparse.Namespace) -> int:
    """One job: SubmitJob. A file of many: SubmitJobs in calls within the request limits, each job answered on its
    own line; any refused job makes the exit status that of a rejected call (4)."""
    specs = [_spec_of(o) for o in _job_options(args)]
    channel, stub = _stub(args)
    with channel:
        if len(specs) == 1:
            _print_submitted(_rpc(args, stub.SubmitJob, jpb.SubmitJobRequest(spec=specs[0])))
            return 0
        refused = 0
        for chunk in _batches(specs):
            reply = _rpc(args, stub.SubmitJobs, jpb.SubmitJobsRequest(
                jobs=[jpb.SubmitJobRequest(spec=spec) for spec in chunk]))
            for spec, result in zip(chunk, reply.results, strict=True):
                if result.WhichOneof("result") == "job":
                    _print_submitted(result.job)
                else:
                    refused += 1
                    code = grpc.StatusCode.INVALID_ARGUMENT.name
                    code = next((c.name for c in grpc.StatusCode if c.value[0] == result.error.code), code)
                    print(f"halyard submit: error: {spec.job_id}: {code}: {result.error.message}", file=sys.stderr)
    if refused:
        raise RpcFailed(f"{refused} of {len(specs)} jobs refused (each is named above)")
    return 0


def run_jobs(args: argparse.Namespace) -> int:
    if args.limit < 0:
        raise ValidationError(f"must be >= 0, got {args.limit}", field="--limit")
    channel, stub = _stub(args)
    jobs, token = [], ""
    with channel:
        while True:
            page = _rpc(args, stub.ListJobs, jpb.ListJobsRequest(page_size=500, page_token=token, tenant=args.tenant,
                                                           states=[tpb.JobState.Value(s) for s in args.state]))
            jobs.extend(page.jobs)
            token = page.next_page_token
            if not token or (args.limit and len(jobs) >= args.limit):
                break
    jobs = jobs[:args.limit] if args.limit else jobs
    if args.json:
        print(json.dumps([MessageToDict(j, preserving_proto_field_name=True) for j in jobs], indent=2))
        return 0
    table = Table("job", "state", "model", "GPUs", "progress", "nodes / why waiting / why it ended")
    for j in jobs:
        done = f"{100 * j.iterations_done / j.iterations_total:.0f}%" if j.iterations_total else "-"
        table.add_row(j.spec.job_id, enum_name(tpb.JobState, j.state), j.spec.model, str(j.spec.num_gpus), done,
                      ",".join(n.node for n in j.allocation.nodes) or waiting(j) or j.end_reason)
    Console().print(table)
    return 0


def _parallelism(text: str) -> tpb.Parallelism:
    try:
        data, tensor, pipeline = (int(x) for x in text.split(","))
    except ValueError:
        raise ValidationError(f"expected DATA,TENSOR,PIPELINE (three whole numbers), got {text!r}",
                              field="--parallelism") from None
    return tpb.Parallelism(data=data, tensor=tensor, pipeline=pipeline)


def _cluster_stub(args: argparse.Namespace) -> tuple[grpc.Channel, cgrpc.ClusterServiceStub]:
    channel = open_channel(args)
    return channel, cgrpc.ClusterServiceStub(channel)


def run_cluster(args: argparse.Namespace) -> int:
    channel, stub = _cluster_stub(args)
    with channel:
        cluster = _rpc(args, stub.GetCluster, cpb.GetClusterRequest())
    if args.json:
        print(json.dumps(MessageToDict(cluster, preserving_proto_field_name=True), indent=2))
        return 0
    table = Table("node", "type", "GPUs free", "agent", "utilisation", "drained",
                  title=f"{cluster.name}: {cluster.free_gpus}/{cluster.total_gpus} GPUs free, "
                        f"{cluster.running_jobs} running, {cluster.pending_jobs} pending")
    for n in cluster.nodes:
        util = f"{100 * n.gpu_utilization:.0f}%" if n.HasField("gpu_utilization") else "-"
        table.add_row(n.spec.name, n.spec.gpu_type, f"{n.free_gpus}/{n.spec.gpus}",
                      (f"connected ({n.backend})" if n.backend else "connected") if n.connected else "absent", util,
                      n.drain_reason if n.drained else "")
    Console().print(table)
    return 0


def run_drain(args: argparse.Namespace) -> int:
    channel, stub = _cluster_stub(args)
    with channel:
        if args.drained:
            node = _rpc(args, stub.DrainNode, cpb.NodeRequest(node=args.node, reason=args.reason))
        else:
            node = _rpc(args, stub.UndrainNode, cpb.NodeRequest(node=args.node))
    print(f"{node.spec.name} {'drained: ' + node.drain_reason if node.drained else 'takes work'}")
    return 0


def waiting(job: jpb.Job) -> str:
    """"CODE (stage): reason" for a job that waits and was told why, else ""."""
    if not job.HasField("wait"):
        return ""
    return f"{enum_name(jpb.WaitCode, job.wait.code)} ({job.wait.stage}): {job.wait.reason}"


def run_job(args: argparse.Namespace) -> int:
    channel, stub = _stub(args)
    with channel:
        job = _rpc(args, stub.GetJob, jpb.GetJobRequest(job_id=args.job_id))
    if args.json:
        print(json.dumps(MessageToDict(job, preserving_proto_field_name=True), indent=2))
        return 0
    s = job.spec
    lines = [f"job:        {s.job_id} (tenant {s.tenant or 'default'})",
             f"state:      {enum_name(tpb.JobState, job.state)}",
             f"model:      {s.model}, {s.num_gpus} GPUs{' of type ' + s.gpu_type if s.gpu_type else ''}",
             f"progress:   {job.iterations_done:.0f} of {job.iterations_total} iterations, "
             f"{job.preemptions} preemptions, queued {job.queued_s:.0f} s"]
    if job.allocation.nodes:
        lines.append("placement:  " + ", ".join(f"{n.node}[{','.join(map(str, n.gpus))}]"
                                                 for n in job.allocation.nodes))
    if job.HasField("wait"):
        lines.append(f"waiting:    {waiting(job)}")
    if job.env_names:
        lines.append(f"env:        {' '.join(job.env_names)} (names only; the values go to its agents alone)")
    if job.end_reason:
        label = "failed:" if job.state == tpb.FAILED else "ended:"
        lines.append(f"{label:<12}{job.end_reason}")
    if job.HasField("forecast"):
        lines.append(f"forecast:   {forecast_line(job.forecast, time.time())}")
    print("\n".join(lines))
    return 0


def _about(seconds: float) -> str:
    """A rounded duration: "about 35 min", "about 3.1 h", "about 2.5 days"."""
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"about {seconds:.0f} s"
    if seconds < 90 * 60:
        return f"about {seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"about {seconds / 3600:.1f} h"
    return f"about {seconds / 86400:.1f} days"


def _utc(unix: float, now: float) -> str:
    """HH:MM UTC, with the date when it is not today."""
    t, today = time.gmtime(unix), time.gmtime(now)
    same_day = (t.tm_year, t.tm_yday) == (today.tm_year, today.tm_yday)
    return time.strftime("%H:%M UTC" if same_day else "%Y-%m-%d %H:%M UTC", t)


def forecast_line(f: jpb.JobForecast, now: float) -> str:
    """e.g. "expected to start in about 35 min (14:02 UTC), finish around 19:40 UTC; forecast made 20 s ago"."""
    parts = []
    if f.HasField("expected_start_unix"):
        band = ""
        if f.HasField("start_p10"):
            low, high = (_about(x - f.made_at).removeprefix("about ") for x in (f.start_p10, f.start_p90))
            band = f" (p10-p90: {low} to {high} after the forecast)"
        parts.append(f"expected to start in {_about(f.expected_start_unix - now)} "
                     f"({_utc(f.expected_start_unix, now)}){band}")
    if f.HasField("expected_finish_unix"):
        parts.append(f"finish around {_utc(f.expected_finish_unix, now)}")
    if not parts:
        parts.append("not expected to start within the forecast horizon")
    return f"{', '.join(parts)}; forecast made {_about(now - f.made_at_unix).removeprefix('about ')} ago ({f.assumes})"


def _move(seconds: float) -> str:
    return f"{_about(abs(seconds)).removeprefix('about ')} {'later' if seconds > 0 else 'earlier'}"


def run_whatif(args: argparse.Namespace) -> int:
    channel, stub = _cluster_stub(args)
    request = cpb.WhatIfRequest(policy=args.policy, drain=args.drain, undrain=args.undrain, cancel=args.cancel,
                                add_node=parse_node_specs(args.add_node))
    with channel:
        answer = _rpc(args, stub.WhatIf, request)
    if args.json:
        print(json.dumps(MessageToDict(answer, preserving_proto_field_name=True), indent=2))
        return 0
    today, changed = answer.today, answer.changed
    table = Table("", f"today ({today.policy})", f"changed ({changed.policy})",
                  title=f"what if: {answer.change} ({today.jobs} jobs present)")
    for name, a, b in (("avg wait", today.avg_wait_s, changed.avg_wait_s),
                       ("p99 wait", today.p99_wait_s, changed.p99_wait_s),
                       ("avg JCT", today.avg_jct_s, changed.avg_jct_s),
                       ("p99 JCT", today.p99_jct_s, changed.p99_jct_s)):
        table.add_row(name, _about(a).removeprefix("about "), _about(b).removeprefix("about "))
    if today.unfinished or changed.unfinished:
        table.add_row("not ended in horizon", str(today.unfinished), str(changed.unfinished))
    Console().print(table)
    said = [f"{answer.change}: avg wait {_about(today.avg_wait_s).removeprefix('about ')} -> "
            f"{_about(changed.avg_wait_s).removeprefix('about ')}"]
    for m in answer.moves[:3]:
        if m.HasField("start_today") and m.HasField("start_changed"):
            said.append(f"{m.job_id} starts {_move(m.start_changed - m.start_today)}")
        else:
            said.append(f"{m.job_id} {'no longer starts' if m.HasField('start_today') else 'now starts'} "
                        "within the horizon")
    print("; ".join(said))
    return 0


def run_cancel(args: argparse.Namespace) -> int:
    channel, stub = _stub(args)
    with channel:
        job = _rpc(args, stub.CancelJob, jpb.CancelJobRequest(job_id=args.job_id))
    print(f"{job.spec.job_id} {enum_name(tpb.JobState, job.state)}")
    return 0


def run_watch(args: argparse.Namespace) -> int:
    channel, stub = _stub(args)
    seen = 0
    with channel:
        try:
            for event in stub.WatchEvents(jpb.WatchEventsRequest(after_seq=args.after, job_id=args.job),
                                          metadata=call_metadata(args)):
                print(f"{event.seq} t={event.time:.1f} {event.job_id} {event.kind} {event.detail}".rstrip(), flush=True)
                seen += 1
                if args.count and seen >= args.count:
                    break
        except grpc.RpcError as exc:
            raise rpc_failed(exc, args) from None
    return 0


def run_logs(args: argparse.Namespace) -> int:
    if args.attempt < 0:
        raise ValidationError(f"must be 1 or more (0: the latest), got {args.attempt}", field="--attempt")
    channel, stub = _stub(args)
    out = sys.stdout.buffer
    expected = 0  # the offset the next byte should have
    with channel:
        try:
            for chunk in stub.StreamLogs(jpb.StreamLogsRequest(job_id=args.job_id, attempt=args.attempt,
                                                               follow=args.follow, node=args.node),
                                         metadata=call_metadata(args)):
                if chunk.offset > expected:
                    print(f"[halyard: {chunk.offset - expected} bytes of output before this were dropped by the "
                          "agent's size cap]", file=sys.stderr, flush=True)
                out.write(chunk.data)
                out.flush()
                expected = chunk.offset + len(chunk.data)
        except grpc.RpcError as exc:
            raise rpc_failed(exc, args) from None
    return 0
