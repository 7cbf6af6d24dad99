"""``halyard trace``: make, inspect, convert and slice traces."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from halyard.datamodel import JobSpec, ValidationError
from halyard.plural import plural
from halyard.traces import (
    AUTO,
    FORMAT_NAMES,
    TraceLoad,
    generate_synergy_trace,
    read_trace,
    resolve_format,
    trace_stats,
    write_trace,
)

OUTPUT_SUFFIXES = (".csv", ".jsonl")
SHOWN_ERRORS = 5  # bad rows printed in full before the count


STRICT_RUN_HELP = ("stop at the first malformed trace row; and exit with status 6 if any job is rejected at "
                   "submission or the policy cannot act as named on this trace (without it, only a run in "
                   "which every job was rejected does)")


def add_trace_options(p: argparse.ArgumentParser, *, strict: bool = True, seed: bool = True,
                      runs: bool = False) -> None:
    """``--trace-format`` (and ``--strict``, ``--seed``) for every command that reads a trace; ``runs``:
    the command runs the trace (simulate, replay), so ``--strict`` covers the run too."""
    p.add_argument("--trace-format", default=AUTO, metavar="FORMAT",
                   help=f"{AUTO} (default: detect from the header/content) or one of: {', '.join(FORMAT_NAMES)}")
    if strict:
        p.add_argument("--strict", action="store_true",
                       help=STRICT_RUN_HELP if runs else "stop at the first malformed trace row")
    if seed:
        p.add_argument("--seed", type=int, default=0, help="seed for attributes a trace lacks (default: 0)")


def _note(text: str) -> None:
    print(text, file=sys.stderr)


def load_trace(path: Path, *, trace_format: str = AUTO, strict: bool = False, seed: int = 0) -> TraceLoad:
    """Read a trace for a command; says on stderr which format was used and what was skipped."""
    fmt = resolve_format(path, trace_format)
    how = f"detected: {fmt.recognised_by}" if trace_format == AUTO else "given by --trace-format"
    _note(f"trace {path}: format {fmt.name} ({how})")
    loaded = read_trace(path, strict=strict, seed=seed, format=fmt.name)
    for err in loaded.errors[:SHOWN_ERRORS]:
        _note(f"skipped: {err}")
    if loaded.errors:
        _note(f"skipped {plural(len(loaded.errors), 'malformed row')} of {path}; --strict stops at the first")
    if loaded.dropped:
        parts = ", ".join(f"{n} {reason}" for reason, n in loaded.dropped.items())
        _note(f"left out {plural(loaded.dropped_total, 'valid row')}, not jobs: {parts}")
    return loaded


def _output(path: Path, option: str) -> Path:
    if path.suffix.lower() not in OUTPUT_SUFFIXES:
        raise ValidationError("output must end in .csv or .jsonl", field=option)
    return path


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("trace", help="make and inspect traces")
    sub = p.add_subparsers(dest="trace_command", required=True, parser_class=type(p))
    gen = sub.add_parser("generate", help="Synergy's production-derived trace (Synergy §5.1)")
    gen.add_argument("--jobs", type=int, required=True, help="number of jobs")
    gen.add_argument("--rate", type=float, required=True,
                     help="Poisson arrivals per hour; 0 puts every job at t=0")
    gen.add_argument("--split", default="20,70,10", help="image,language,speech percentages (default 20,70,10)")
    gen.add_argument("--multi-gpu", action="store_true", help="draw GPU demands, not 1 GPU per job")
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--out", type=Path, required=True, help="output .csv or .jsonl")
    gen.set_defaults(run=run_generate)

    stats = sub.add_parser("stats", help="jobs, time span, arrival rate, GPU demand, duration percentiles")
    stats.add_argument("file", type=Path, help="trace file (any format halyard reads)")
    add_trace_options(stats)
    stats.add_argument("--json", action="store_true", help="print the statistics as one JSON object")
    stats.set_defaults(run=run_stats)

    conv = sub.add_parser("convert", help="convert a trace to the canonical CSV or JSONL schema")
    conv.add_argument("file", type=Path, help="trace file (any format halyard reads)")
    conv.add_argument("--to", type=Path, required=True, metavar="OUT", help="output .csv or .jsonl")
    add_trace_options(conv)
    conv.set_defaults(run=run_convert)

    cut = sub.add_parser("slice", help="a time window, virtual clusters or the first N jobs, as a canonical trace")
    cut.add_argument("file", type=Path, help="trace file (any format halyard reads)")
    cut.add_argument("--out", type=Path, required=True, help="output .csv or .jsonl")
    cut.add_argument("--start", type=float, default=None, metavar="S",
                     help="keep jobs submitted at or after S seconds (the trace's submit_time clock)")
    cut.add_argument("--end", type=float, default=None, metavar="S", help="keep jobs submitted before S seconds")
    cut.add_argument("--vc", action="append", default=None, metavar="NAME",
                     help="keep jobs of this virtual cluster / tenant (repeatable)")
    cut.add_argument("--first", type=int, default=None, metavar="N",
                     help="keep the first N jobs (by submit time) of what the other filters keep")
    add_trace_options(cut)
    cut.set_defaults(run=run_slice)


def parse_split(text: str) -> tuple[float, float, float]:
    try:
        parts = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise ValidationError(f"expected three numbers I,L,S, got {text!r}", field="--split") from None
    if len(parts) != 3:
        raise ValidationError(f"expected three numbers I,L,S, got {text!r}", field="--split")
    return parts  # the length check above narrows tuple[float, ...] to three


def run_generate(args: argparse.Namespace) -> int:
    if args.jobs < 1:
        raise ValidationError("must be >= 1", field="--jobs")
    if args.rate < 0:
        raise ValidationError("must be >= 0", field="--rate")
    jobs = generate_synergy_trace(args.jobs, rate_per_hour=args.rate, split=parse_split(args.split),
                                  multi_gpu=args.multi_gpu, seed=args.seed)
    if args.out.suffix not in (".csv", ".jsonl"):
        raise ValidationError("output must end in .csv or .jsonl", field="--out")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_trace(jobs, args.out)
    Console(stderr=True).print(f"wrote {plural(len(jobs), 'job')} to {args.out}")
    return 0


def run_stats(args: argparse.Namespace) -> int:
    loaded = load_trace(args.file, trace_format=args.trace_format, strict=args.strict, seed=args.seed)
    stats = trace_stats(loaded)
    if args.json:
        print(json.dumps(stats, indent=2))
        return 0
    for line in format_stats(stats):
        print(line)
    return 0


def _num(x: float | None, digits: int = 1) -> str:
    if x is None:
        return "-"
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:,.{digits}f}"


def _span(seconds: float) -> str:
    return f"{_num(seconds)} s ({seconds / 3600:,.1f} h, {seconds / 86400:,.2f} days)"


def format_stats(stats: dict[str, Any]) -> list[str]:
    jobs = stats["jobs"]
    lines = [
        f"trace          {stats['source']}",
        f"format         {stats['format']}",
        f"jobs           {jobs:,}",
        f"skipped rows   {stats['skipped_rows']:,} malformed",
    ]
    for reason, n in stats["dropped_rows"].items():
        lines.append(f"left out       {n:,} {reason}")
    if jobs:
        lines += [
            f"submit times   {_num(stats['first_submit_s'])} .. {_num(stats['last_submit_s'])} s",
            f"time span      {_span(stats['span_s'])}",
            f"arrival rate   {_num(stats['arrival_rate_per_hour'], 2)} jobs/hour",
            f"GPU-hours      {_num(stats['gpu_hours'])} (jobs with a duration)",
            f"tenants        {stats['tenants']:,}",
            "GPU demand     " + ", ".join(
                f"{g}: {n:,} ({100 * n / jobs:.1f}%)" for g, n in stats["gpu_demand"].items()),
        ]
        for key, unit in (("duration_s", "s"), ("iterations", "")):
            pct = stats[key]
            if pct is not None:
                lines.append(f"{key:<15}" + "  ".join(f"{p} {_num(v)}{unit}" for p, v in pct.items()))
    return lines


def run_convert(args: argparse.Namespace) -> int:
    out = _output(args.to, "--to")
    loaded = load_trace(args.file, trace_format=args.trace_format, strict=args.strict, seed=args.seed)
    _write(loaded.jobs, out)
    _note(f"wrote {plural(len(loaded.jobs), 'job')} to {out}")
    return 0


def select_jobs(jobs: tuple[JobSpec, ...], *, start: float | None = None, end: float | None = None,
                vcs: list[str] | None = None, first: int | None = None) -> list[JobSpec]:
    """Jobs with ``start <= submit_time < end`` of the given tenants, then the first ``first`` of them."""
    lo = -math.inf if start is None else start
    hi = math.inf if end is None else end
    wanted = None if vcs is None else set(vcs)
    kept = [j for j in jobs if lo <= j.submit_time < hi and (wanted is None or j.tenant in wanted)]
    return kept if first is None else kept[:first]


def run_slice(args: argparse.Namespace) -> int:
    out = _output(args.out, "--out")
    for name in ("start", "end"):
        value = getattr(args, name)
        if value is not None and not math.isfinite(value):
            raise ValidationError("must be a finite number of seconds", field=f"--{name}")
    if args.start is not None and args.end is not None and args.end <= args.start:
        raise ValidationError(f"must be after --start ({args.start})", field="--end")
    if args.first is not None and args.first < 1:
        raise ValidationError("must be >= 1", field="--first")
    loaded = load_trace(args.file, trace_format=args.trace_format, strict=args.strict, seed=args.seed)
    kept = select_jobs(loaded.jobs, start=args.start, end=args.end, vcs=args.vc, first=args.first)
    _write(kept, out)
    _note(f"wrote {len(kept)} of {len(loaded.jobs)} jobs to {out}")
    return 0


def _write(jobs: Any, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    write_trace(jobs, out)
