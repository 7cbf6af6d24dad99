"""The ``halyard`` command line.

Every input error ends in one line on stderr and exit status 2; no traceback
reaches the user for bad input.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from halyard import __version__
from halyard.cli.daemon_options import expand_config
from halyard.cli.errors import RpcFailed, ServerUnreachable
from halyard.datamodel import HalyardError

EXIT_BAD_INPUT = 2  # a usage error, bad input or a bad file: the message names it
# 3 is the control plane daemon's: its state store failed (cli/controlplane.py).
EXIT_REJECTED = 4  # the control plane answered with an error status (not found, permission denied, ...)
EXIT_UNREACHABLE = 5  # no control plane answered at the address (UNAVAILABLE, DEADLINE_EXCEEDED)
# simulate, replay, compare: a run in which every job was rejected (it did nothing), or, under --strict,
# any rejection or a policy relying on what the run lacks. Its files are written, but a script must not
# take it for a result, so it does not exit 0. cli/report.py decides.
EXIT_RUN_REJECTED = 6


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line, not the whole usage text."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


# The module (halyard.cli.<name>) that registers each command, in the order `halyard --help` lists them.
# A command imports only its own module: `halyard jobs` needs gRPC, not the policies, numpy and scipy the
# simulator does (2.4 s of imports before this table; a test pins it to what the modules register).
COMMANDS = {
    "simulate": "simulate", "compare": "compare", "trace": "trace", "profiles": "profiles",
    "policies": "policies", "replay": "replay", "controlplane": "controlplane", "agent": "agent",
    **dict.fromkeys(("submit", "job", "jobs", "cluster", "drain", "undrain", "whatif", "cancel", "watch", "logs"),
                    "client"),
    "calibrate": "calibrate", "certs": "security", "tokens": "security",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or only ``command``'s when it is one (what :func:`main` parses with)."""
    parser = _Parser(prog="halyard", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"halyard {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    modules = [COMMANDS[command]] if command in COMMANDS else dict.fromkeys(COMMANDS.values())
    for module in modules:
        importlib.import_module(f"halyard.cli.{module}").register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv else None
    if command != "controlplane":
        # gRPC core logs a failed TLS handshake in its own format on stderr, each retry; a command or an agent
        # says what went wrong in a line of its own (halyard.tls.tls_mismatch). Read when gRPC starts: set first.
        os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    try:
        argv = expand_config(argv)  # the daemons' --config FILE; other commands' argv as it is
    except HalyardError as exc:
        print(f"halyard: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    args = build_parser(command).parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except BrokenPipeError:
        # The reader went away (`halyard trace stats | head`): not an error of ours.
        # Point stdout at /dev/null so the interpreter's final flush stays quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except ServerUnreachable as exc:
        print(f"halyard {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except RpcFailed as exc:
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
