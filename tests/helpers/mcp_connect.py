"""Connecting the official MCP client to wasm-runner over both transports:
streamable HTTP (a real service on 127.0.0.1, MCP at /mcp) and stdio (`python -m wasm_runner_server.mcp.stdio`)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx2
from aiohttp import web
from aiohttp.test_utils import TestServer
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from wasm_runner_server.app import create_app
from wasm_runner_server.config import ServiceConfig

REPO = Path(__file__).resolve().parents[2]


def make_config(data_dir: Path, **sections: Any) -> ServiceConfig:
    server = {"data_dir": str(data_dir), "prepare_on_start": False, "concurrency": 2, "shutdown_timeout_s": 5}
    server.update(sections.pop("server", {}))
    sections.setdefault("previews", {"port": 0})  # a free port: tests run side by side
    sections.setdefault("auth", {"enabled": False})  # API keys have their own tests (test_*_keys)
    sections.setdefault("auth", {"enabled": False})  # auth is on by default
    return ServiceConfig.model_validate({"server": server, "sessions": {"sweep_interval_s": 0.5}, **sections})


class HttpService:
    """The HTTP service on a free loopback port; `seen` records each request's (path, Authorization)."""

    def __init__(self, server: TestServer, seen: list[tuple[str, str | None]]) -> None:
        self.server = server
        self.seen = seen

    @property
    def mcp_url(self) -> str:
        return str(self.server.make_url("/mcp"))

    def url(self, path: str) -> str:
        return str(self.server.make_url(path))


async def start_http_service(data_dir: Path, **sections: Any) -> HttpService:
    seen: list[tuple[str, str | None]] = []

    @web.middleware
    async def record(request: web.Request, handler):
        seen.append((request.path, request.headers.get("Authorization")))
        return await handler(request)

    app = create_app(make_config(data_dir, **sections))
    app.middlewares.insert(0, record)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    return HttpService(server, seen)


@contextlib.asynccontextmanager
async def connect_http(service: HttpService, headers: dict[str, str] | None = None,
                       elicitation_callback: Any = None) -> AsyncIterator[ClientSession]:
    """`elicitation_callback`: given, the client declares the elicitation capability and answers with it."""
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=120.0)) as http:
        async with streamable_http_client(service.mcp_url, http_client=http) as (read, write):
            async with ClientSession(read, write, elicitation_callback=elicitation_callback) as session:
                await session.initialize()
                yield session


@contextlib.asynccontextmanager
async def connect_stdio(data_dir: Path, *args: str) -> AsyncIterator[ClientSession]:
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    for name in ("HOME", "XDG_CACHE_HOME", "WASM_RUNNER_CACHE", "PATH"):
        if name in os.environ:
            env[name] = os.environ[name]
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "wasm_runner_server.mcp.stdio", "--data-dir", str(data_dir), "--no-warm", *args],
                                   env=env, cwd=str(REPO))
    with open(data_dir.parent / f"{data_dir.name}.stderr.log", "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


Connect = Callable[[], contextlib.AbstractAsyncContextManager[ClientSession]]
