"""The absolute address of the links the service hands out.

A link is built on `[server] public_url` when the operator set it; else on the request's own
scheme and host (what the caller used to reach the service), or, with `[server] trust_forwarded`,
on the `X-Forwarded-Proto`/`X-Forwarded-Host` a proxy in front set. A forwarded value that is not
a plain scheme or host is ignored (the request's own is used), so no header can put a path, user
or script into a link."""

from __future__ import annotations

import re

from aiohttp import web

from wasm_runner_server.sessions.service import CONFIG

_HOST = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
                   r"|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")
"""A host name, IPv4 or bracketed IPv6 address, with an optional port: nothing else."""


def public_base(request: web.Request) -> str:
    """Where this service is reached, as the caller (or the operator) knows it: no trailing slash."""
    server = request.app[CONFIG].server
    if server.public_url is not None:
        return server.public_url
    scheme, host = request.scheme, request.host
    if server.trust_forwarded:
        proto = request.headers.get("X-Forwarded-Proto", "").split(",")[0].strip().lower()
        forwarded = request.headers.get("X-Forwarded-Host", "").split(",")[0].strip()
        scheme = proto if proto in ("http", "https") else scheme
        host = forwarded if _HOST.fullmatch(forwarded) else host
    if not _HOST.fullmatch(host):
        host = "localhost"  # a Host header that is no host (the link still names this service's path)
    return f"{scheme}://{host}"


def absolute(request: web.Request, path: str) -> str:
    """The absolute URL of `path` (a root-relative path on this service) for the caller."""
    return public_base(request) + path


def absolute_websocket(request: web.Request, path: str) -> str:
    """The absolute ws(s):// URL of `path` (a WebSocket route of this service)."""
    base = public_base(request)
    return ("wss" + base[5:] if base.startswith("https") else "ws" + base[4:]) + path
