"""``halyard policies``: the presets with their stages, and every stage a pipeline may name."""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.table import Table

from halyard.policies import STAGES, make_policy, policy_names
from halyard.policies.registry import AUGMENTATIONS


def policy_help(default: str | None = "fifo") -> str:
    """The --policy help of every command that takes one."""
    tail = f" (default: {default})" if default else ""
    return (f"a preset ({', '.join(policy_names())}) or a pipeline of stages such as "
            f"'ordering=las,placement=synergy-tune', or a preset with an augmentation such as "
            f"'tiresias+cassini' (halyard policies lists them){tail}")


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("policies", help="list policy presets and the stages a pipeline can name")
    p.add_argument("--json", action="store_true")
    p.add_argument("name", nargs="?", help="show one preset or pipeline (e.g. 'ordering=las,placement=synergy-tune')")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    names = [args.name] if args.name else policy_names()
    presets = {name: make_policy(name).stages() for name in names}
    if args.json:
        print(json.dumps({"policies": {n: [list(s) for s in st] for n, st in presets.items()},
                          "stages": {kind: sorted(reg) for kind, reg in STAGES.items()},
                          "augmentations": sorted(AUGMENTATIONS)}, indent=2))
        return 0
    console = Console()
    table = Table("policy", "stages")
    for name, stages in presets.items():
        table.add_row(name, ", ".join(f"{kind}={choice}" for kind, choice in stages))
    console.print(table)
    if not args.name:
        stage_table = Table("stage", "choices (compose as STAGE=NAME,...; adjusters joined by '+')")
        for kind, registry in STAGES.items():
            stage_table.add_row(kind, ", ".join(sorted(registry)))
        stage_table.add_row("+augmentation", ", ".join(sorted(AUGMENTATIONS)) + " (PRESET+NAME, e.g. tiresias+cassini)")
        console.print(stage_table)
    return 0
