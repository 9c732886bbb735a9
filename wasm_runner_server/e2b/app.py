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


def e2b_app(settings: E2bSettings, max_body_bytes: int = 1024**2) -> web.Application:
    """`max_body_bytes` bounds the JSON bodies read whole (a run's code); files stream through."""
    app = web.Application(client_max_size=max_body_bytes)
    app[SETTINGS] = settings
    for table in (control.routes, envd.routes, filesystem.routes, interpreter.routes):
        app.add_routes(table)
    app.cleanup_ctx.append(_client)
    return app
