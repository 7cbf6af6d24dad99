"""The control plane's HTTP port (aiohttp): /healthz, /metrics, the web dashboard and its JSON views.

Every route is registered in :func:`build_app`, behind two middlewares:

* :func:`_host_check` refuses a request whose Host header is not a name the control plane
  was configured with (the ``--http`` address, the loopback names for a loopback bind,
  each ``--http-host``): a web page cannot reach this port through DNS rebinding.
* :func:`_errors` maps refusals to status codes (400 naming the parameter, 401, 403, 404),
  as JSON, never a stack trace.

``/api/*`` answers to the gRPC API's identities (:mod:`websession`): a bearer token or a
dashboard session opened at ``/login``; a tenant's user sees only its tenant's jobs and
events, an operator everything, and no one an environment value. ``/healthz`` and
``/metrics`` stay open for probes and Prometheus and carry counts, node and tenant names,
never a job's name (docs/security.md). Insecure mode without ``--tokens`` keeps the port
open, every caller an operator, and the page says so.

The dashboard is three static files shipped in the package (``static/``, no
build step, nothing fetched from elsewhere: the Content-Security-Policy allows
only this origin) that read the JSON views under ``/api/`` and follow the event
log as server-sent events (``/api/events``, resumable with ``Last-Event-ID``).
"""

from __future__ import annotations

import asyncio
import html
import json
import math
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

import structlog
from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client import exposition

from halyard.controlplane import dashboard
from halyard.controlplane.auth import Authenticator
from halyard.controlplane.errors import NotFound, PermissionDenied, TooManyFailures, Unauthenticated
from halyard.controlplane.prometheus import Metrics
from halyard.controlplane.service import ControlPlane
from halyard.controlplane.websession import (
    LOGIN_COOKIE,
    SESSION_COOKIE,
    Caller,
    Sessions,
    allowed_hosts,
    host_name,
    identify,
    same,
)
from halyard.datamodel import ValidationError
from halyard.tls import ROLE_TENANT_USER

log = structlog.get_logger("halyard.http")

STATIC = {"index.html": "text/html", "dashboard.js": "text/javascript", "dashboard.css": "text/css"}
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
       "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
SSE_POLL_S = 1.0  # how often an idle event stream checks whether the server is closing
SSE_KEEPALIVE_S = 15.0  # a comment line this often keeps proxies from closing an idle stream
RECENT_EVENTS = 100  # a new stream without a position starts this many events back
MAX_SEQ = 2**63 - 1  # the largest event number a stream may resume after (the store's INTEGER)
SHUTDOWN_TIMEOUT_S = 2.0
MAX_BODY_BYTES = 16 << 10  # the login form: a token and a CSRF token
MAX_HOST_SHOWN = 100

PAGES = ("/", "/dashboard")  # the dashboard's page; without a caller they send the browser to /login

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ApiHandler = Callable[[web.Request, Caller], Awaitable[web.StreamResponse]]


def build_app(cp: ControlPlane, metrics: Metrics, auth: Authenticator | None = None,
              hosts: frozenset[str] | None = None) -> web.Application:
    """The aiohttp application; ``hosts`` are the Host names it answers (default: the loopback names)."""
    auth = auth or Authenticator(secure=False)
    hosts = hosts if hosts is not None else allowed_hosts("127.0.0.1:0")
    app = web.Application(middlewares=[_host_check(hosts), _errors], client_max_size=MAX_BODY_BYTES)
    port = _Port(cp, metrics, auth)
    app.on_shutdown.append(port.shutdown)
    app.cleanup_ctx.append(port.sample_measured)
    port.add_routes(app.router)
    return app


def _host_check(hosts: frozenset[str]) -> Middleware:
    """The middleware that refuses a Host this port was not configured with (DNS rebinding),
    before anything else."""
    @web.middleware
    async def host_check(request: web.Request, handler: Handler) -> web.StreamResponse:
        given = request.headers.get("Host", "")
        if host_name(given) not in hosts:
            return web.json_response({"error": f"Host {given[:MAX_HOST_SHOWN]!r} is not a name this control plane "
                                               "serves (start it with --http-host NAME to add one)"}, status=421)
        return await handler(request)
    return host_check


