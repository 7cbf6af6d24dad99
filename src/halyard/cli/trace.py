"""``halyard trace``: make and inspect traces."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from halyard.datamodel import ValidationError
from halyard.traces import generate_synergy_trace, write_trace


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


def parse_split(text: str) -> tuple[float, float, float]:
    try:
        parts = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise ValidationError(f"expected three numbers I,L,S, got {text!r}", field="--split") from None
    if len(parts) != 3:
        raise ValidationError(f"expected three numbers I,L,S, got {text!r}", field="--split")
    return parts  # type: ignore[return-value]


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
    Console(stderr=True).print(f"wrote {len(jobs)} jobs to {args.out}")
    return 0
