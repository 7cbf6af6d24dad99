"""``halyard agent``: the node agent daemon.

Apart from the control plane's command (cli/controlplane.py) so that starting an agent imports nothing of
the control plane, the policies, scipy or pyarrow: an agent on every node, restarted by a supervisor or
started by the hundred by ``halyard replay --agents processes``, pays only for gRPC and its backend
(tests/test_light_installs.py holds it to that; docs/operations.md gives the start-up times).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from pathlib import Path

import grpc
import structlog

from halyard.agent.base import FATAL_CODES
from halyard.agent.cluster_copy import ClusterCopy, ClusterMismatch
from halyard.agent.joblogs import DEFAULT_MAX_BYTES
from halyard.cli import EXIT_REJECTED
from halyard.cli.daemon_options import add_insecure_option, add_log_options
from halyard.datamodel import ValidationError
from halyard.logs import configure_logging
from halyard.tls import ClientTLS, is_loopback

log = structlog.get_logger("halyard")


def register(commands: argparse._SubParsersAction) -> None:
    ag = commands.add_parser("agent", help="run a node agent")
    ag.add_argument("--control-plane", required=True,
                    help="HOST:PORT of the control plane, or several, comma-separated: the active one and its "
                         "standbys (the agent follows the leader)")
    ag.add_argument("--node", required=True, help="this node's name in the cluster")
    ag.add_argument("--backend", default="emulated", choices=["emulated", "process", "gpu"],
                    help="emulated: the performance model runs the jobs; process: each job's command runs as real "
                         "processes (no GPU needed); gpu: process plus NVML discovery, health and "
                         "CUDA_VISIBLE_DEVICES (needs nvidia-ml-py: pip install 'halyard[gpu]')")
    ag.add_argument("--cluster", default=None, help="cluster file to read this node's spec from (optional)")
    ag.add_argument("--certs", type=Path, default=None, metavar="DIR",
                    help="DIR/ca.crt and this node's DIR/node-NODE.crt and .key (`halyard certs issue node NODE`); "
                         "connect to the control plane's --agent-listen port")
    add_insecure_option(ag, "plaintext to a control plane on a loopback address, no certificate")
    ag.add_argument("--work-dir", type=Path, default=Path("halyard-work"),
                    help="process/gpu: where job checkpoints (checkpoints/JOB) and logs go; point it at shared "
                         "storage when jobs span machines (default ./halyard-work)")
    ag.add_argument("--host", action="append", default=[], metavar="NODE=ADDRESS",
                    help="process/gpu: the address of a node for HALYARD_MASTER_ADDR (default: the node's name); "
                         "repeat for each node")
    ag.add_argument("--run-as", default=None, metavar="USER",
                    help="process/gpu: run every job as this unprivileged user (name or uid); the agent must be "
                         "root. Default: jobs run as the agent's own user")
    ag.add_argument("--log-max-mb", type=float, default=DEFAULT_MAX_BYTES / 2**20, metavar="MIB",
                    help="process/gpu: output kept per job attempt (stdout and stderr, for `halyard logs`); past it "
                         f"the oldest half goes (default {DEFAULT_MAX_BYTES >> 20}), e.g. --log-max-mb 256")
    ag.add_argument("--pass-env", action="append", default=[], metavar="NAME",
                    help="process/gpu: also pass this variable of the agent's environment on to jobs (a name, or a "
                         "prefix ending in *); repeat for each. Jobs get only PATH, HOME, the locale, library paths "
                         "and CUDA_*/NCCL_* of it otherwise (never HALYARD_*: docs/security.md)")
    add_log_options(ag)
    ag.set_defaults(run=run_agent)


def run_agent(args: argparse.Namespace) -> int:
    configure_logging(json=True if args.log_json else None, level=args.log_level)
    copy = ClusterCopy.load(args.cluster) if args.cluster else None  # registers with its digest, not for the file
    node = copy.cluster.node(args.node) if copy is not None else args.node
    args.tls = _agent_tls(args)
    agent = _make_agent(args, node, copy)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        runner = agent.start()
        done, _ = await asyncio.wait({runner, asyncio.create_task(stop.wait())}, return_when=asyncio.FIRST_COMPLETED)
        await agent.leave()  # SIGTERM/SIGINT: tell the control plane this node left, not went silent
        if runner in done and runner.exception() is not None:
            raise runner.exception()

    try:
        asyncio.run(main())
    except grpc.aio.AioRpcError as exc:
        if exc.code() not in (*FATAL_CODES, grpc.StatusCode.ALREADY_EXISTS):
            raise
        return EXIT_REJECTED  # the agent has logged the control plane's refusal, in one line: no traceback
    except ClusterMismatch:
        return EXIT_REJECTED  # logged too: the control plane's cluster file disagrees with itself
    return 0


def _make_agent(args: argparse.Namespace, node, copy: ClusterCopy | None):
    """The agent of the chosen backend; the real backends are imported only when chosen."""
    if args.backend == "emulated":
        from halyard.agent.emulated import EmulatedAgent

        return EmulatedAgent(args.control_plane, node, tls=args.tls, cluster=copy)
    hosts = {}
    for item in args.host:
        name, sep, address = item.partition("=")
        if not sep or not name or not address:
            raise ValidationError(f"expected NODE=ADDRESS, got {item!r}", field="--host")
        hosts[name] = address
    if args.backend == "process":
        from halyard.agent.process import ProcessAgent

        return ProcessAgent(args.control_plane, node, work_dir=args.work_dir, hosts=hosts, run_as=args.run_as,
                            tls=args.tls, cluster=copy, log_max_bytes=int(args.log_max_mb * 2**20),
                            pass_env=tuple(args.pass_env))
    from halyard.agent.gpu import GpuAgent  # raises GpuUnavailable (exit 2, one line) without NVML

    return GpuAgent(args.control_plane, node, work_dir=args.work_dir, hosts=hosts, run_as=args.run_as, tls=args.tls,
                    cluster=copy, log_max_bytes=int(args.log_max_mb * 2**20), pass_env=tuple(args.pass_env))


def _agent_tls(args: argparse.Namespace) -> ClientTLS | None:
    if args.certs is not None and args.insecure:
        raise ValidationError("give --certs or --insecure, not both", field="--insecure")
    if args.certs is not None:
        return ClientTLS.for_node(args.certs, args.node)
    if not args.insecure:
        raise ValidationError("no TLS material: give --certs DIR with this node's certificate "
                              "(`halyard certs issue node NODE`), or --insecure for a control plane on a loopback "
                              "address", field="--certs")
    for target in args.control_plane.split(","):
        if not is_loopback(target.strip()):
            raise ValidationError(f"{target.strip()}: insecure mode connects to loopback addresses only",
                                  field="--control-plane")
    log.warning("INSECURE MODE: plaintext stream, no certificate", node=args.node, control_plane=args.control_plane)
    return None
