"""``halyard profiles``: the performance model's numbers, each with its source."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from halyard.cli.simulate import add_catalog_option
from halyard.datamodel import ValidationError
from halyard.emulator import PerformanceModel, load_model_catalog
from halyard.emulator.profiles import format_profile, list_rows


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("profiles", help="the model catalog of the performance model")
    sub = p.add_subparsers(dest="profiles_command", required=True, parser_class=type(p))
    listing = sub.add_parser("list", help="one line per model")
    add_catalog_option(listing)
    listing.set_defaults(run=run_list)
    show = sub.add_parser("show", help="every number of one model, with its source")
    show.add_argument("model")
    add_catalog_option(show)
    show.set_defaults(run=run_show)


def run_list(args: argparse.Namespace) -> int:
    perf = PerformanceModel(load_model_catalog(args.catalog))
    table = Table(title=f"model catalog ({perf.catalog.source})", title_justify="left")
    for column in ("model", "task", "ref. batch / GPU", "gradients MB", "V100 ms / iteration"):
        table.add_column(column, justify="left" if column in ("model", "task") else "right")
    for name, task, batch, grad_mb, v100_ms in list_rows(perf):
        table.add_row(name, task, str(batch), f"{grad_mb:.1f}", f"{v100_ms:.1f}")
    Console().print(table)
    return 0


def run_show(args: argparse.Namespace) -> int:
    perf = PerformanceModel(load_model_catalog(args.catalog))
    if not perf.has_model(args.model):
        raise ValidationError(f"unknown model {args.model!r} (known: {', '.join(perf.models())})", field="model")
    print(format_profile(perf, args.model))
    return 0
