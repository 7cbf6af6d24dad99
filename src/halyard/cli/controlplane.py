"""``halyard controlplane``: the control plane daemon (``halyard agent`` is cli/agent.py, which imports none of
this: an agent starts without the policies, scipy or pyarrow)."""

from __future__ import annotations

import argparse
import asyncio
import signal
import time
from pathlib import Path

import structlog

from halyard.cli.daemon_options import add_insecure_option, add_log_options
from halyard.cli.policies import policy_help
from halyard.cli.simulate import add_catalog_option, add_contention_option
from halyard.clock import ScaledClock
from halyard.controlplane.agent_sessions import DEFAULT_HEARTBEAT_S, DEFAULT_HEARTBEAT_TIMEOUT_S
from halyard.controlplane.auth import TokenFile
from halyard.controlplane.disruption import (
    LARGE_CLUSTER_SIZE_THRESHOLD,
    SECONDARY_EVICTION_RATE,
    UNHEALTHY_ZONE_THRESHOLD,
    DisruptionSettings,
)
from halyard.controlplane.forecast import DEFAULT_PERIOD_S, ForecastSettings
from halyard.controlplane.group_commit import GROUP_COMMIT_WINDOW_S, MAX_GROUP_COMMIT_WINDOW_MS
from halyard.controlplane.leadership import DEFAULT_LEASE, Leadership, LeaseSettings, LostLeadership
from halyard.controlplane.server import ControlPlaneServer
from halyard.controlplane.service import ControlPlane
from halyard.controlplane.standby import StandbyServer
from halyard.controlplane.store import SqliteStore
from halyard.controlplane.store_postgres import PostgresStore, is_postgres_url
from halyard.controlplane.storelock import StoreLock
from halyard.controlplane.token_throttle import FAILED_TOKENS_LIMIT, FAILED_TOKENS_WINDOW_S
from halyard.datamodel import ValidationError, parse_cluster, read_cluster_text
from halyard.emulator.catalog import load_model_catalog
from halyard.logs import configure_logging
from halyard.policies import make_policy
from halyard.scheduling.timing import performance_model_for
from halyard.tls import ServerTLS

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
    cp.add_argument("--bad-token-limit", type=int, default=FAILED_TOKENS_LIMIT, metavar="N",
                    help=f"refuse a host that presented N bad tokens within --bad-token-window-s, on every port, "
                         f"until the oldest leaves the window (default {FAILED_TOKENS_LIMIT}; 0: never)")
    cp.add_argument("--bad-token-window-s", type=float, default=FAILED_TOKENS_WINDOW_S, metavar="S",
                    help=f"the window --bad-token-limit counts over, seconds (default {FAILED_TOKENS_WINDOW_S:g})")
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


def _positive(value: float, flag: str) -> None:
    if not value > 0:
        raise ValidationError("must be positive", field=flag)


def run_controlplane(args: argparse.Namespace) -> int:
    configure_logging(json=True if args.log_json else None, level=args.log_level)
    for flag in ("round_s", "speedup", "heartbeat_s", "heartbeat_timeout_s", "bad_token_window_s"):
        _positive(getattr(args, flag), "--" + flag.replace("_", "-"))
    if args.bad_token_limit < 0:
        raise ValidationError(f"must be 0 (off) or more, got {args.bad_token_limit}", field="--bad-token-limit")
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
    store: PostgresStore | SqliteStore
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
                               forecast=None if args.no_forecast else _forecast_settings(args),
                               bad_token_limit=args.bad_token_limit, bad_token_window_s=args.bad_token_window_s)
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
    lost = keeper.exception() if keeper is not None and keeper in done else None
    if isinstance(lost, LostLeadership):
        server.cp.stop_writing(lost)  # not one more write: another control plane may lead
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
    store = server.cp.store
    if not isinstance(store, PostgresStore):  # main() gives a Leadership only with a PostgreSQL store
        raise TypeError(f"a leader fences a PostgresStore, not a {type(store).__name__}")
    store.fence(leadership.name, epoch)
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


def _server_tls(args: argparse.Namespace) -> ServerTLS | None:
    if args.certs is not None and args.insecure:
        raise ValidationError("give --certs or --insecure, not both", field="--insecure")
    if args.certs is not None:
        return ServerTLS.from_dir(args.certs)
    if not args.insecure:
        raise ValidationError("no TLS material: give --certs DIR (make it with `halyard certs init`), or --insecure "
                              "for a control plane on a loopback address only", field="--certs")
    return None  # ControlPlaneServer refuses a non-loopback --listen and logs the warning
