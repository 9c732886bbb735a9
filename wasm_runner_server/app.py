"""The application factory: routes, middlewares, and the service opened and closed with the app.

    app = create_app(load_config("wasm-runner.toml"))          # or create_app(config, OpenAccess())
    runner = ServiceRunner(app, handler_cancellation=True)   # http.service_runner; or cli.serve

The application is complete when `create_app` returns: its access policy (by default the
`SecurityPolicy` of `config.auth`) gives a middleware, routes, a cleanup context, the
sessions' extra mounts and the execution observer, all passed in at construction.

Previews are served on origins of their own (http/preview_server.py): a listener of their
own started with the app, or, with `[previews] domain`, the Host names under that domain, which
this app answers with the preview only. The API's origin refuses service worker scripts.

Start-up opens the session store, restores sessions and warms the Python runtime
(readiness waits for it). Shutdown stops admitting executions, gives running ones
`server.shutdown_timeout_s` to finish before cancelling them, then writes pending
session metadata and closes the runners and the store.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from collections.abc import AsyncIterator

from aiohttp import web

from wasm_runner_server.cluster.middleware import placement_middleware
from wasm_runner_server.config import ServiceConfig
from wasm_runner_server.console import routes as console
from wasm_runner_server.e2b.app import e2b_app
from wasm_runner_server.errors import error_middleware
from wasm_runner_server.http.forwarding import forwarding_context, forwarding_middleware
from wasm_runner_server.http.paths import (
    ARTIFACT_LINK_PREFIX,
    LINK_PREFIX,
    PREVIEW_LINK_PREFIX,
    PTY_LINK_PREFIX,
    SESSION_SCOPED,
)
from wasm_runner_server.http.policy import POLICY, AccessPolicy
from wasm_runner_server.http.preview_origins import PREVIEWS, PreviewOrigins
from wasm_runner_server.http.preview_server import (
    PREVIEW_REQUEST,
    preview_host_middleware,
    preview_listener,
    refuse_service_worker,
)
from wasm_runner_server.http.routes import batch as routes_batch
from wasm_runner_server.http.routes import copies as routes_copies
from wasm_runner_server.http.routes import exec as routes_exec
from wasm_runner_server.http.routes import files as routes_files
from wasm_runner_server.http.routes import history as routes_history
from wasm_runner_server.http.routes import meta as routes_meta
from wasm_runner_server.http.routes import packages as routes_packages
from wasm_runner_server.http.routes import ports as routes_ports
from wasm_runner_server.http.routes import processes as routes_processes
from wasm_runner_server.http.routes import pty as routes_pty
from wasm_runner_server.http.routes import sessions as routes_sessions
from wasm_runner_server.security import stores
from wasm_runner_server.security.policy import SecurityPolicy
from wasm_runner_server.sessions.service import CONFIG, SERVICE, Service

log = logging.getLogger("wasm_runner.server")
access = logging.getLogger("wasm_runner.server.access")

_REQUEST_PREFIX = os.urandom(4).hex()
_request_numbers = itertools.count(1)
"""Request ids: unique per process start (a random prefix) and cheap (a counter, no system call)."""


@web.middleware
async def observe_middleware(request: web.Request, handler) -> web.StreamResponse:
    """Per request: an id, latency and status metrics, and one structured access-log line."""
    started = time.perf_counter()
    request_id = request.headers.get("X-Request-Id") or f"{_REQUEST_PREFIX}{next(_request_numbers):08x}"
    status = 500
    try:
        response = await handler(request)
        status = response.status
        if not response.prepared:
            response.headers["X-Request-Id"] = request_id
        return response
    except asyncio.CancelledError:
        status = 499  # the client went away
        raise
    except web.HTTPException as exc:
        status = exc.status
        raise
    finally:
        elapsed = time.perf_counter() - started
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else "unmatched"
        if request.get(PREVIEW_REQUEST):
            route = "preview"  # a guest's path on a preview host, whatever API route it resembles
        service = request.app.get(SERVICE)
        if service is not None:
            service.metrics.http_requests.inc(request.method, route, str(status))
            service.metrics.http_seconds.observe(elapsed, request.method, route)
        if access.isEnabledFor(logging.INFO):
            path = request.path
            for prefix in (LINK_PREFIX, ARTIFACT_LINK_PREFIX, PREVIEW_LINK_PREFIX, PTY_LINK_PREFIX):
                if path.startswith(prefix):
                    path = prefix + "…"  # a link is a credential
            access.info("request", extra={"event": "request", "method": request.method, "path": path,
                                          "route": route, "status": status, "ms": round(elapsed * 1000, 3),
                                          "request_id": request_id})


async def service_context(app: web.Application) -> AsyncIterator[None]:
    policy = app[POLICY]
    service = await Service.open(app[CONFIG], mounts_for=policy.session_mounts, observers=[policy.on_execution],
                                 process_observers=[policy.on_process], share_of=policy.execution_share,
                                 quota_of=policy.workspace_quota, disk_changed=policy.disk_changed,
                                 owner_for=policy.session_owner, disk_for=policy.session_disk)
    app[SERVICE] = service
    log.info("started", extra={"event": "started", "data_dir": str(app[CONFIG].server.data_dir),
                               "concurrency": app[CONFIG].server.concurrency})
    yield
    await service.close()


async def _on_shutdown(app: web.Application) -> None:
    service = app.get(SERVICE)
    if service is not None:
        await service.shutdown()


def create_app(config: ServiceConfig | None = None, policy: AccessPolicy | None = None) -> web.Application:
    """The service's application; `policy` decides who may do what (default: `SecurityPolicy(config)`)."""
    config = config or ServiceConfig()
    policy = policy if policy is not None else SecurityPolicy(config)
    previews = PreviewOrigins(config.previews)
    app = web.Application(client_max_size=config.server.max_body_bytes,
                          middlewares=[observe_middleware, error_middleware, preview_host_middleware(previews),
                                       refuse_service_worker, forwarding_middleware, policy.middleware,
                                       placement_middleware(SESSION_SCOPED)])
    app[CONFIG] = config
    app[POLICY] = policy
    app[PREVIEWS] = previews
    for table in (routes_meta.routes, routes_sessions.routes, routes_copies.routes, routes_exec.routes, routes_files.routes,
                  routes_history.routes, routes_batch.routes, console.routes,
                  routes_packages.routes, routes_processes.routes, routes_ports.routes, routes_pty.routes):
        app.add_routes(table)
    app.on_response_prepare.append(console.add_security_headers)
    app.add_routes(policy.routes())
    app.cleanup_ctx.append(service_context)
    app.cleanup_ctx.append(forwarding_context)  # after the service's: its counter joins the service's metrics
    app.cleanup_ctx.append(policy.context)  # after the service's: it needs app[SERVICE]
    app.cleanup_ctx.append(_shared_previews)
    app.cleanup_ctx.append(preview_listener)  # the last: no preview is served once the service closes
    app.on_startup.append(routes_meta.build_openapi)
    app.on_shutdown.append(_on_shutdown)
    _mount_mcp(app)
    if config.e2b.enabled:
        app.add_subapp(config.e2b.prefix, e2b_app(config.e2b, config.server.max_body_bytes))
    return app


async def _shared_previews(app: web.Application) -> AsyncIterator[None]:
    """A cluster's preview addresses open through any node: grants are kept in the shared database too."""
    shared = await asyncio.to_thread(stores.preview_grants, app[CONFIG])
    app[PREVIEWS].shared = shared
    try:
        yield
    finally:
        if shared is not None:
            app[PREVIEWS].shared = None
            shared.close()


def _mount_mcp(app: web.Application) -> None:
    """MCP over streamable HTTP at /mcp (same service, same middlewares), when the `mcp` extra is installed."""
    try:
        from wasm_runner_server.mcp.streamable import mount_mcp
    except ImportError as exc:
        if exc.name is None or not (exc.name == "mcp" or exc.name.startswith(("mcp.", "mcp_types"))):
            raise
        log.info("MCP is not served: the mcp package is not installed", extra={"event": "mcp_unavailable"})
        return
    mount_mcp(app)
