"""``halyard certs init|issue`` and ``halyard tokens create|revoke|list`` (docs/security.md)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from halyard.controlplane.auth import TOKEN_ROLES, TokenFile, parse_duration, utc
from halyard.datamodel import ValidationError
from halyard.tls import init_ca, issue


def register(commands: argparse._SubParsersAction) -> None:
    certs = commands.add_parser("certs", help="make the cluster CA and node, client and server certificates")
    sub = certs.add_subparsers(dest="certs_command", required=True)
    init = sub.add_parser("init", help="a new cluster CA and the control plane's certificate")
    init.add_argument("--dir", type=Path, default=Path("certs"), help="where the files go (default ./certs)")
    init.add_argument("--cluster", default="halyard", help="the CA's name")
    init.add_argument("--server-name", action="append", default=[], metavar="HOST",
                      help="a DNS name or IP address agents and clients dial the control plane by (repeat); "
                           "localhost, 127.0.0.1 and ::1 are always included")
    init.set_defaults(run=run_init)
    iss = sub.add_parser("issue", help="a certificate signed by the cluster CA")
    iss.add_argument("kind", choices=["node", "operator", "user", "server"],
                     help="node: an agent (NAME is the node); operator; user: a tenant's user (--tenant); "
                          "server: another control plane certificate (--server-name)")
    iss.add_argument("name")
    iss.add_argument("--tenant", default="", help="the tenant of a user certificate")
    iss.add_argument("--server-name", action="append", default=[], metavar="HOST")
    iss.add_argument("--dir", type=Path, default=Path("certs"), help="the CA's directory (default ./certs)")
    iss.set_defaults(run=run_issue)

    tokens = commands.add_parser("tokens", help="create, revoke and list client bearer tokens")
    tsub = tokens.add_subparsers(dest="tokens_command", required=True)

    def token_command(name: str, help_: str) -> argparse.ArgumentParser:
        p = tsub.add_parser(name, help=help_)
        p.add_argument("--file", type=Path, required=True, help="the token file the control plane reads (--tokens)")
        return p

    create = token_command("create", "a new token; printed once, only its hash is stored")
    create.add_argument("--name", required=True, help="who holds it (unique in the file)")
    create.add_argument("--role", required=True, choices=TOKEN_ROLES)
    create.add_argument("--tenant", default="", help="the tenant of a tenant-user token")
    create.add_argument("--expires-in", default=None, metavar="DURATION",
                        help="refuse the token this long after now, e.g. 30d, 12h, 90m, 2w (default: never)")
    create.set_defaults(run=run_token_create)
    revoke = token_command("revoke", "revoke a token by its name or id (effective on the next call)")
    revoke.add_argument("name")
    revoke.set_defaults(run=run_token_revoke)
    token_command("list", "the tokens in the file (never the secrets)").set_defaults(run=run_token_list)


def run_init(args: argparse.Namespace) -> int:
    for path in init_ca(args.dir, cluster=args.cluster, server_names=tuple(args.server_name)):
        print(path)
    return 0


def run_issue(args: argparse.Namespace) -> int:
    if args.kind != "user" and args.tenant:
        raise ValidationError("only a user certificate has a tenant", field="--tenant")
    for path in issue(args.dir, args.kind, args.name, tenant=args.tenant, hosts=tuple(args.server_name)):
        print(path)
    return 0


def run_token_create(args: argparse.Namespace) -> int:
    expires_in = None if args.expires_in is None else parse_duration(args.expires_in)
    token, _ = TokenFile(args.file).create(args.name, args.role, args.tenant, expires_in)
    print(token)  # the only time it is shown
    return 0


def run_token_revoke(args: argparse.Namespace) -> int:
    entry = TokenFile(args.file).revoke(args.name)
    print(f"revoked {entry.name} ({entry.id})")
    return 0


def run_token_list(args: argparse.Namespace) -> int:
    now = time.time()
    for e in TokenFile(args.file).entries():
        expiry = ("" if e.expires is None else
                  f"  EXPIRED {utc(e.expires)}" if e.expired(now) else f"  expires {utc(e.expires)}")
        print(f"{e.id}  {e.name}  {e.role}{'  tenant=' + e.tenant if e.tenant else ''}  created {utc(e.created)}"
              f"{expiry}")
    return 0