class _Port:
    """The routes of one HTTP port and what they share: the control plane, the authenticator, the
    dashboard sessions, the utilisation timeline and the event streams' closing flag. One per
    :func:`build_app`; the methods are grouped as the routes are: health and metrics, pages and
    login, the JSON views under /api/, the event stream."""

    def __init__(self, cp: ControlPlane, metrics: Metrics, auth: Authenticator) -> None:
        self.cp, self.metrics, self.auth = cp, metrics, auth
        self.sessions = Sessions()
        self.started = time.monotonic()
        self.closing = asyncio.Event()
        self.timeline = dashboard.Timeline()
        self.measured = dashboard.MeasuredSeries()
        self.static = {name: (resources.files("halyard.controlplane").joinpath("static", name).read_bytes(), kind)
                       for name, kind in STATIC.items()}

    def add_routes(self, routes: web.UrlDispatcher) -> None:
        routes.add_get("/healthz", self.healthz)
        routes.add_get("/metrics", self.prometheus)
        for path in PAGES:
            routes.add_get(path, self.page("index.html", login=True))
        routes.add_get("/login", self.login_form)
        routes.add_post("/login", self.login)
        routes.add_post("/logout", self.logout)
        routes.add_get("/static/dashboard.js", self.page("dashboard.js"))
        routes.add_get("/static/dashboard.css", self.page("dashboard.css"))
        routes.add_get("/api/session", self.api(self.whoami))
        routes.add_get("/api/cluster", self.api(self.cluster))
        routes.add_get("/api/jobs", self.api(self.jobs))
        routes.add_get("/api/jobs/{job_id}", self.api(self.job))
        routes.add_get("/api/queue", self.api(self.queue))
        routes.add_get("/api/utilization", self.api(self.utilisation))
        routes.add_get("/api/events", self.api(self.events))

    # who calls

    def caller(self, request: web.Request) -> Caller:
        return identify(self.auth, self.sessions, request.headers.get("Authorization"),
                        request.cookies.get(SESSION_COOKIE), request.remote)

    def api(self, handler: ApiHandler) -> Handler:
        """``handler`` for callers with credentials only (401 otherwise), told who calls."""
        async def checked(request: web.Request) -> web.StreamResponse:
            return await handler(request, self.caller(request))
        return checked

    # health and metrics: open to probes and Prometheus

    async def healthz(self, _: web.Request) -> web.Response:
        cp = self.cp
        problems = [_public(p) for p in self.metrics.problems()]
        body = {"status": "unhealthy" if problems else "ok", "problems": problems,
                "uptime_s": round(time.monotonic() - self.started, 3), "agents": len(cp.sessions),
                "pending": len(cp.core.pending), "running": len(cp.core.running)}
        return web.json_response(body, status=503 if problems else 200)

    async def prometheus(self, _: web.Request) -> web.Response:
        return web.Response(body=self.metrics.render(), headers={"Content-Type": exposition.CONTENT_TYPE_LATEST})

    # the dashboard's pages, login and logout

    def page(self, name: str, *, login: bool = False) -> Handler:
        """A static file; with ``login``, only for a caller (the browser of anyone else goes to /login)."""
        body, kind = self.static[name]

        async def serve(request: web.Request) -> web.Response:
            if login:
                try:
                    self.caller(request)
                except Unauthenticated:
                    return _see_other("/login")
            return web.Response(body=body, content_type=kind, charset="utf-8", headers=_page_headers())
        return serve

    async def login_form(self, request: web.Request) -> web.Response:
        if self.auth.open:
            return _see_other("/")  # insecure mode without tokens: nothing to log in with
        return _login_page(request, "", 200)

    async def login(self, request: web.Request) -> web.Response:
        if self.auth.open:
            return _see_other("/")
        form = await request.post()
        if not same(_field(form, "csrf"), request.cookies.get(LOGIN_COOKIE)) or not _same_origin(request):
            return _login_page(request, "The form expired or came from another site; log in again.", 403)
        token = _field(form, "token").strip()
        try:
            who = self.auth.bearer(token, request.remote)
        except Unauthenticated as exc:
            log.info("dashboard login refused", peer=request.remote, error=str(exc))
            if isinstance(exc, TooManyFailures):
                response = _login_page(request, str(exc), 429)
                response.headers.update(_retry_after(exc))
                return response
            return _login_page(request, str(exc), 401)
        sid, _ = self.sessions.open(token)
        log.info("dashboard login", who=who.describe(), peer=request.remote)
        response = _see_other("/")
        response.set_cookie(SESSION_COOKIE, sid, path="/", httponly=True, samesite="Strict", secure=request.secure)
        response.del_cookie(LOGIN_COOKIE, path="/login")
        return response

    async def logout(self, request: web.Request) -> web.Response:
        form = await request.post()
        sid = request.cookies.get(SESSION_COOKIE)
        session = self.sessions.get(sid) if sid else None
        if session is not None:
            if not same(_field(form, "csrf"), session.csrf) or not _same_origin(request):
                raise PermissionDenied("field 'csrf': not this session's; log out from the dashboard's own page")
            self.sessions.close(sid or "")
        response = _see_other("/login")
        response.del_cookie(SESSION_COOKIE, path="/")
        return response

    # the JSON views under /api/ (behind api(): a caller, a tenant's user sees its tenant only)

    async def whoami(self, _: web.Request, caller: Caller) -> web.Response:
        who = caller.who
        return _json({"name": who.name, "role": who.role, "tenant": who.tenant, "via": who.via,
                      "insecure": self.auth.open, "csrf": caller.session.csrf if caller.session else None})

    async def cluster(self, _: web.Request, caller: Caller) -> web.Response:
        return _json(dashboard.cluster_view(self.cp, _visible(caller)))

    async def jobs(self, request: web.Request, caller: Caller) -> web.Response:
        q = request.query
        return _json(dashboard.jobs_view(self.cp, state=dashboard.parse_state(q.get("state")), tenant=q.get("tenant"),
                                         limit=_number(q, "limit", int, dashboard.MAX_JOBS),
                                         visible=_visible(caller)))

    async def job(self, request: web.Request, caller: Caller) -> web.Response:
        return _json(dashboard.job_view(self.cp, request.match_info["job_id"], _visible(caller)))

    async def queue(self, request: web.Request, caller: Caller) -> web.Response:
        return _json(dashboard.queue_view(self.cp, limit=_number(request.query, "limit", int, dashboard.MAX_JOBS),
                                          visible=_visible(caller)))

    async def utilisation(self, request: web.Request, _: Caller) -> web.Response:
        window = _number(request.query, "window_s", float, None)  # None: the cluster's age, at most 6 h
        return _json(dashboard.timeline_view(self.cp, self.timeline, self.measured, window))

    async def sample_measured(self, app: web.Application) -> AsyncIterator[None]:
        """Background: the agents' measured utilisation every MEASURE_EVERY_S, for the timeline."""
        async def loop() -> None:
            while True:
                self.measured.record(self.cp)
                await asyncio.sleep(dashboard.MEASURE_EVERY_S)
        task = asyncio.create_task(loop(), name="measured-utilisation")
        yield
        task.cancel()

    # the event stream

    async def events(self, request: web.Request, caller: Caller) -> web.StreamResponse:
        """The event log as server-sent events, from ``after`` (or ``Last-Event-ID``), then live;
        a tenant's user gets its tenant's events only."""
        cp = self.cp
        seq = _after(request)
        if seq is None:
            seq = max(0, len(cp.core.log) - RECENT_EVENTS)
        visible, records = _visible(caller), cp.core.records
        headers = {"Content-Type": "text/event-stream", "Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        if request.method == "HEAD":  # no body: a stream would never notice its reader has gone
            return web.Response(headers=headers)
        response = web.StreamResponse(headers=headers)
        await response.prepare(request)
        quiet_since = time.monotonic()
        try:
            while not self.closing.is_set():
                batch = cp.core.log.since(seq)
                if batch:
                    seq = batch[-1].seq
                    shown = [e for e in batch if visible is None
                             or ((r := records.get(e.job_id)) is not None and r.spec.tenant == visible)]
                    if shown:
                        await response.write("".join(f"id: {e.seq}\ndata: {json.dumps(dashboard.event_json(e))}\n\n"
                                                     for e in shown).encode())
                        quiet_since = time.monotonic()
                if time.monotonic() - quiet_since > SSE_KEEPALIVE_S:
                    await response.write(b": keepalive\n\n")
                    quiet_since = time.monotonic()
                # seq >= 0 (checked by _after), so this waits unless an event after seq exists
                await cp.wait_events(seq, SSE_POLL_S)
        except ConnectionError:
            pass  # the browser went away
        return response

    async def shutdown(self, _: web.Application) -> None:
        self.closing.set()


async def start_http(app: web.Application, listen: str) -> tuple[web.AppRunner, int]:
    """Serve ``app`` on HOST:PORT (port 0: any free one); returns the runner and the port bound."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
    await runner.setup()
    host, port = listen.rsplit(":", 1)
    await web.TCPSite(runner, host, int(port), reuse_port=False).start()  # a busy port is refused
    return runner, runner.addresses[0][1]


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Bad input -> 400 naming the parameter, no credentials -> 401, too many bad tokens -> 429,
    another tenant's -> 403, unknown ids -> 404; as JSON, never a stack trace."""
    try:
        return await handler(request)
    except ValidationError as exc:
        return web.json_response({"error": str(exc)}, status=400)
    except TooManyFailures as exc:
        return web.json_response({"error": str(exc)}, status=429, headers=_retry_after(exc))
    except Unauthenticated as exc:
        return web.json_response({"error": str(exc)}, status=401, headers={"WWW-Authenticate": "Bearer"})
    except PermissionDenied as exc:
        return web.json_response({"error": str(exc)}, status=403)
    except NotFound as exc:
        return web.json_response({"error": str(exc)}, status=404)


def _retry_after(exc: TooManyFailures) -> dict[str, str]:
    return {"Retry-After": str(max(1, math.ceil(exc.retry_after_s)))}


def _visible(caller: Caller) -> str | None:
    """The one tenant the caller may see (None: every tenant), as gRPC's tenancy."""
    who = caller.who
    return who.tenant if who.role == ROLE_TENANT_USER else None


def _after(request: web.Request) -> int | None:
    """Where an event stream resumes: ``Last-Event-ID`` or ``after``, 0 to MAX_SEQ (None: not given)."""
    given = request.headers.get("Last-Event-ID") or request.query.get("after")
    if not given:
        return None
    if not (given.isascii() and given.isdigit() and len(given) <= len(str(MAX_SEQ)) and int(given) <= MAX_SEQ):
        raise ValidationError(f"must be an event number from 0 to {MAX_SEQ}, got {given[:40]!r}", field="after")
    return int(given)


def _public(problem: str) -> str:
    """A /healthz problem without the failing pass's exception message, which may name a job:
    ``scheduler: the last scheduling pass failed: KeyError`` (the message is in the log)."""
    head, sep, rest = problem.partition("the last scheduling pass failed: ")
    if not sep:
        return problem
    return f"{head}{sep}{rest.partition(':')[0]} (the control plane's log has the message)"


def _same_origin(request: web.Request) -> bool:
    """A form post comes from this port's own pages, as far as the browser says: its Origin (when
    sent; "null", a sandboxed frame's, is refused) is this Host and Sec-Fetch-Site is same-origin.
    (The pages' Referrer-Policy is same-origin: with no-referrer a browser sends Origin "null".)"""
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None and site != "same-origin":
        return False
    origin = request.headers.get("Origin")
    if origin is None:
        return True
    return origin != "null" and host_name(urlsplit(origin).netloc) == host_name(request.host)


def _field(form: Any, name: str) -> str:
    value = form.get(name)
    return value if isinstance(value, str) else ""


def _page_headers() -> dict[str, str]:
    return {"Content-Security-Policy": CSP, "Cache-Control": "no-store", "X-Frame-Options": "DENY",
            "Referrer-Policy": "same-origin", "X-Content-Type-Options": "nosniff"}


def _see_other(location: str) -> web.Response:
    return web.Response(status=303, headers={"Location": location, "Cache-Control": "no-store"})


LOGIN_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Halyard: log in</title><link rel="icon" href="data:,"><link rel="stylesheet" href="/static/dashboard.css">
</head><body class="login"><main><section class="panel login-panel"><h1>Halyard</h1>
<form method="post" action="/login" id="login-form">
<label for="token">Token (<code>halyard tokens create</code>)</label>
<input type="password" id="token" name="token" autocomplete="off" required maxlength="200">
<input type="hidden" name="csrf" value="{csrf}">
<button type="submit" id="login">Log in</button></form>
<p class="error" id="login-error">{error}</p></section></main></body></html>
"""


def _login_page(request: web.Request, error: str, status: int) -> web.Response:
    """The login form with a fresh CSRF token, also set as a SameSite=Strict cookie for /login only."""
    csrf = secrets.token_urlsafe(24)
    response = web.Response(text=LOGIN_PAGE.format(csrf=csrf, error=html.escape(error)), status=status,
                            content_type="text/html", charset="utf-8", headers=_page_headers())
    response.set_cookie(LOGIN_COOKIE, csrf, path="/login", httponly=True, samesite="Strict", secure=request.secure)
    return response


def _json(body: dict[str, Any]) -> web.Response:
    return web.json_response(body, headers={"Cache-Control": "no-store"})


def _number(query: Any, name: str, kind: type, default: Any) -> Any:
    raw = query.get(name)
    if raw is None or raw == "":
        return default
    try:
        return kind(raw)
    except ValueError:
        raise ValidationError(f"not a{'n integer' if kind is int else ' number'}: {raw!r}", field=name) from None
