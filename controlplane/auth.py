"""Who is calling, and what they may do (docs/security.md).

* **Certificates.** On the agent port gRPC has verified the peer's certificate
  against the cluster CA before any call; :func:`halyard.tls.identity_from_pem`
  reads the role from its subject alternative names.
* **Tokens.** ``authorization: Bearer hy_ID_SECRET``. The token file holds only a
  SHA-256 of each secret (the secrets are 256 random bits, so a plain hash is as
  good as a slow one); ``halyard tokens create|revoke|list`` edits it and the
  control plane reads it again whenever it changes, so a revocation takes effect
  on the next call. A token may carry an expiry (``--expires-in 30d``); an expired
  token is refused like a revoked one, with a message that says it expired. A file
  without expiries (older ones) means tokens that never expire.
* **Insecure mode** (``--insecure``, loopback only): with no token file every
  caller is an operator and any agent may register as any node; with one, clients
  still need a token.

Roles: a *tenant-user* sees, watches and cancels its own tenant's jobs only and
submits jobs into its tenant; an *operator* sees everything and drains nodes; an
*agent* (a node certificate) may use AgentService only, for its own node.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import os
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import grpc
import structlog

from halyard.controlplane.errors import PermissionDenied, Unauthenticated
from halyard.controlplane.token_throttle import FailedTokens
from halyard.datamodel import HalyardError, ValidationError
from halyard.datamodel.limits import MAX_TENANT, MAX_USER, check_name
from halyard.tls import ROLE_AGENT, ROLE_OPERATOR, ROLE_TENANT_USER, Principal, identity_from_pem

log = structlog.get_logger("halyard.auth")

TOKEN_PREFIX = "hy"
TOKEN_ROLES = (ROLE_TENANT_USER, ROLE_OPERATOR)  # agents authenticate with node certificates only
INSECURE_OPERATOR = Principal(ROLE_OPERATOR, "insecure", via="insecure")
INSECURE_AGENT = Principal(ROLE_AGENT, "insecure", via="insecure")
MAX_TOKEN_CHARS = 200
DURATION_UNITS_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
MAX_TOKEN_LIFETIME_S = 10 * 365 * 86400.0  # ten years, as the certificates `halyard certs init` makes
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


class TokenFileError(HalyardError):
    """The token file cannot be read or written; the message names it."""


@dataclass(frozen=True, slots=True)
class TokenEntry:
    id: str
    name: str
    role: str
    tenant: str
    sha256: str
    created: float
    expires: float | None = None  # Unix time; None: never (every token of a file written before expiries)

    def principal(self) -> Principal:
        return Principal(self.role, self.name, tenant=self.tenant, via="token")

    def expired(self, now: float) -> bool:
        return self.expires is not None and now >= self.expires


def utc(t: float) -> str:
    """A Unix time as the token commands and messages show it."""
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def parse_duration(text: str, field: str = "--expires-in") -> float:
    """Seconds in ``30d``, ``12h``, ``90m``, ``45s`` or ``2w`` (a positive number and one unit)."""
    match = _DURATION.fullmatch(text.strip())
    seconds = float(match.group(1)) * DURATION_UNITS_S[match.group(2)] if match else 0.0
    if not 0 < seconds <= MAX_TOKEN_LIFETIME_S:
        raise ValidationError(f"expected a positive duration of at most ten years such as 30d, 12h, 90m, 45s or 2w, "
                              f"got {text!r}", field=field)
    return seconds


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class TokenFile:
    """Hashed bearer tokens in one JSON file (mode 0600), re-read when it changes."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._stamp: tuple[int, int] | None = None
        self._entries: dict[str, TokenEntry] = {}

    # --- the operator's commands --------------------------------------------------------

    def create(self, name: str, role: str, tenant: str = "",
               expires_in_s: float | None = None) -> tuple[str, TokenEntry]:
        """A new token (returned once, in full; only its hash is stored), valid for ``expires_in_s``
        seconds from now (None: until revoked)."""
        check_name(name, "--name", MAX_USER)
        if role not in TOKEN_ROLES:
            raise ValidationError(f"must be one of {', '.join(TOKEN_ROLES)} (agents use node certificates)",
                                  field="--role")
        if role == ROLE_TENANT_USER:
            check_name(tenant, "--tenant", MAX_TENANT)
        elif tenant:
            raise ValidationError("only a tenant-user token has a tenant", field="--tenant")
        entries = self._load(must_exist=False)
        if any(e.name == name for e in entries.values()):
            raise ValidationError(f"a token named {name!r} exists; revoke it first", field="--name")
        token_id, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
        now = round(time.time(), 3)
        entry = TokenEntry(token_id, name, role, tenant, _digest(secret), now,
                           None if expires_in_s is None else round(now + expires_in_s, 3))
        entries[token_id] = entry
        self._save(entries)
        return f"{TOKEN_PREFIX}_{token_id}_{secret}", entry

    def revoke(self, name_or_id: str) -> TokenEntry:
        entries = self._load(must_exist=True)
        for token_id, entry in entries.items():
            if name_or_id in (entry.name, token_id):
                del entries[token_id]
                self._save(entries)
                return entry
        raise ValidationError(f"no token named {name_or_id!r} in {self.path}", field="name")

    def entries(self) -> list[TokenEntry]:
        return list(self._load(must_exist=False).values())

    # --- the control plane ----------------------------------------------------------------

    def check(self, token: str) -> Principal:
        """The principal of a presented token; :class:`Unauthenticated` if it is unknown, revoked or expired."""
        prefix, _, rest = token.partition("_")
        token_id, _, secret = rest.partition("_")
        if prefix != TOKEN_PREFIX or not token_id or not secret or len(token) > MAX_TOKEN_CHARS:
            raise Unauthenticated("malformed bearer token (expected hy_ID_SECRET from `halyard tokens create`)")
        entry = self._current().get(token_id)
        if entry is None or not hmac.compare_digest(entry.sha256, _digest(secret)):
            raise Unauthenticated("unknown or revoked token")
        if entry.expired(time.time()):
            raise Unauthenticated(f"token {entry.name!r} ({entry.id}) expired at {utc(entry.expires or 0)}; "
                                  "ask an operator for a new one (`halyard tokens create --expires-in`)")
        return entry.principal()

    def _current(self) -> dict[str, TokenEntry]:
        try:
            st = os.stat(self.path)
        except OSError:
            self._stamp, self._entries = None, {}
            return self._entries
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp != self._stamp:
            try:
                self._entries = self._load(must_exist=True)
            except TokenFileError as exc:
                log.error("token file unreadable; refusing every token until it is fixed", error=str(exc))
                self._entries = {}
            self._stamp = stamp
        return self._entries

    # --- the file ---------------------------------------------------------------------------

    def _load(self, *, must_exist: bool) -> dict[str, TokenEntry]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            if must_exist:
                raise TokenFileError(f"{self.path}: no token file") from None
            return {}
        except OSError as exc:
            raise TokenFileError(f"{self.path}: cannot read the token file: {exc.strerror}") from None
        try:
            rows = json.loads(text)["tokens"]
            return {r["id"]: TokenEntry(r["id"], r["name"], r["role"], r.get("tenant", ""), r["sha256"],
                                        float(r.get("created", 0)),
                                        None if r.get("expires") is None else float(r["expires"])) for r in rows}
        except (ValueError, KeyError, TypeError) as exc:
            raise TokenFileError(f"{self.path}: not a Halyard token file: {exc}") from None

    def _save(self, entries: dict[str, TokenEntry]) -> None:
        rows = [{"id": e.id, "name": e.name, "role": e.role, "tenant": e.tenant, "sha256": e.sha256,
                 "created": e.created, **({} if e.expires is None else {"expires": e.expires})}
                for e in entries.values()]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump({"tokens": rows}, out, indent=1)
            out.write("\n")
        os.replace(tmp, self.path)  # atomic: the control plane never reads half a file


