"""The service's own API, called with the E2B caller's key.

The gateway holds no authority of its own: every call carries the caller's key as
`Authorization: Bearer`, so the API's middleware authenticates it, applies the key's rate limit,
the workspace's quotas and ownership of sessions, and audits it, as for any other client.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote

import aiohttp
from aiohttp import web

from wasm_runner_server.e2b.settings import E2bSettings

CLIENT = web.AppKey("e2b_upstream_client", aiohttp.ClientSession)
SETTINGS = web.AppKey("e2b_settings", E2bSettings)
GATEWAY = SETTINGS
"""Present on the gateway's sub-application only: how the service's access policy knows its routes."""
MAX_EVENT_BYTES = 64 * 1024 * 1024
"""The largest server-sent event read (an execution's result carries its figures)."""


class UpstreamError(Exception):
    """An error answer of the API: its status, error code and message (with the API's hint)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


async def error_of(response: aiohttp.ClientResponse) -> UpstreamError:
    text = await response.text()
    code, message = "error", text or response.reason or f"HTTP {response.status}"
    try:
        error = json.loads(text)["error"]
        code = str(error.get("code") or code)
        message = str(error.get("message") or message)
        if error.get("hint"):
            message = f"{message} ({error['hint']})"
    except (ValueError, KeyError, TypeError):
        pass
    return UpstreamError(response.status, code, message)


def _base_url(request: web.Request, settings: E2bSettings) -> str:
    """The API as the gateway reaches it: configured, or the listening address the request came in on."""
    if settings.upstream:
        return settings.upstream.rstrip("/")
    sockname = request.transport.get_extra_info("sockname") if request.transport is not None else None
    if not isinstance(sockname, tuple) or len(sockname) < 2:
        raise UpstreamError(500, "e2b_upstream", "the E2B API cannot tell the service's address on this "
                            "listener: set [e2b] upstream to the service's URL")
    host, port = sockname[0], sockname[1]
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class Upstream:
    """Calls to the API for one E2B request, as its caller."""

    def __init__(self, request: web.Request, key: str | None) -> None:
        app = request.config_dict
        self.client = app[CLIENT]
        self.base = _base_url(request, app[SETTINGS])
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}
        request_id = request.headers.get("X-Request-Id")
        if request_id:
            self.headers["X-Request-Id"] = request_id

    def url(self, path: str) -> str:
        return self.base + path

    async def call(self, method: str, path: str, *, json_body: Any = None, params: dict[str, str] | None = None,
                   data: Any = None, headers: dict[str, str] | None = None) -> Any:
        """The JSON answer of a call (None for an empty one); an error answer raises UpstreamError."""
        async with self.client.request(method, self.url(path), json=json_body, params=params, data=data,
                                       headers={**self.headers, **(headers or {})}) as response:
            if response.status >= 400:
                raise await error_of(response)
            text = await response.text()
            return json.loads(text) if text else None

    @asynccontextmanager
    async def stream(self, method: str, path: str, *, json_body: Any = None, params: dict[str, str] | None = None,
                     headers: dict[str, str] | None = None) -> AsyncIterator[aiohttp.ClientResponse]:
        """The open response of a call whose body is read as it comes; an error answer raises UpstreamError."""
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        async with self.client.request(method, self.url(path), json=json_body, params=params, timeout=timeout,
                                       headers={**self.headers, **(headers or {})}) as response:
            if response.status >= 400:
                raise await error_of(response)
            yield response


def session_path(sandbox_id: str, *rest: str) -> str:
    """/v1/sessions/<id>/..., each part percent-encoded (an id is the caller's string)."""
    parts = [quote(sandbox_id, safe=""), *rest]
    return "/v1/sessions/" + "/".join(parts)


def file_path(sandbox_id: str, relative: str) -> str:
    return session_path(sandbox_id, "files", quote(relative, safe="/"))


async def events(response: aiohttp.ClientResponse) -> AsyncIterator[tuple[str, str]]:
    """(event, data) of a server-sent event stream, comments skipped."""
    name, data = "message", list[str]()
    while True:
        raw = await response.content.readuntil(b"\n", max_size=MAX_EVENT_BYTES)
        if not raw:
            return
        line = raw.decode("utf-8").rstrip("\r\n")
        if not line:
            if data:
                yield name, "\n".join(data)
            name, data = "message", []
        elif line.startswith(":"):
            continue
        else:
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
