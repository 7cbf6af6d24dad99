"""``halyard simulate``: replay a trace through a policy in virtual time, in-process."""

from __future__ import annotations

import argparse
import json
from importlib import resources
from pathlib import Path

from rich.console import Console

from halyard.cli.policies import policy_help
from halyard.cli.report import progress_bar, report_rejected, summary_table, warn_unmet_reliance
from halyard.cli.trace import add_trace_options, load_trace
from halyard.controlplane.runtables import TABLE_FORMATS, TABLES_NEED, RunTables, check_table_format, write_run
from halyard.datamodel import ValidationError, load_cluster
from halyard.emulator.catalog import load_model_catalog
from halyard.emulator.performance import CONTENTION_MODES
from halyard.experiments.runs import DEFAULT_ROUND_S, annotate, simulate_jobs
from halyard.extras import require
from halyard.policies import make_policy


def default_trace() -> Path:
    return Path(str(resources.files("halyard.data") / "traces" / "default.csv"))


def add_contention_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--contention", "--link-sharing", dest="contention", default="fair", choices=CONTENTION_MODES,
                   help="how jobs sharing a NIC or rack uplink slow each other: fair sharing (default), "
                        "MLTCP's unfair sharing (share weighted by F(bytes_ratio), Eq. 1.2 of the "
                        "Cassini/MLTCP thesis), or off (every job at its dedicated speed)")


def add_catalog_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--catalog", type=Path, default=None, metavar="FILE",
                   help="a model profile laid over the built-in catalog: what `halyard calibrate --out` writes, or "
                        "any part of a catalog in emulator/data/models.toml's schema (its [gpus.T] and [models.M] "
                        "tables add or replace, [constants] entries replace, [tier_overhead.M] sets a model's "
                        "exposed communication per tier). A built-in profile by name: dally-table1 (Dally's "
                        "Table 1). Example: --catalog calibration.toml")


def add_output_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, default=None, help="write the summary as JSON here")
    p.add_argument("--out-dir", type=Path, default=None,
                   help="write summary.json, jobs.<fmt> (one row per job) and timeline.<fmt> (cluster "
                        "utilisation, queue and running jobs after every event) into this folder")
    p.add_argument("--table-format", default="parquet", choices=TABLE_FORMATS,
                   help="format of the --out-dir tables (default: parquet)")


def check_outputs(args: argparse.Namespace) -> None:
    """Fail before a run that could not write what is asked: --out-dir's tables need pyarrow (``[reports]``)."""
    if args.out_dir is not None:
        check_table_format(args.table_format)
        require("pyarrow", TABLES_NEED)


def write_outputs(args: argparse.Namespace, tables: RunTables) -> None:
    """--out (the summary) and --out-dir (summary and tables), as asked."""
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(dict(tables.summary), indent=2) + "\n", encoding="utf-8")
    if args.out_dir is not None:
        write_run(args.out_dir, tables, fmt=check_table_format(args.table_format))


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("simulate", help="replay a trace through a policy in virtual time")
    p.add_argument("--trace", type=Path, default=None, help="trace file (default: the bundled trace)")
    p.add_argument("--cluster", default="default", help="built-in cluster name or TOML path (default: default)")
    p.add_argument("--policy", default="fifo", help=policy_help())
    p.add_argument("--round-s", type=float, default=DEFAULT_ROUND_S, help="round length in seconds")
    add_contention_option(p)
    add_catalog_option(p)
    p.add_argument("--measure", default=None, metavar="START:END",
                   help="report job metrics over arrival positions START..END-1 only")
    p.add_argument("--until-measured", action="store_true",
                   help="end the run as soon as the --measure jobs have ended, arrivals continuing until "
                        "then (as Synergy's simulator does); later jobs stay unfinished")
    add_trace_options(p, runs=True)
    add_output_options(p)
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
    policy = make_policy(args.policy)  # fail on an unknown name before reading the trace
    check_outputs(args)
    catalog = load_model_catalog(args.catalog)
    trace_path = args.trace or default_trace()
    loaded = load_trace(trace_path, trace_format=args.trace_format, strict=args.strict, seed=args.seed)
    console = Console(stderr=True)
    refused = warn_unmet_reliance(policy, loaded.jobs, cluster, strict=args.strict, console=console, command="simulate")
    if refused:
        return refused
    with progress_bar(len(loaded.jobs), enabled=not args.no_progress, label=f"simulate {policy.name}") as bar:
        tables, rejected = simulate_jobs(loaded.jobs, cluster, args.policy, round_s=args.round_s,
                                         contention=args.contention, measure=measure,
                                         until_measured=args.until_measured, on_progress=bar,
                                         catalog=catalog, freeze_gc=True)  # (one simulation in this process)
    result = annotate(tables.summary, trace=str(trace_path), loaded=loaded, seed=args.seed,
                      contention=args.contention, round_s=args.round_s)
    Console().print(summary_table(result, f"halyard simulate: {trace_path.name} on {cluster.name}"))
    write_outputs(args, tables.with_summary(result))
    return report_rejected(rejected, jobs=len(loaded.jobs), strict=args.strict, console=console, command="simulate")
