"""``halyard replay``: the trace through the real control plane, gRPC and emulated agents."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from rich.console import Console

from halyard.cli.policies import policy_help
from halyard.cli.report import progress_bar, report_rejected, summary_table, warn_unmet_reliance
from halyard.cli.simulate import (
    DEFAULT_ROUND_S,
    add_catalog_option,
    add_contention_option,
    add_output_options,
    check_outputs,
    default_trace,
    write_outputs,
)
from halyard.cli.trace import add_trace_options, load_trace
from halyard.datamodel import ValidationError, parse_cluster, read_cluster_text
from halyard.emulator.catalog import load_model_catalog
from halyard.experiments.replay import replay
from halyard.logs import configure_logging
from halyard.policies import make_policy

DEFAULT_SPEEDUP = 100.0


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("replay", help="replay a trace through the real control plane and emulated agents")
    p.add_argument("--trace", type=Path, default=None, help="trace file (default: the bundled trace)")
    p.add_argument("--cluster", default="default", help="built-in cluster name or TOML path (default: default)")
    p.add_argument("--policy", default="fifo", help=policy_help())
    p.add_argument("--speedup", type=float, default=DEFAULT_SPEEDUP,
                   help=f"cluster seconds per wall second (default: {DEFAULT_SPEEDUP:g})")
    p.add_argument("--round-s", type=float, default=DEFAULT_ROUND_S, help="round length in seconds")
    add_contention_option(p)
    add_catalog_option(p)
    p.add_argument("--agent-processes", action="store_true",
                   help="run each agent as its own `halyard agent` process (default: asyncio tasks)")
    p.add_argument("--db", default=":memory:", help="state database (default: in memory)")
    add_trace_options(p, runs=True)
    add_output_options(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    configure_logging(level="warning")  # the summary is the output; daemon chatter is not
    if not args.speedup > 0:
        raise ValidationError("must be positive", field="--speedup")
    if args.round_s <= 0:
        raise ValidationError("must be positive", field="--round-s")
    policy = make_policy(args.policy)  # fail early on an unknown name
    catalog = load_model_catalog(args.catalog)
    check_outputs(args)
    text, source = read_cluster_text(args.cluster)
    cluster = parse_cluster(text, source=source)
    trace_path = args.trace or default_trace()
    loaded = load_trace(trace_path, trace_format=args.trace_format, strict=args.strict, seed=args.seed)
    refused = warn_unmet_reliance(policy, loaded.jobs, cluster, strict=args.strict, console=Console(stderr=True),
                                  command="replay")
    if refused:
        return refused
    with progress_bar(len(loaded.jobs), enabled=not args.no_progress, label=f"replay {args.policy}") as bar:
        run = asyncio.run(replay(loaded.jobs, cluster, text, policy=args.policy, speedup=args.speedup,
                                 processes=args.agent_processes, db=args.db, round_s=args.round_s,
                                 contention=args.contention, on_progress=bar, catalog=catalog))
    result = dict(run.summary) | {"trace": str(trace_path), "trace_format": loaded.format, "seed": args.seed,
                                  "contention": args.contention, "round_s": args.round_s}
    table = summary_table(result, f"halyard replay: {trace_path.name} on {cluster.name} at {args.speedup:g}x")
    table.add_row("speed-up reached", f"{result['speedup_achieved']:.0f}x")
    Console().print(table)
    write_outputs(args, run.tables.with_summary(result))
    return report_rejected(run.rejected, jobs=len(loaded.jobs), strict=args.strict, console=Console(stderr=True),
                           command="replay")
