"""Calls the process, terminal and preview-port tests make on a server with keys (the `secure` fixture)."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from host_processes import host_processes_with
from server_helpers import eventually
from yarl import URL

from wasm_runner.providers.native.bwrap import find_bwrap, probe

_path = find_bwrap()
SANDBOX_PROBLEM = "bubblewrap is not installed (run scripts/install-native.sh)" if _path is None else probe(_path)
NATIVE_ROOT_SERVICE = [
    pytest.mark.skipif(SANDBOX_PROBLEM is not None, reason=f"no usable sandbox: {SANDBOX_PROBLEM}"),
    pytest.mark.skipif(os.geteuid() != 0, reason="preview ports enter the sandbox's network namespace (root service)"),
]
"""Marks of a test whose server runs processes natively and reaches their ports."""

DEVSERVER = (Path(__file__).parent / "sandbox_devserver.py").read_text()
SECTIONS: dict[str, Any] = {"workers": {"kernel_workers": 0},
                            "processes": {"max_live": 3, "stop_grace_s": 0.5, "pty_grace_s": 0.2}}
"""A server for these tests: guests in the service's process, a cap of 3, short grace periods."""


async def until_gone(marker: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while host_processes_with(marker) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert host_processes_with(marker) == []


async def new_session(secure, key: str = "a_member", **fields: Any) -> str:
    status, data, _ = await secure.call("POST", "/v1/sessions", key, json=fields)
    assert status == 201, data
    return data["id"]


async def start(secure, sid: str, key: str = "a_member", **body: Any) -> dict:
    status, data, _ = await secure.call("POST", f"/v1/sessions/{sid}/processes", key, json=body)
    assert status == 201, data
    return data


async def listening(secure, sid: str, pid: str, port: int, key: str = "a_member") -> None:
    async def check() -> bool:
        _, info, _ = await secure.call("GET", f"/v1/sessions/{sid}/processes/{pid}", key)
        assert info["state"] in ("starting", "running"), info
        return port in info.get("ports", [])

    await eventually(check, timeout=10, interval=0.02)


async def devserver(secure, sid: str, port: int) -> str:
    """Start helpers/sandbox_devserver.py in the session on `port`; its process id once it listens."""
    status, _, _ = await secure.call("PUT", f"/v1/sessions/{sid}/files/devserver.py", "a_member", data=DEVSERVER)
    assert status in (200, 201)
    info = await start(secure, sid, command=["python3", "devserver.py", str(port)], name="dev")
    await listening(secure, sid, info["id"], port)
    return info["id"]


@dataclass(frozen=True)
class Preview:
    """A preview link, and how a test reaches it: Python does not resolve `*.localhost` as browsers
    do, so requests go to the listener's address with the link's Host header."""

    url: str
    host: str
    base: str

    def headers(self, **extra: str) -> dict[str, str]:
        return {"Host": self.host, **extra}


async def preview_of(secure, sid: str, port: int, key: str = "a_member", base: str | None = None) -> Preview:
    """A preview link to the session's port (`base`: where to connect, by default the link's port on 127.0.0.1)."""
    status, link, _ = await secure.call("POST", f"/v1/sessions/{sid}/ports/{port}:presign", key, json={})
    assert status == 200, link
    url = URL(link["url"])
    assert url.host is not None
    host = url.host if url.is_default_port() else f"{url.host}:{url.port}"
    return Preview(link["url"], host, base or f"http://127.0.0.1:{url.port}")
