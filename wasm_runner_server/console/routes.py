"""Serving the console: its page and assets from the package, with a Content-Security-Policy on
every response under /console (errors included).

The page's policy allows only its own scripts (no inline script, no eval), talks only to its own
origin and cannot be framed. Guest-written content never runs as the console: it is rendered as
text, in <img>, in an iframe sandboxed without scripts, or parsed in `sheet-frame.html`, which is
served with a `sandbox allow-scripts` policy that gives it an opaque origin (no key, no storage,
no access to the page).
"""

from __future__ import annotations

import hashlib
import mimetypes
from importlib import resources

from aiohttp import web

from wasm_runner_server.http.paths import CONSOLE_PREFIX
from wasm_runner_server.http.preview_server import PREVIEW_REQUEST

routes = web.RouteTableDef()

CONSOLE_CSP = ("default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' blob: data:; "
               "connect-src 'self'; worker-src 'self'; frame-src 'self'; font-src 'self' data:; "
               "base-uri 'none'; form-action 'none'; frame-ancestors 'none'; object-src 'none'")
PARSER_FRAME_CSP = ("sandbox allow-scripts; default-src 'none'; script-src 'self'; base-uri 'none'; "
                    "form-action 'none'; frame-ancestors 'self'")
PARSER_FRAMES = frozenset({"sheet-frame.html"})
"""Pages that parse guest bytes: sandboxed to an opaque origin by their own header."""
_TYPES = {".js": "text/javascript", ".mjs": "text/javascript", ".css": "text/css", ".html": "text/html"}


def _load(folder: str) -> dict[str, tuple[bytes, str, str]]:
    """name -> (bytes, content type, ETag) of every file in the package folder (read once)."""
    found = {}
    for entry in resources.files(__package__).joinpath(folder).iterdir():
        if not entry.is_file() or entry.name.startswith("."):
            continue
        data = entry.read_bytes()
        suffix = entry.name[entry.name.rfind("."):]
        content_type = _TYPES.get(suffix) or mimetypes.guess_type(entry.name)[0] or "application/octet-stream"
        found[entry.name] = (data, content_type, '"' + hashlib.sha256(data).hexdigest()[:32] + '"')
    return found


_FILES = {"static": _load("static"), "vendor": _load("vendor")}


def _asset(request: web.Request, folder: str, name: str) -> web.Response:
    found = _FILES[folder].get(name)
    if found is None or name == "vendor.lock":
        raise web.HTTPNotFound(text="no such console file")
    data, content_type, etag = found
    headers = {"ETag": etag, "Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}
    if request.headers.get("If-None-Match") == etag:
        return web.Response(status=304, headers=headers)
    charset = "utf-8" if content_type.startswith("text/") else None
    response = web.Response(body=data, content_type=content_type, charset=charset, headers=headers)
    if folder == "static" and name in PARSER_FRAMES:
        response.headers["Content-Security-Policy"] = PARSER_FRAME_CSP
    return response


@routes.get(CONSOLE_PREFIX)
async def console_root(request: web.Request) -> web.Response:
    raise web.HTTPFound(CONSOLE_PREFIX + "/")


@routes.get(CONSOLE_PREFIX + "/")
async def console_page(request: web.Request) -> web.Response:
    return _asset(request, "static", "index.html")


@routes.get(CONSOLE_PREFIX + "/static/{name}")
async def console_static(request: web.Request) -> web.Response:
    return _asset(request, "static", request.match_info["name"])


@routes.get(CONSOLE_PREFIX + "/vendor/{name}")
async def console_vendor(request: web.Request) -> web.Response:
    return _asset(request, "vendor", request.match_info["name"])


async def add_security_headers(request: web.Request, response: web.StreamResponse) -> None:
    """Every response under /console carries the console's policy (unless it has a stricter one of its own);
    a preview's page at such a path is the session's, not the console's."""
    if (request.path != CONSOLE_PREFIX and not request.path.startswith(CONSOLE_PREFIX + "/")) or request.get(
            PREVIEW_REQUEST):
        return
    response.headers.setdefault("Content-Security-Policy", CONSOLE_CSP)
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Referrer-Policy", "no-referrer")
    response.headers.setdefault("X-Frame-Options", "DENY" if "sandbox" not in response.headers["Content-Security-Policy"]
                                else "SAMEORIGIN")
    response.headers.setdefault("Cross-Origin-Opener-Policy", "same-origin")
