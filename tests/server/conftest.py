"""Real servers on 127.0.0.1 for the HTTP tests, one data directory per test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer
from server_helpers import make_config

from wasm_runner_server.app import create_app

Start = Callable[..., Awaitable[TestClient]]


@pytest_asyncio.fixture
async def serve(tmp_path: Path) -> AsyncIterator[Start]:
    """`await serve(**config_sections)` starts a server (default data dir shared by the test)."""
    clients: list[TestClient] = []

    async def start(data_dir: Path | None = None, **sections: Any) -> TestClient:
        config = make_config(data_dir or tmp_path / "data", **sections)
        client = TestClient(TestServer(create_app(config), host="127.0.0.1", port=0))
        await client.start_server()
        clients.append(client)
        return client

    yield start
    for client in clients:
        await client.close()


@pytest_asyncio.fixture
async def client(serve: Start) -> TestClient:
    return await serve()
