"""Serving previews on their own origins, and keeping them off the API's.

Two modes (http/preview_origins.py names the hosts):
- no preview domain: a listener of its own (`preview_listener`, a cleanup context of the app) on
  the API's bind address serves every request by its Host, and each of its answers carries
  `Content-Security-Policy: sandbox …`, so every preview page runs in an opaque origin: it
  can neither register a service worker nor set or read cookies of `localhost`, the host name
  it shares with the API.
- a preview domain: the API's own listener answers a Host under that domain with the preview
  only (`preview_host_middleware`, before any API route or key check).

Either way the API's origin refuses service worker scripts (`refuse_service_worker`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from aiohttp import web

from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_server.config import ServiceConfig
from wasm_runner_server.errors import ApiError, error_middleware
from wasm_runner_server.http.forwarding import FORWARDED_BY, forward, holder_elsewhere
from wasm_runner_server.http.policy import CURRENT, POLICY, Handler, Principal
from wasm_runner_server.http.preview_origins import PREVIEWS, PreviewOrigins
from wasm_runner_server.http.routes.ports import proxy
from wasm_runner_server.sessions.service import CONFIG, SERVICE

log = logging.getLogger("wasm_runner.server")

PREVIEW_REQUEST = web.RequestKey("preview_request", bool)
"""Set on a request the API's listener answered with a preview (metrics and logs name no API route for it)."""
SANDBOX_CSP = "sandbox allow-scripts allow-forms allow-popups allow-modals"
"""What every answer of the preview listener carries: the page runs in an opaque origin of its own."""


async def serve_preview(request: web.Request, app: web.Application) -> web.StreamResponse:
    """Answer `request` with the preview its Host names (`app`: the service's application)."""
    origins = app[PREVIEWS]
    _, grant = await origins.find(request.host)
    where = await holder_elsewhere(request, app, grant.session_id)
    if where is not None:  # its node serves it, and checks the link as for a request it received itself
        return await forward(request, app, where, grant.session_id)
    app[POLICY].admit_link(grant.key_id)
    service = app[SERVICE]
    if service.sessions.placement is not None:  # a session no node holds wakes here
        await service.sessions.placement.adopt(grant.session_id)
    live = service.sessions.get(grant.session_id)
    if live.row.created_at != grant.created_at:  # deleted since, and made again under its id
        raise ApiError(404, ErrorCode.PREVIEW_NOT_FOUND, "the session this preview was given for has been deleted",
                       "ask the API for a new link: POST /v1/sessions/{id}/ports/{port}:presign")
    token = CURRENT.set(Principal(grant.workspace, f"link:{grant.key_id}", "link"))
    try:
        return await proxy(request, live, grant.port, sandboxed=origins.sandboxed)
    finally:
        CURRENT.reset(token)


def preview_host_middleware(origins: PreviewOrigins):
    """With a preview domain: a request naming it is answered by the preview, never by the API. Without
    one, a request another node's preview listener forwarded here is answered by the preview too."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if origins.is_preview_host(request.host) or (FORWARDED_BY in request.headers
                                                     and origins.is_listener_host(request.host)):
            request[PREVIEW_REQUEST] = True
            return await serve_preview(request, request.app)
        return await handler(request)

    return middleware


@web.middleware
async def refuse_service_worker(request: web.Request, handler: Handler) -> web.StreamResponse:
    """No service worker ever controls the API's (and the console's) origin: its script is refused."""
    if request.headers.get("Service-Worker", "").strip().lower() == "script":
        raise ApiError(403, ErrorCode.SERVICE_WORKER_REFUSED, "this origin serves no service worker scripts: "
                       "the API and the console must never be controlled by one",
                       "serve service workers from a preview (its own origin), not from the API's")
    return await handler(request)


async def _sandbox(request: web.Request, response: web.StreamResponse) -> None:
    response.headers.add("Content-Security-Policy", SANDBOX_CSP)  # besides the page's own policy, if any


def listener_port(config: ServiceConfig) -> int:
    """The preview listener's port: as configured, else beside the API's (any free one beside port 0)."""
    if config.previews.port is not None:
        return config.previews.port
    return config.server.port + 1 if 0 < config.server.port < 65535 else 0


async def preview_listener(app: web.Application) -> AsyncIterator[None]:
    """A cleanup context: without a preview domain, the preview listener runs as long as the app."""
    origins = app[PREVIEWS]
    if not origins.sandboxed:
        yield
        return
    config = app[CONFIG]
    previews = web.Application(client_max_size=config.server.max_body_bytes, middlewares=[error_middleware])
    previews[SERVICE] = app[SERVICE]
    previews[CONFIG] = config

    async def handle(request: web.Request) -> web.StreamResponse:
        return await serve_preview(request, app)

    previews.router.add_route("*", "/{path:.*}", handle)
    previews.on_response_prepare.append(_sandbox)
    runner = web.AppRunner(previews, access_log=None, handler_cancellation=True,
                           shutdown_timeout=min(config.server.shutdown_timeout_s, 5.0))
    await runner.setup()
    port = listener_port(config)
    try:
        await web.TCPSite(runner, config.server.host, port).start()
    except OSError as exc:
        await runner.cleanup()
        raise RuntimeError(f"the preview listener cannot listen on {config.server.host}:{port} ({exc}); "
                           "set [previews] port (0: any free port) or a preview domain") from exc
    origins.listener_port = runner.addresses[0][1]
    log.info("previews listening", extra={"event": "previews_listening", "host": config.server.host,
                                          "port": origins.listener_port})
    try:
        yield
    finally:
        origins.listener_port = None
        await runner.cleanup()
