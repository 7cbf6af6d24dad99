"""``halyard compare``: several policies (and seeds) over one trace and cluster, one HTML report.

The runs are ``halyard simulate`` runs (:mod:`halyard.experiments`) in parallel
worker processes, or on a Ray cluster with ``--ray``. Writes into ``--out-dir``:
``report.html`` (self-contained), ``compare.json`` (every run's summary and
command) and ``runs/<policy>-seed<N>/`` (each run's summary, per-job table and
timeline, as ``halyard simulate --out-dir`` writes them).
"""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

from rich.console import Console
from rich.table import Table

from halyard.cli.report import report_rejected, warn_unmet_reliance
from halyard.cli.simulate import (
    DEFAULT_ROUND_S,
    add_catalog_option,
    add_contention_option,
    default_trace,
    parse_measure,
)
from halyard.cli.trace import STRICT_RUN_HELP, load_trace
from halyard.controlplane.runtables import TABLE_FORMATS
from halyard.datamodel import ValidationError, load_cluster
from halyard.emulator.catalog import load_model_catalog
from halyard.experiments.runs import RunResult, RunSpec, run_and_save
from halyard.policies import make_policy, policy_names
from halyard.traces import AUTO, FORMAT_NAMES

REPORT_FILE = "report.html"
RUNS_DIR = "runs"


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("compare", help="compare policies over one trace and cluster: one HTML report")
    p.add_argument("--trace", type=Path, default=None, help="trace file (default: the bundled trace)")
    p.add_argument("--trace-format", default=AUTO, metavar="FORMAT",
                   help=f"{AUTO} (default) or one of: {', '.join(FORMAT_NAMES)}")
    p.add_argument("--cluster", default="default", help="built-in cluster name or TOML path (default: default)")
    p.add_argument("--policies", required=True, metavar="P1,P2,...",
                   help=f"comma-separated presets ({', '.join(policy_names())}); separate with ';' to include "
                        "pipelines such as 'fifo;ordering=las,placement=synergy-tune' (halyard policies)")
    p.add_argument("--seeds", default="0", metavar="S1,S2,...",
                   help="comma-separated seeds for attributes the trace lacks; one run per policy and seed "
                        "(default: 0)")
    p.add_argument("--baseline", default=None, help="the policy ratios are taken against (default: the first)")
    p.add_argument("--out-dir", type=Path, required=True, help="folder for report.html, compare.json and runs/")
    p.add_argument("--round-s", type=float, default=DEFAULT_ROUND_S, help="round length in seconds")
    add_contention_option(p)
    add_catalog_option(p)
    p.add_argument("--measure", default=None, metavar="START:END",
                   help="report job metrics over arrival positions START..END-1 only")
    p.add_argument("--table-format", default="parquet", choices=TABLE_FORMATS,
                   help="format of each run's tables (default: parquet)")
    p.add_argument("--workers", type=int, default=None,
                   help="worker processes (default: one per CPU, at most one per run)")
    p.add_argument("--ray", default=None, metavar="ADDRESS",
                   help="run on this Ray cluster instead (ray.init address: auto, ray://HOST:PORT, or local "
                        "for a new local instance); needs pip install 'halyard[ray]'")
    p.add_argument("--strict", action="store_true", help=STRICT_RUN_HELP)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(run=run)


def _names(text: str, option: str) -> list[str]:
    """A comma-separated list; ';'-separated when it has one (a policy pipeline has commas of its own)."""
    sep = ";" if ";" in text else ","
    items = [x.strip() for x in text.split(sep)]
    if not items or any(not x for x in items):
        raise ValidationError(f"expected a {'semicolon' if sep == ';' else 'comma'}-separated list without "
                              f"empty items, got {text!r}", field=option)
    if len(set(items)) != len(items):
        raise ValidationError(f"lists an item twice: {text!r}", field=option)
    return items


def parse_seeds(text: str) -> list[int]:
    try:
        return [int(x) for x in _names(text, "--seeds")]
    except ValueError:
        raise ValidationError(f"expected comma-separated integers, got {text!r}", field="--seeds") from None


def run_name(policy: str, seed: int) -> str:
    """A run's folder name: the policy (``:`` would not survive every file system) and the seed."""
    return f"{policy.replace(':', '_')}-seed{seed}"


