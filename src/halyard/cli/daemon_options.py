"""The options ``halyard controlplane`` and ``halyard agent`` share: logging, ``--config``, ``--insecure``.

Apart from both commands' modules so that the agent's command imports nothing of the control plane
(``halyard agent`` starts in a fraction of the control plane's import time: docs/operations.md).
"""

from __future__ import annotations

import argparse
import os
import tomllib
from pathlib import Path

from halyard.datamodel import ValidationError

LOG_LEVELS = ("debug", "info", "warning", "error")
DAEMONS = ("controlplane", "agent")


def add_log_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-json", action="store_true", help="JSON logs even on a terminal")
    parser.add_argument("--log-level", default=os.environ.get("HALYARD_LOG_LEVEL", "info"), choices=LOG_LEVELS,
                        help="the least severe level logged, e.g. --log-level warning (env HALYARD_LOG_LEVEL; "
                             "default info)")
    parser.add_argument("--config", type=Path, default=None, metavar="FILE",
                        help="a TOML file of this command's options, e.g. `db = \"state.db\"` or `insecure = true` "
                             "(env HALYARD_CONFIG); options on the command line win")


def expand_config(argv: list[str]) -> list[str]:
    """``halyard controlplane|agent --config FILE`` (or ``HALYARD_CONFIG``): the file's keys become the
    options they name, ahead of the command line's, so a flag given there overrides the file.

    ``key = value`` gives ``--key value``, ``key = true`` gives ``--key``, a list repeats the option;
    a key that is no option of the command is refused by the parser as ``--key``, naming it.
    """
    if not argv or argv[0] not in DAEMONS:
        return argv
    path: str | None = os.environ.get("HALYARD_CONFIG")
    rest = list(argv[1:])
    for i, arg in enumerate(rest):
        if arg == "--config" and i + 1 < len(rest):
            path = rest[i + 1]
        elif arg.startswith("--config="):
            path = arg.split("=", 1)[1]
    if not path:
        return argv
    try:
        table = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValidationError(f"{path}: {exc}", field="--config") from None
    options: list[str] = []
    for key, value in table.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            options.append(flag)
        elif value is False:
            continue
        elif isinstance(value, list):
            for item in value:
                options += [flag, str(item)]
        else:
            options += [flag, str(value)]
    return [argv[0], *options, *rest]


def add_insecure_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--insecure", action="store_true", help=f"insecure mode, for local use and tests: {what}")
