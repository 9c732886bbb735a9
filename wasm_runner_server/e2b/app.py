"""The E2B-compatible API as an aiohttp sub-application (mounted by the service's `create_app`)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web

from wasm_runner_server.e2b import control, envd, filesystem, interpreter
from wasm_runner_server.e2b.settings import E2bSettings
from wasm_runner_server.e2b.upstream import CLIENT, SETTINGS


async def _client(app: web.Application) -> AsyncIterator[None]:
    # No total timeout: commands and executions are bounded by the API's own limits, and a stream
    # follows a process for as long as the SDK keeps it open. No cookie jar: the session is shared by
    # every caller, and nothing one answer sets may ride along on another caller's call. No cap on
    # connections: each is held for one incoming request (two while a command is followed), so a
    # cap would make followed commands starve every other call.
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, connect=30), auto_decompress=False,
                                    cookie_jar=aiohttp.DummyCookieJar(), connector=aiohttp.TCPConnector(limit=0))
    app[CLIENT] = session
    yield
    await session.close()


async def _not_supported(request: web.Request) -> web.Response:
    """E2B calls this gateway does not answer (pause, fork, snapshots, metrics, ...): a 501 that says so,
    not a 404 the SDK would read as "sandbox not found"."""
    return control.api_error(501, f"{request.method} {request.rel_url.path} is not supported by this server: "
                                  "see the E2B guide's parity table")


def e2b_app(settings: E2bSettings, max_body_bytes: int = 1024**2) -> web.Application:
    """`max_body_bytes` bounds the JSON bodies read whole (a run's code); files stream through."""
    app = web.Application(client_max_size=max_body_bytes)
    app[SETTINGS] = settings
    for table in (control.routes, envd.routes, filesystem.routes, interpreter.routes):
        app.add_routes(table)
    app.router.add_route("*", "/{rest:.*}", _not_supported)  # last: only what nothing above answers
    app.cleanup_ctx.append(_client)
    return app