def command_line(args: argparse.Namespace, policies: list[str], seeds: list[int], baseline: str) -> str:
    """The ``halyard compare`` command that makes this report, every setting spelt out."""
    separator = ";" if any("," in p for p in policies) else ","  # a pipeline has commas of its own (_names)
    argv = ["halyard", "compare", "--trace", str(args.trace or default_trace()), "--trace-format", args.trace_format,
            "--cluster", args.cluster, "--policies", separator.join(policies), "--seeds", ",".join(map(str, seeds)),
            "--baseline", baseline, "--out-dir", str(args.out_dir), "--round-s", str(args.round_s),
            "--contention", args.contention, "--table-format", args.table_format]
    if args.measure:
        argv += ["--measure", args.measure]
    if args.catalog is not None:
        argv += ["--catalog", str(args.catalog)]
    if args.ray:
        argv += ["--ray", args.ray]
    if args.strict:
        argv += ["--strict"]
    return shlex.join(argv)


def run(args: argparse.Namespace) -> int:
    # Here, not at the top: matplotlib takes a few hundred ms to import, and every
    # `halyard` command (agents, daemons) builds this command's parser.
    from halyard.experiments.report import write_sweep_report

    if args.round_s <= 0:
        raise ValidationError("must be positive", field="--round-s")
    if args.workers is not None and args.workers < 1:
        raise ValidationError("must be at least 1", field="--workers")
    policies = _names(args.policies, "--policies")
    built = [make_policy(policy) for policy in policies]  # an unknown name fails here, before anything runs
    baseline = args.baseline or policies[0]
    if baseline not in policies:
        raise ValidationError(f"{baseline!r} is not one of --policies ({', '.join(policies)})", field="--baseline")
    seeds = parse_seeds(args.seeds)
    measure = parse_measure(args.measure)
    cluster = load_cluster(args.cluster)
    if args.catalog is not None:
        load_model_catalog(args.catalog)  # a bad profile fails here, once, not in every worker
    trace = args.trace or default_trace()
    loaded = load_trace(trace, trace_format=args.trace_format, strict=args.strict, seed=seeds[0])
    if not loaded.jobs:
        raise ValidationError(f"{trace}: no jobs to run", field="--trace")
    errors = Console(stderr=True)
    refused = max(warn_unmet_reliance(p, loaded.jobs, cluster, strict=args.strict, console=errors, command="compare")
                  for p in built)
    if refused:
        return refused
    specs = [RunSpec(name=run_name(p, s), trace=str(trace), policy=p, cluster=args.cluster, seed=s,
                     round_s=args.round_s, contention=args.contention, trace_format=args.trace_format,
                     measure=measure, catalog=str(args.catalog.resolve()) if args.catalog else None)
             for p in policies for s in seeds]
    out = args.out_dir
    runs_dir = out / RUNS_DIR
    results = run_and_save(specs, runs_dir, totals=[len(loaded.jobs)] * len(specs), table_format=args.table_format,
                           workers=args.workers, ray_address=args.ray, progress=not args.no_progress,
                           label="compare")
    command = command_line(args, policies, seeds, baseline)
    (out / "compare.json").write_text(json.dumps({
        "command": command, "baseline": baseline,
        "runs": [{"name": r.spec.name, "command": r.spec.command(runs_dir / r.spec.name, args.table_format),
                  "summary": r.summary} for r in results],
    }, indent=2) + "\n", encoding="utf-8")
    report = out / REPORT_FILE
    write_sweep_report(results, report, runs_dir=runs_dir, baseline=baseline, command=command,
                       table_format=args.table_format, cluster_gpus=cluster.total_gpus)
    Console().print(_table(results, baseline, f"halyard compare: {trace.name} on {cluster.name}"))
    Console().print(f"report: {report}", highlight=False)
    statuses = [report_rejected(r.rejected, jobs=len(loaded.jobs), strict=args.strict, console=errors,
                                command="compare", run=r.spec.name) for r in results]
    return max(statuses, default=0)


def _table(results: list[RunResult], baseline: str, title: str) -> Table:
    from halyard.experiments.report import policy_means, ratios

    means = policy_means(results)
    rel = ratios(means, baseline)
    table = Table(title=title, title_justify="left")
    for heading in ("policy", "avg JCT", "vs " + baseline, "p95 JCT", "avg queueing", "makespan", "GPU util."):
        table.add_column(heading, justify="left" if heading == "policy" else "right")
    for policy, m in means.items():
        ratio = rel[policy]["avg_jct_s"]
        table.add_row(policy, f"{m['avg_jct_s'] / 3600:.2f} h", "n/a" if ratio is None else f"{ratio:.3f}x",
                      f"{m['p95_jct_s'] / 3600:.2f} h", f"{m['avg_queue_s'] / 3600:.2f} h",
                      f"{m['makespan_s'] / 3600:.2f} h", f"{100 * m['gpu_utilization']:.1f}%")
    return table
