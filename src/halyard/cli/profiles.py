"""``halyard profiles``: the performance model's numbers, each with its source."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from halyard.datamodel import ValidationError
from halyard.emulator import PerformanceModel
from halyard.emulator.profiles import format_profile, list_rows


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("profiles", help="the model catalog of the performance model")
    sub = p.add_subparsers(dest="profiles_command", required=True, parser_class=type(p))
    sub.add_parser("list", help="one line per model").set_defaults(run=run_list)
    show = sub.add_parser("show", help="every number of one model, with its source")
    show.add_argument("model")
    show.set_defaults(run=run_show)


def run_list(args: argparse.Namespace) -> int:
    table = Table(title="model catalog (emulator/data/models.toml)", title_justify="left")
    for column in ("model", "task", "ref. batch / GPU", "gradients MB", "V100 ms / iteration"):
        table.add_column(column, justify="left" if column in ("model", "task") else "right")
    for name, task, batch, grad_mb, v100_ms in list_rows(PerformanceModel()):
        table.add_row(name, task, str(batch), f"{grad_mb:.1f}", f"{v100_ms:.1f}")
    Console().print(table)
    return 0


def run_show(args: argparse.Namespace) -> int:
    perf = PerformanceModel()
    if not perf.has_model(args.model):
        raise ValidationError(f"unknown model {args.model!r} (known: {', '.join(perf.models())})", field="model")
    print(format_profile(perf, args.model))
    return 0
