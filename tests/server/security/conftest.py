"""Servers with authentication on, on 127.0.0.1, with keys made the way the admin CLI makes them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer
from server_helpers import link_path, make_config

from wasm_runner_server.app import create_app
from wasm_runner_server.security.tenants import TenantStore


@dataclass
class Secure:
    client: TestClient
    data_dir: Path
    keys: dict[str, str] = field(default_factory=dict)
    """name -> key: a_member, a_app, b_member, c_member, admin."""

    def auth(self, name: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[name]}"}

    async def call(self, method: str, path: str, key: str | None = None, **kwargs: Any) -> tuple[int, Any, dict]:
        headers = dict(kwargs.pop("headers", {}))
        if key is not None:
            headers.update(self.auth(key))
        async with self.client.request(method, link_path(path), headers=headers, **kwargs) as response:
            text = await response.text()
            try:
                import json

                data = json.loads(text) if text else None
            except ValueError:
                data = text
            return response.status, data, dict(response.headers)


def make_keys(data_dir: Path) -> dict[str, str]:
    store = TenantStore.in_data_dir(data_dir)
    keys = {}
    for name, workspace, kind in [("a_member", "alpha", "member"), ("a_app", "alpha", "app"),
                                  ("b_member", "beta", "member"), ("c_member", "gamma", "member"),
                                  ("admin", "ops", "admin")]:
        keys[name], _ = store.create_key(workspace, name, kind)
    store.close()
    return keys


@pytest_asyncio.fixture
async def start_secure(tmp_path: Path) -> AsyncIterator:
    clients: list[TestClient] = []

    async def start(data_dir: Path | None = None, keys: dict[str, str] | None = None, **sections: Any) -> Secure:
        data_dir = data_dir or tmp_path / "data"
        auth = {"enabled": True, **sections.pop("auth", {})}
        if keys is None:
            keys = make_keys(data_dir)
        config = make_config(data_dir, auth=auth, **sections)
        client = TestClient(TestServer(create_app(config), host="127.0.0.1", port=0))
        await client.start_server()
        clients.append(client)
        return Secure(client, data_dir, keys)

    yield start
    for client in clients:
        await client.close()


@pytest_asyncio.fixture
async def secure(start_secure) -> Secure:
    return await start_secure()
