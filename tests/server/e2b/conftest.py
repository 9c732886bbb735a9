"""The service with the E2B API on, on 127.0.0.1 in a thread of its own (the E2B SDKs block), with keys
of two workspaces; the SDKs pointed at it through their environment variables."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from server_helpers import make_config
from thread_server import ThreadServer

from wasm_runner_server.app import create_app
from wasm_runner_server.security.tenants import TenantStore


@dataclass
class E2bService:
    url: str
    keys: dict[str, str]
    """alpha (an owner's), alpha_2 (two keys of workspace alpha), beta (workspace beta)."""

    @property
    def api_url(self) -> str:
        return self.url + "/e2b"

    @property
    def sandbox_url(self) -> str:
        return self.url + "/e2b/sandbox"


@pytest.fixture
def start_e2b(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., E2bService]]:
    """`start_e2b(**config_sections)` starts the service (auth on, E2B API on) and points the SDKs at it."""
    servers: list[ThreadServer] = []

    def start(**sections: Any) -> E2bService:
        data_dir = tmp_path / f"data{len(servers)}"
        store = TenantStore.in_data_dir(data_dir)
        keys = {name: store.create_key(workspace, name, "member", member)[0]
                for name, workspace, member in (("alpha", "alpha", "olga"), ("alpha_2", "alpha", None),
                                                ("beta", "beta", None))}
        store.roles.set_member("alpha", "olga", "owner")  # alpha's key reads the whole workspace's audit log
        store.close()
        auth = {"enabled": True, **sections.pop("auth", {})}
        e2b = {"enabled": True, **sections.pop("e2b", {})}
        config = make_config(data_dir, auth=auth, e2b=e2b, **sections)
        server = ThreadServer(create_app(config)).start()
        servers.append(server)
        service = E2bService(server.url, keys)
        # What a user of the SDKs sets: the API and one URL for every sandbox, the key, and HTTP/1.1
        # (the SDKs default to HTTP/2; aiohttp speaks HTTP/1.1).
        monkeypatch.setenv("E2B_API_URL", service.api_url)
        monkeypatch.setenv("E2B_SANDBOX_URL", service.sandbox_url)
        monkeypatch.setenv("E2B_API_KEY", keys["alpha"])
        monkeypatch.setenv("E2B_HTTP_VERSION", "1.1")
        monkeypatch.delenv("E2B_DOMAIN", raising=False)
        monkeypatch.delenv("E2B_DEBUG", raising=False)
        return service

    try:
        yield start
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
def e2b_service(start_e2b: Callable[..., E2bService]) -> E2bService:
    return start_e2b()
