"""``halyard controlplane`` and ``halyard agent``: the production daemons."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import time
import tomllib
from pathlib import Path

import grpc
import structlog

from halyard.agent.base import FATAL_CODES
from halyard.agent.cluster_copy import ClusterCopy, ClusterMismatch
from halyard.agent.joblogs import DEFAULT_MAX_BYTES
from halyard.cli import EXIT_REJECTED
from halyard.cli.policies import policy_help
from halyard.cli.simulate import add_catalog_option, add_contention_option
from halyard.clock import ScaledClock
from halyard.controlplane.auth import TokenFile
from halyard.controlplane.disruption import (
    LARGE_CLUSTER_SIZE_THRESHOLD,
    SECONDARY_EVICTION_RATE,
    UNHEALTHY_ZONE_THRESHOLD,
    DisruptionSettings,
)
from halyard.controlplane.forecast import DEFAULT_PERIOD_S, ForecastSettings
from halyard.controlplane.leadership import DEFAULT_LEASE, Leadership, LeaseSettings, LostLeadership
from halyard.controlplane.server import ControlPlaneServer
from halyard.controlplane.service import (
    DEFAULT_HEARTBEAT_S,
    DEFAULT_HEARTBEAT_TIMEOUT_S,
    GROUP_COMMIT_WINDOW_S,
    MAX_GROUP_COMMIT_WINDOW_MS,
    ControlPlane,
)
from halyard.controlplane.standby import StandbyServer
from halyard.controlplane.store import SqliteStore
from halyard.controlplane.store_postgres import PostgresStore, is_postgres_url
from halyard.controlplane.storelock import StoreLock
from halyard.controlplane.timing import performance_model_for
from halyard.datamodel import ValidationError, parse_cluster, read_cluster_text
from halyard.emulator.catalog import load_model_catalog
from halyard.logs import configure_logging
from halyard.policies import make_policy
from halyard.tls import ClientTLS, ServerTLS, is_loopback

log = structlog.get_logger("halyard")


def register(commands: argparse._SubParsersAction) -> None:
    cp = commands.add_parser("controlplane", help="run the control plane daemon")
    cp.add_argument("--cluster", required=True, help="built-in cluster name or TOML path")
    cp.add_argument("--db", required=True,
                    help="the state: a SQLite file (created if missing; one control plane per file), or "
                         "postgresql://USER@HOST:PORT/DB for active and standby control planes (pip install "
                         "'halyard[postgres]'; see docs/operations.md, High availability)")
    add_lease_options(cp)
    cp.add_argument("--listen", default="127.0.0.1:50051",
                    help="gRPC HOST:PORT for clients (default 127.0.0.1:50051); TLS, bearer tokens")
    cp.add_argument("--agent-listen", default="127.0.0.1:50052",
                    help="gRPC HOST:PORT for agents (default 127.0.0.1:50052): mutual TLS, node certificates; "
                         "unused with --insecure (agents use --listen)")
    cp.add_argument("--certs", type=Path, default=None, metavar="DIR",
                    help="TLS material from `halyard certs init`: DIR/ca.crt, DIR/controlplane.crt, "
                         "DIR/controlplane.key")
    cp.add_argument("--tokens", type=Path, default=None, metavar="FILE",
                    help="client bearer tokens (`halyard tokens create --file FILE`); re-read when it changes")
    add_insecure_option(cp, "no TLS: one plaintext port on a loopback address; agents are not authenticated, "
                            "and without --tokens every client is an operator")
    cp.add_argument("--http", default=None,
                    help="[HOST:]PORT for /healthz, /metrics, the web dashboard (/) and its JSON API; HOST defaults "
                         "to 127.0.0.1. /api/ and the dashboard take the same tokens as gRPC")
    cp.add_argument("--http-host", action="append", default=[], metavar="NAME",
                    help="a Host name browsers and scrapers reach the HTTP port by, besides its own address "
                         "(repeat; e.g. the name of a proxy in front of it). Requests naming any other host are "
                         "refused, so a web page cannot reach the port through DNS rebinding")
    cp.add_argument("--policy", default="fifo", help=policy_help())
    cp.add_argument("--round-s", type=float, default=300.0)
    cp.add_argument("--forecast-period-s", type=float, default=DEFAULT_PERIOD_S,
                    help="refresh every job's start/finish forecast this often, wall seconds (0: only on demand, "
                         "when a job the last forecast lacks is asked for); each is a forked run of the live state")
    cp.add_argument("--forecast-samples", type=int, default=0, metavar="K",
                    help="also K runs with arrivals sampled from the recent rate and mix, for a p10-p90 band")
    cp.add_argument("--no-forecast", action="store_true", help="no forecasts (Job.forecast unset, WhatIf refused)")
    add_contention_option(cp)
    add_catalog_option(cp)  # sent to the emulated agents at registration
    cp.add_argument("--speedup", type=float, default=1.0, help="cluster seconds per wall second (1 = real time)")
    cp.add_argument("--heartbeat-s", type=float, default=DEFAULT_HEARTBEAT_S)
    cp.add_argument("--heartbeat-timeout-s", type=float, default=DEFAULT_HEARTBEAT_TIMEOUT_S)
    cp.add_argument("--group-commit-window-ms", type=float, default=1e3 * GROUP_COMMIT_WINDOW_S,
                    help="while submissions arrive faster than this apart, one waits at most this long for "
                         "the next so they share a commit and a pass (0: never wait)")
    cp.add_argument("--unhealthy-zone-threshold", type=float, default=UNHEALTHY_ZONE_THRESHOLD,
                    help="when at least this share of the agents (and at least 3) is silent at once, hold their "
                         "nodes and jobs instead of declaring them lost (Kubernetes' flag of the same name)")
    cp.add_argument("--secondary-node-eviction-rate", type=float, default=SECONDARY_EVICTION_RATE,
                    help="nodes per second declared lost while that many are silent (0 in a cluster of at most "
                         "--large-cluster-size-threshold nodes; none while all are silent)")
    cp.add_argument("--large-cluster-size-threshold", type=int, default=LARGE_CLUSTER_SIZE_THRESHOLD)
    add_log_options(cp)
    cp.set_defaults(run=run_controlplane)

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


LOG_LEVELS = ("debug", "info", "warning", "error")
DAEMONS = ("controlplane", "agent")


def add_lease_options(parser: argparse.ArgumentParser) -> None:
    """The leadership lease of control planes on one PostgreSQL store (leadership.py; Kubernetes' defaults)."""
    parser.add_argument("--lease-duration-s", type=float, default=DEFAULT_LEASE.duration_s,
                        help="postgresql: a leader that stops renewing is replaced this long after its last renewal "
                             f"(default {DEFAULT_LEASE.duration_s:g}); shorter fails over sooner, and steps a leader "
                             "down sooner when the database is slow")
    parser.add_argument("--lease-renew-deadline-s", type=float, default=DEFAULT_LEASE.renew_deadline_s,
                        help="postgresql: a leader that could not renew for this long steps down (default "
                             f"{DEFAULT_LEASE.renew_deadline_s:g}; less than the lease)")
    parser.add_argument("--lease-retry-period-s", type=float, default=DEFAULT_LEASE.retry_period_s,
                        help="postgresql: how often the leader renews and standbys try to take over (default "
                             f"{DEFAULT_LEASE.retry_period_s:g})")
    parser.add_argument("--advertise", default=None, metavar="HOST:PORT",
                        help="postgresql: where clients reach this control plane, as standbys name it (default: "
                             "--listen)")
    parser.add_argument("--agent-advertise", default=None, metavar="HOST:PORT",
                        help="postgresql: where agents reach it (default: --agent-listen, or --listen with --insecure)")


def add_log_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-json", action="store_true", help="JSON logs even on a terminal")
    parser.add_argument("--log-level", default=os.environ.get("HALYARD_LOG_LEVEL", "info"), choices=LOG_LEVELS,
                        help="the least severe level logged, e.g. --log-level warning (env HALYARD_LOG_LEVEL; "
                             "default info)")
    parser.add_argument("--config", type=Path, default=None, metavar="FILE",
                        help="a TOML file of this command's options, e.g. `db = \"state.db\"` or `insecure = true` "
                             "(env HALYARD_CONFIG); options on the command line win")


def expand_config(argv: list[str]) -> list[str]:
    """``halyard controlplane|agent --config FILE`` (or ``HALYARD_CONFIG``): the file's keys become the
    options they name, ahead of the command line's, so a flag given there overrides the file.

    ``key = value`` gives ``--key value``, ``key = true`` gives ``--key``, a list repeats the option;
    a key that is no option of the command is refused by the parser as ``--key``, naming it.
    """
    if not argv or argv[0] not in DAEMONS:
        return argv
    path: str | None = os.environ.get("HALYARD_CONFIG")
    rest = list(argv[1:])
    for i, arg in enumerate(rest):
        if arg == "--config" and i + 1 < len(rest):
            path = rest[i + 1]
        elif arg.startswith("--config="):
            path = arg.split("=", 1)[1]
    if not path:
        return argv
    try:
        table = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValidationError(f"{path}: {exc}", field="--config") from None
    options: list[str] = []
    for key, value in table.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            options.append(flag)
        elif value is False:
            continue
        elif isinstance(value, list):
            for item in value:
                options += [flag, str(item)]
        else:
            options += [flag, str(value)]
    return [argv[0], *options, *rest]


def add_insecure_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--insecure", action="store_true", help=f"insecure mode, for local use and tests: {what}")


def _positive(value: float, flag: str) -> None:
    if not value > 0:
        raise ValidationError("must be positive", field=flag)


def run_controlplane(args: argparse.Namespace) -> int:
    configure_logging(json=True if args.log_json else None, level=args.log_level)
    for flag in ("round_s", "speedup", "heartbeat_s", "heartbeat_timeout_s"):
        _positive(getattr(args, flag), "--" + flag.replace("_", "-"))
    if not 0 <= args.group_commit_window_ms <= MAX_GROUP_COMMIT_WINDOW_MS:
        raise ValidationError(f"must be 0..{MAX_GROUP_COMMIT_WINDOW_MS:g} ms, got {args.group_commit_window_ms:g}",
                              field="--group-commit-window-ms")
    disruption = DisruptionSettings(args.unhealthy_zone_threshold, args.secondary_node_eviction_rate,
                                    args.large_cluster_size_threshold)
    tls = _server_tls(args)
    text, source = read_cluster_text(args.cluster)
    cluster = parse_cluster(text, source=source)
    policy = make_policy(args.policy)
    leadership = None
    if is_postgres_url(args.db):
        settings = LeaseSettings(args.lease_duration_s, args.lease_renew_deadline_s, args.lease_retry_period_s)
        store = PostgresStore(args.db)
        # Cluster time continues across restarts and failovers: the origin is fixed when the database is
        # created (by whichever control plane comes first; the others read it).
        clock = ScaledClock(args.speedup)
        clock = ScaledClock(args.speedup, wall_origin=float(store.set_meta_once(CLOCK_ORIGIN_META,
                                                                                  repr(clock.wall_origin))))
        clients = args.advertise or args.listen
        agents = args.agent_advertise or (clients if tls is None else args.agent_listen)
        leadership = Leadership(args.db, {"clients": clients, "agents": agents}, settings)
    else:
        lock = StoreLock(args.db)
        lock.acquire()  # a second control plane on this file exits here, naming the holder (storelock.py)
        store = SqliteStore(args.db)
        origin = store.get_meta(CLOCK_ORIGIN_META)
        # Cluster time continues across restarts: the origin is fixed when the database is created.
        clock = ScaledClock(args.speedup, wall_origin=float(origin) if origin else None)
        if origin is None:
            store.set_meta(CLOCK_ORIGIN_META, repr(clock.wall_origin))
    perf = performance_model_for(policy, contention=args.contention, catalog=load_model_catalog(args.catalog))
    cp = ControlPlane(cluster, policy, perf, clock, store, cluster_toml=text, round_s=args.round_s,
                      heartbeat_s=args.heartbeat_s, heartbeat_timeout_s=args.heartbeat_timeout_s,
                      group_commit_window_s=args.group_commit_window_ms / 1e3, disruption=disruption)
    server = ControlPlaneServer(cp, listen=args.listen, http=args.http, tls=tls, agent_listen=args.agent_listen,
                               tokens=TokenFile(args.tokens) if args.tokens else None,
                               http_hosts=tuple(args.http_host),
                               forecast=None if args.no_forecast else _forecast_settings(args))
    return asyncio.run(_serve(server, leadership))


def _forecast_settings(args: argparse.Namespace) -> ForecastSettings:
    if not args.forecast_period_s >= 0:
        raise ValidationError("must be >= 0 (0: only on demand)", field="--forecast-period-s")
    if args.forecast_samples < 0:
        raise ValidationError("must be >= 0", field="--forecast-samples")
    return ForecastSettings(period_s=args.forecast_period_s, samples=args.forecast_samples)


EXIT_STORE_FAILED = 3
CLOCK_ORIGIN_META = "clock_origin_unix_s"


async def _serve(server: ControlPlaneServer, leadership: Leadership | None = None) -> int:
    """Serve until SIGTERM/SIGINT (exit 0) or a failure of the state store or loss of the leadership
    (exit 3, for a supervisor: restarted, it reloads the last committed state, or waits as a standby).

    With ``leadership`` (a PostgreSQL store) it first waits as a standby (:mod:`standby`) until it
    leads, then fences the store with its epoch and serves; it renews the lease meanwhile."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if leadership is not None and not await _lead(server, leadership, stop):
        await leadership.close()
        return 0
    await server.start()
    if leadership is not None:
        log.info("serving as leader", epoch=leadership.epoch, unix_s=time.time())
    agents = "" if server.tls is None else f" (agents on {server.agent_address})"
    print(f"listening on {server.address}{agents}", flush=True)  # for scripts that wait for readiness
    waits = {asyncio.create_task(stop.wait()), asyncio.create_task(server.cp.fatal.wait())}
    keeper = asyncio.create_task(leadership.keep()) if leadership is not None else None
    done, _ = await asyncio.wait(waits | ({keeper} if keeper else set()), return_when=asyncio.FIRST_COMPLETED)
    for task in waits | ({keeper} if keeper else set()):
        task.cancel()
    if keeper is not None and keeper in done and isinstance(keeper.exception(), LostLeadership):
        server.cp.stop_writing(keeper.exception())  # not one more write: another control plane may lead
    if server.cp.failed is not None:
        log.critical("exiting: the state store failed or the leadership was lost; a restart reloads the last "
                     "committed state (or waits as a standby)", error=server.cp.failed)
        await server.stop(grace=0)
        if leadership is not None:
            await leadership.close()
        return EXIT_STORE_FAILED
    log.info("shutting down")
    await server.stop()
    if leadership is not None:
        await leadership.resign()  # a standby takes over now, not after the lease
        await leadership.close()
    return 0


async def _lead(server: ControlPlaneServer, leadership: Leadership, stop: asyncio.Event) -> bool:
    """Wait as a standby until this control plane leads (True), or until told to stop (False)."""
    standby = StandbyServer(leadership, listen=server.listen, agent_listen=server.agent_listen, tls=server.tls)
    await standby.start()
    print(f"standby on {server.listen}", flush=True)
    campaign, stopped = asyncio.create_task(leadership.campaign()), asyncio.create_task(stop.wait())
    await asyncio.wait({campaign, stopped}, return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    await standby.stop()
    if not campaign.done():
        campaign.cancel()
        return False
    epoch = campaign.result()
    server.cp.store.fence(leadership.name, epoch)  # type: ignore[attr-defined]  # a PostgresStore
    server.cp.leader_epoch = epoch
    _log_first_pass(server, epoch)
    return True


def _log_first_pass(server: ControlPlaneServer, epoch: int) -> None:
    """Log the new leader's first scheduling pass: the end of a failover, as benchmarks/chaos_failover.py
    measures it (the hook chains the metrics' own, set when the server was made)."""
    cp = server.cp
    chained = cp.on_pass

    def first(seconds: float) -> None:
        log.info("first pass as leader", epoch=epoch, unix_s=time.time())
        cp.on_pass = chained
        if chained is not None:
            chained(seconds)

    cp.on_pass = first


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


def _server_tls(args: argparse.Namespace) -> ServerTLS | None:
    if args.certs is not None and args.insecure:
        raise ValidationError("give --certs or --insecure, not both", field="--insecure")
    if args.certs is not None:
        return ServerTLS.from_dir(args.certs)
    if not args.insecure:
        raise ValidationError("no TLS material: give --certs DIR (make it with `halyard certs init`), or --insecure "
                              "for a control plane on a loopback address only", field="--certs")
    return None  # ControlPlaneServer refuses a non-loopback --listen and logs the warning


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
