"""MCP clients (the official SDK's `mcp.ClientSession`) connected over both transports.

- http: the service on 127.0.0.1 (a real aiohttp server), MCP at /mcp, streamable HTTP;
- stdio: `python -m wasm_runner_server.mcp.stdio` as a subprocess, as an agent would start `wasm-runner mcp`.

Sessions are opened with `async with connect(...)` inside each test, so the SDK's task
groups are entered and left in the same task.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from mcp_connect import Connect, HttpService, connect_http, connect_stdio, start_http_service

REPO = Path(__file__).resolve().parents[3]
TRANSPORTS = ("stdio", "http")


@pytest_asyncio.fixture
async def http_service(tmp_path: Path) -> AsyncIterator[HttpService]:
    service = await start_http_service(tmp_path / "http-data")
    try:
        yield service
    finally:
        await service.server.close()




@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def connect(transport: str, tmp_path: Path, http_service: HttpService) -> Connect:
    """`async with connect() as session:` an initialized MCP session over the test's transport."""
    if transport == "http":
        return lambda: connect_http(http_service)
    data_dir = tmp_path / "stdio-data"
    data_dir.mkdir(exist_ok=True)
    return lambda: connect_stdio(data_dir)

