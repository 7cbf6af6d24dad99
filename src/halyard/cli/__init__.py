"""The ``halyard`` command line.

Every input error ends in one line on stderr and exit status 2; no traceback
reaches the user for bad input.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from halyard import __version__
from halyard.cli import calibrate, client, compare, daemons, policies, profiles, replay, security, simulate, trace
from halyard.datamodel import HalyardError

EXIT_BAD_INPUT = 2  # a usage error, bad input or a bad file: the message names it
# 3 is the control plane daemon's: its state store failed (cli/daemons.py).
EXIT_REJECTED = 4  # the control plane answered with an error status (not found, permission denied, ...)
EXIT_UNREACHABLE = 5  # no control plane answered at the address (UNAVAILABLE, DEADLINE_EXCEEDED)


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line, not the whole usage text."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="halyard", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"halyard {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    simulate.register(commands)
    compare.register(commands)
    trace.register(commands)
    profiles.register(commands)
    policies.register(commands)
    replay.register(commands)
    daemons.register(commands)
    client.register(commands)
    calibrate.register(commands)
    security.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        argv = daemons.expand_config(argv)
    except HalyardError as exc:
        print(f"halyard: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except BrokenPipeError:
        # The reader went away (`halyard trace stats | head`): not an error of ours.
        # Point stdout at /dev/null so the interpreter's final flush stays quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except client.ServerUnreachable as exc:
        print(f"halyard {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except client.RpcFailed as exc:
        print(f"halyard {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_REJECTED
    except (HalyardError, OSError) as exc:
        print(f"halyard {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(f"halyard {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