class Authenticator:
    """Turns a call's certificate or token into a :class:`Principal` and checks what it may do."""

    def __init__(self, *, secure: bool, tokens: TokenFile | None = None,
                 throttle: FailedTokens | None = None) -> None:
        self.secure = secure
        self.tokens = tokens
        self.throttle = throttle

    @property
    def open(self) -> bool:
        """Insecure mode without a token file: every client is an operator, nothing is checked."""
        return not self.secure and self.tokens is None

    def bearer(self, token: str, peer: str | None = None) -> Principal:
        """The principal of a bearer token, on any surface (gRPC metadata, HTTP header, dashboard session);
        a token a ``peer`` presented counts against it in the throttle when it fails."""
        if self.tokens is None:
            raise Unauthenticated("this control plane takes no tokens (it was started without --tokens)")
        if self.throttle is None or peer is None:
            return self.tokens.check(token)
        self.throttle.check(peer)
        try:
            return self.tokens.check(token)
        except Unauthenticated:
            if self.throttle.failed(peer):
                log.warning("bad tokens: peer refused for a while", peer=peer, limit=self.throttle.limit,
                            window_s=self.throttle.window_s)
            raise

    def principal(self, context: grpc.aio.ServicerContext) -> Principal:
        # Only TLS carries certificates: insecure mode skips building the call's auth context.
        certs = (context.auth_context() or {}).get("x509_pem_cert") if self.secure else None
        if certs:
            who = identity_from_pem(next(iter(certs)))
            if who is None:
                raise Unauthenticated("the client certificate names no Halyard identity "
                                      "(make it with `halyard certs issue`)")
            return who
        token = _bearer(context)
        if token is not None:
            return self.bearer(token, context.peer())
        if self.open:
            return INSECURE_OPERATOR
        raise Unauthenticated("no credentials: send 'authorization: Bearer TOKEN' (`halyard tokens create`) "
                              "or connect with a client certificate")

    def client(self, context: grpc.aio.ServicerContext) -> Principal:
        """A JobService/ClusterService caller: anyone but an agent."""
        who = self.principal(context)
        if who.role == ROLE_AGENT:
            raise PermissionDenied(f"{who.describe()} may use AgentService only")
        return who

    def operator(self, context: grpc.aio.ServicerContext, what: str) -> Principal:
        who = self.client(context)
        if not who.is_operator:
            raise PermissionDenied(f"only an operator may {what}; the caller is {who.describe()}")
        return who

    def agent(self, context: grpc.aio.ServicerContext) -> Principal:
        """An AgentService caller: a node certificate (insecure mode: anyone)."""
        certs = (context.auth_context() or {}).get("x509_pem_cert")
        if not certs:
            if not self.secure:
                return INSECURE_AGENT
            raise Unauthenticated("agents connect to the agent port with a node certificate "
                                  "(`halyard certs issue node NAME`)")
        who = identity_from_pem(next(iter(certs)))
        if who is None or who.role != ROLE_AGENT:
            raise PermissionDenied(f"{who.describe() if who else 'this certificate'} is not a node certificate; "
                                   "only agents may use AgentService")
        return who


def bearer_token(value: str, where: str = "metadata") -> str:
    """TOKEN of an ``authorization: Bearer TOKEN`` value (gRPC metadata or HTTP header)."""
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated(f"the authorization {where} must be 'Bearer TOKEN'")
    return token.strip()


def _bearer(context: grpc.aio.ServicerContext) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == "authorization":
            return bearer_token(str(value))
    return None
