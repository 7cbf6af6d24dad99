"""``halyard simulate``: replay a trace through a policy in virtual time, in-process."""

from __future__ import annotations

import argparse
import json
import time
from importlib import resources
from pathlib import Path

from rich.console import Console

from halyard.cli.policies import policy_help
from halyard.cli.report import progress_bar, summary_table
from halyard.cli.trace import add_trace_options, load_trace
from halyard.controlplane import Simulator, summarize
from halyard.controlplane.timing import performance_model_for
from halyard.datamodel import ValidationError, load_cluster
from halyard.emulator.performance import CONTENTION_MODES
from halyard.policies import make_policy

DEFAULT_ROUND_S = 300.0  # DESIGN.md: lease of 5 minutes of cluster time


def default_trace() -> Path:
    return Path(str(resources.files("halyard.data") / "traces" / "default.csv"))


def add_contention_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--contention", default="fair", choices=CONTENTION_MODES,
                   help="how jobs sharing a NIC or rack uplink slow each other: fair sharing (default), "
                        "MLTCP's unfair sharing, or off (every job at its dedicated speed)")


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("simulate", help="replay a trace through a policy in virtual time")
    p.add_argument("--trace", type=Path, default=None, help="trace file (default: the bundled trace)")
    p.add_argument("--cluster", default="default", help="built-in cluster name or TOML path (default: default)")
    p.add_argument("--policy", default="fifo", help=policy_help())
    p.add_argument("--round-s", type=float, default=DEFAULT_ROUND_S, help="round length in seconds")
    add_contention_option(p)
    p.add_argument("--measure", default=None, metavar="START:END",
                   help="report job metrics over arrival positions START..END-1 only")
    add_trace_options(p)
    p.add_argument("--out", type=Path, default=None, help="write the summary as JSON here")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(run=run)


def parse_measure(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        start, end = (int(x) for x in text.split(":"))
    except ValueError:
        raise ValidationError(f"expected START:END integers, got {text!r}", field="--measure") from None
    if not 0 <= start < end:
        raise ValidationError(f"need 0 <= START < END, got {text!r}", field="--measure")
    return start, end


def run(args: argparse.Namespace) -> int:
    if args.round_s <= 0:
        raise ValidationError("must be positive", field="--round-s")
    measure = parse_measure(args.measure)
    cluster = load_cluster(args.cluster)
    policy = make_policy(args.policy)
    trace_path = args.trace or default_trace()
    loaded = load_trace(trace_path, trace_format=args.trace_format, strict=args.strict, seed=args.seed)
    console = Console(stderr=True)
    simulator = Simulator(cluster, policy, performance_model_for(policy, contention=args.contention),
                          round_s=args.round_s)
    started = time.perf_counter()
    with progress_bar(len(loaded.jobs), enabled=not args.no_progress, label=f"simulate {policy.name}") as bar:
        outcome = simulator.run(loaded.jobs, on_progress=bar, total_jobs=len(loaded.jobs))
    wall_s = time.perf_counter() - started
    result = summarize(simulator.core, policy=policy.name, trace_jobs=len(loaded.jobs),
                       rejected=len(outcome.rejected), wall_s=wall_s, measure=measure)
    result["trace"] = str(trace_path)
    result["trace_format"] = loaded.format
    result["skipped_rows"] = len(loaded.errors)
    result["dropped_rows"] = loaded.dropped_total
    for rejected in outcome.rejected[:5]:
        console.print(f"[yellow]rejected {rejected.job_id}: {rejected.reason}")
    Console().print(summary_table(result, f"halyard simulate: {trace_path.name} on {cluster.name}"))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0
