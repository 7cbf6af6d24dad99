"""The control plane's HTTP port (aiohttp): /healthz, /metrics and the read-only web dashboard.

Every HTTP route is registered in :func:`build_app`, and every handler reads
through :mod:`halyard.controlplane.dashboard` or :class:`Metrics`; nothing
here changes state. That is the one place where, once the gRPC API has
identities (tokens), an aiohttp middleware added in :func:`build_app` can
authenticate each request and the views can filter jobs by the caller's tenant.
Until then the port is unauthenticated: bind it to loopback or a trusted network.

The dashboard is three static files shipped in the package (``static/``, no
build step, nothing fetched from elsewhere: the Content-Security-Policy allows
only this origin) that read the JSON views under ``/api/`` and follow the event
log as server-sent events (``/api/events``, resumable with ``Last-Event-ID``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import resources
from typing import Any

from aiohttp import web
from prometheus_client import exposition

from halyard.controlplane import dashboard
from halyard.controlplane.errors import NotFound
from halyard.controlplane.prometheus import Metrics
from halyard.controlplane.service import ControlPlane
from halyard.datamodel import ValidationError

STATIC = {"index.html": "text/html", "dashboard.js": "text/javascript", "dashboard.css": "text/css"}
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
SSE_POLL_S = 1.0  # how often an idle event stream checks whether the server is closing
SSE_KEEPALIVE_S = 15.0  # a comment line this often keeps proxies from closing an idle stream
RECENT_EVENTS = 100  # a new stream without a position starts this many events back
SHUTDOWN_TIMEOUT_S = 2.0

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def build_app(cp: ControlPlane, metrics: Metrics) -> web.Application:
    """The aiohttp application; see the module docstring for where authentication goes."""
    app = web.Application(middlewares=[_errors])
    started = time.monotonic()
    closing = asyncio.Event()
    timeline = dashboard.Timeline()
    measured = dashboard.MeasuredSeries()
    static = {name: (resources.files("halyard.controlplane").joinpath("static", name).read_bytes(), kind)
              for name, kind in STATIC.items()}

    async def healthz(_: web.Request) -> web.Response:
        problems = metrics.problems()
        body = {"status": "unhealthy" if problems else "ok", "problems": problems,
                "uptime_s": round(time.monotonic() - started, 3), "agents": len(cp.sessions),
                "pending": len(cp.core.pending), "running": len(cp.core.running)}
        return web.json_response(body, status=503 if problems else 200)

    async def prometheus(_: web.Request) -> web.Response:
        return web.Response(body=metrics.render(), headers={"Content-Type": exposition.CONTENT_TYPE_LATEST})

    def page(name: str) -> Handler:
        body, kind = static[name]

        async def serve(_: web.Request) -> web.Response:
            return web.Response(body=body, content_type=kind, charset="utf-8",
                                headers={"Content-Security-Policy": CSP, "Cache-Control": "no-cache"})
        return serve

    async def cluster(_: web.Request) -> web.Response:
        return _json(dashboard.cluster_view(cp))

    async def jobs(request: web.Request) -> web.Response:
        q = request.query
        return _json(dashboard.jobs_view(cp, state=dashboard.parse_state(q.get("state")), tenant=q.get("tenant"),
                                         limit=_number(q, "limit", int, dashboard.MAX_JOBS)))

    async def job(request: web.Request) -> web.Response:
        return _json(dashboard.job_view(cp, request.match_info["job_id"]))

    async def queue(request: web.Request) -> web.Response:
        return _json(dashboard.queue_view(cp, limit=_number(request.query, "limit", int, dashboard.MAX_JOBS)))

    async def utilisation(request: web.Request) -> web.Response:
        window = _number(request.query, "window_s", float, None)  # None: the cluster's age, at most 6 h
        return _json(dashboard.timeline_view(cp, timeline, measured, window))

    async def sample_measured(app: web.Application) -> AsyncIterator[None]:
        """Background: the agents' measured utilisation every MEASURE_EVERY_S, for the timeline."""
        async def loop() -> None:
            while True:
                measured.record(cp)
                await asyncio.sleep(dashboard.MEASURE_EVERY_S)
        task = asyncio.create_task(loop(), name="measured-utilisation")
        yield
        task.cancel()

    async def events(request: web.Request) -> web.StreamResponse:
        """The event log as server-sent events, from ``after`` (or ``Last-Event-ID``), then live."""
        given = request.headers.get("Last-Event-ID") or request.query.get("after")
        seq = _number({"after": given}, "after", int, 0) if given else max(0, len(cp.core.log) - RECENT_EVENTS)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store",
                                               "X-Accel-Buffering": "no"})
        await response.prepare(request)
        quiet_since = time.monotonic()
        try:
            while not closing.is_set():
                batch = cp.core.log.since(seq)
                if batch:
                    seq = batch[-1].seq
                    await response.write("".join(f"id: {e.seq}\ndata: {json.dumps(dashboard.event_json(e))}\n\n"
                                                 for e in batch).encode())
                    quiet_since = time.monotonic()
                elif time.monotonic() - quiet_since > SSE_KEEPALIVE_S:
                    await response.write(b": keepalive\n\n")
                    quiet_since = time.monotonic()
                await cp.wait_events(seq, SSE_POLL_S)
        except ConnectionError:
            pass  # the browser went away
        return response

    async def shutdown(_: web.Application) -> None:
        closing.set()

    app.on_shutdown.append(shutdown)
    app.cleanup_ctx.append(sample_measured)
    routes = app.router
    routes.add_get("/healthz", healthz)
    routes.add_get("/metrics", prometheus)
    routes.add_get("/", page("index.html"))
    routes.add_get("/dashboard", page("index.html"))
    routes.add_get("/static/dashboard.js", page("dashboard.js"))
    routes.add_get("/static/dashboard.css", page("dashboard.css"))
    routes.add_get("/api/cluster", cluster)
    routes.add_get("/api/jobs", jobs)
    routes.add_get("/api/jobs/{job_id}", job)
    routes.add_get("/api/queue", queue)
    routes.add_get("/api/utilization", utilisation)
    routes.add_get("/api/events", events)
    return app


async def start_http(app: web.Application, listen: str) -> tuple[web.AppRunner, int]:
    """Serve ``app`` on HOST:PORT (port 0: any free one); returns the runner and the port bound."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
    await runner.setup()
    host, port = listen.rsplit(":", 1)
    await web.TCPSite(runner, host, int(port)).start()
    return runner, runner.addresses[0][1]


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Bad input -> 400 naming the parameter, unknown ids -> 404; as JSON, never a stack trace."""
    try:
        return await handler(request)
    except ValidationError as exc:
        return web.json_response({"error": str(exc)}, status=400)
    except NotFound as exc:
        return web.json_response({"error": str(exc)}, status=404)


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
