"""Who is calling the HTTP port: Host check, bearer tokens, dashboard sessions and CSRF (docs/security.md).

The HTTP port answers to the same identities as gRPC (:class:`Authenticator`): a request
to ``/api/*`` carries ``Authorization: Bearer TOKEN`` or the cookie of a dashboard
session. A session is opened by the login form with a token and keeps that token on the
server only, so every request re-checks it: a revoked or expired token ends its sessions
on their next request. The cookie is HttpOnly and SameSite=Strict; the forms that change
state (log in, log out) carry a CSRF token that a page of another origin cannot read.

The Host header is checked on every request before anything else: a page that
rebinds its own DNS name to this port's address (DNS rebinding) sends its own name,
which is not one the control plane was configured with, and is refused.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

from halyard.controlplane.auth import INSECURE_OPERATOR, Authenticator, bearer_token
from halyard.controlplane.errors import Unauthenticated
from halyard.tls import Principal, is_loopback_host

SESSION_COOKIE = "halyard_session"
LOGIN_COOKIE = "halyard_login"  # the login form's CSRF token, bound to the browser that loaded the form
SESSION_IDLE_S = 8 * 3600.0  # a session unused this long is closed (a working day)
SESSION_MAX_S = 7 * 86400.0  # and any session after a week, whatever its token's own expiry
MAX_SESSIONS = 10_000  # beyond this the least recently used session is closed
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARDS = frozenset({"", "0.0.0.0", "::"})
DEFAULT_HTTP_HOST = "127.0.0.1"


def http_listen(value: str) -> str:
    """``--http`` as HOST:PORT: a bare port or ``:PORT`` binds loopback, never every interface."""
    if ":" not in value:
        return f"{DEFAULT_HTTP_HOST}:{value}"
    host, port = value.rsplit(":", 1)
    return f"{host or DEFAULT_HTTP_HOST}:{port}"


def allowed_hosts(listen: str, names: Iterable[str] = ()) -> frozenset[str]:
    """The Host names requests may carry: the bound address, the loopback names when it is
    loopback (or every interface, loopback included), and every ``--http-host``."""
    host = listen.rsplit(":", 1)[0].strip("[]").lower()
    allowed = {_canonical(n) for n in names}
    if host in WILDCARDS or is_loopback_host(host):
        allowed |= LOOPBACK_NAMES
    if host not in WILDCARDS:
        allowed.add(_canonical(host))
    return frozenset(allowed)


def host_name(header: str) -> str:
    """The name of a Host header (``name``, ``name:port``, ``[v6]:port``), lower case, no trailing dot."""
    header = header.strip()
    if header.startswith("["):
        return _canonical(header[1:].partition("]")[0])
    return _canonical(header.rsplit(":", 1)[0] if header.count(":") == 1 else header)


def _canonical(name: str) -> str:
    name = name.strip().strip("[]").lower().rstrip(".")
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        return name


@dataclass(slots=True)
class Session:
    token: str  # kept here, never in the cookie: each request checks it again
    csrf: str
    started: float
    seen: float = field(default=0.0)


class Sessions:
    """Dashboard sessions in memory (a restart logs everyone out), least recently used last."""

    def __init__(self, idle_s: float = SESSION_IDLE_S, max_s: float = SESSION_MAX_S,
                 keep: int = MAX_SESSIONS) -> None:
        self.idle_s, self.max_s, self.keep = idle_s, max_s, keep
        self._open: OrderedDict[str, Session] = OrderedDict()

    def open(self, token: str) -> tuple[str, Session]:
        now = time.monotonic()
        sid = secrets.token_urlsafe(32)
        session = Session(token, secrets.token_urlsafe(24), now, now)
        self._open[sid] = session
        while len(self._open) > self.keep:
            self._open.popitem(last=False)
        return sid, session

    def get(self, sid: str) -> Session | None:
        session = self._open.get(sid)
        if session is None:
            return None
        now = time.monotonic()
        if now - session.seen > self.idle_s or now - session.started > self.max_s:
            del self._open[sid]
            return None
        session.seen = now
        self._open.move_to_end(sid)
        return session

    def close(self, sid: str) -> None:
        self._open.pop(sid, None)

    def __len__(self) -> int:
        return len(self._open)


@dataclass(frozen=True, slots=True)
class Caller:
    """Who a request is from, and the session it came with (None: a bearer token, or insecure mode)."""

    who: Principal
    sid: str | None = None
    session: Session | None = None


def identify(auth: Authenticator, sessions: Sessions, authorization: str | None,
             cookie: str | None, peer: str | None = None) -> Caller:
    """The caller of an HTTP request from ``peer``: its bearer token, else its session;
    :class:`Unauthenticated` if neither."""
    if authorization is not None:
        return Caller(auth.bearer(bearer_token(authorization, "header"), peer))
    if cookie:
        session = sessions.get(cookie)
        if session is not None:
            try:
                return Caller(auth.bearer(session.token), cookie, session)
            except Unauthenticated:
                sessions.close(cookie)  # its token was revoked or expired: so is the session
                raise
    if auth.open:
        return Caller(INSECURE_OPERATOR)
    raise Unauthenticated("log in at /login, or send 'Authorization: Bearer TOKEN' (`halyard tokens create`)")


def same(given: str | None, expected: str | None) -> bool:
    """Constant-time comparison of two CSRF tokens, neither of them missing."""
    return bool(given) and bool(expected) and hmac.compare_digest(str(given), str(expected))
