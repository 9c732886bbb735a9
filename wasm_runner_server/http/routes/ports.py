"""Preview ports: HTTP and WebSocket requests proxied to a server listening inside a session's sandbox.

    ANY {preview origin}/{path}                     the preview itself (http/preview_server.py)
    ANY /v1/sessions/{id}/ports/{port}/{path}      on the API: a redirect to the preview's origin

A preview is never served on the API's origin (http/preview_origins.py says where it is). The
connection is made inside the sandbox's network namespace (wasm_runner.processes.netns), so the
server is reached on its own loopback, and nothing else of the sandbox is. Paths reach the server
unchanged (root-absolute URLs work), bodies stream both ways (chunked in, chunked or sized out),
connections to the sandbox are kept alive, and an `Upgrade: websocket` request becomes a
WebSocket relayed frame by frame (hot reload). No key of the caller reaches the sandbox, nor the
console's cookie, and nothing of the answer reaches past the preview's own host:
`Service-Worker-Allowed` is dropped, and so is a `Set-Cookie` with a Domain other than the preview's
host or naming the console's cookie.
"""

from __future__ import annotations

import logging
import re

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_server.errors import ApiError
from wasm_runner_server.http.openapi import operation
from wasm_runner_server.http.paths import CONSOLE_COOKIE, CONSOLE_OAUTH_COOKIE
from wasm_runner_server.http.policy import principal_of
from wasm_runner_server.http.preview_origins import PREVIEWS
from wasm_runner_server.http.relay import (
    HOP_BY_HOP,
    WEBSOCKET_HEADERS,
    bridge,
    is_websocket,
    requested_protocols,
    send_back,
)
from wasm_runner_server.sessions.manager import LiveSession
from wasm_runner_server.sessions.processes import not_listening
from wasm_runner_server.sessions.service import CONFIG, SERVICE

routes = web.RouteTableDef()
log = logging.getLogger("wasm_runner.server")

NOT_FORWARDED = HOP_BY_HOP | {"host", "content-length", "authorization"}
"""The caller's key never reaches the sandbox."""
NOT_RETURNED = frozenset({"service-worker-allowed"})
"""A preview's service worker never gets a scope wider than its script's directory."""
_CONSOLE_COOKIE = re.compile(rf"(^|;)\s*(?:{CONSOLE_COOKIE}|{CONSOLE_OAUTH_COOKIE})\s*=[^;]*")


def without_console_cookie(cookie: str) -> str:
    """The Cookie header without the console's session cookies (the rest is the guest app's own)."""
    return "; ".join(p.strip() for p in _CONSOLE_COOKIE.sub("", cookie).split(";") if p.strip())


def sets_console_cookie(set_cookie: str) -> bool:
    return set_cookie.split("=", 1)[0].strip().lower() in (CONSOLE_COOKIE, CONSOLE_OAUTH_COOKIE)
_API_PATH = re.compile(r"/v1/sessions/[^/]+/ports/[0-9]+(?P<rest>/.*)?")


def check_port(text: str) -> int:
    port = int(text)
    if not 1 <= port <= 65535:
        raise ApiError(422, ErrorCode.VALIDATION_ERROR, f"port must be in 1..65535 (got {port})")
    return port


@routes.route("*", r"/v1/sessions/{id}/ports/{port:\d+}/{path:.*}")
@operation(summary="Where the server listening on this port in the session's sandbox (a preview) is served: a "
                   "redirect to the preview's own origin, which serves it without a key", tag="processes",
           response=None, status=307, errors=(404, 422),
           description="307 to `{preview origin}/{path}` (same method, body and query): a preview never shares "
                       "the API's origin, so its pages cannot reach the API's or the console's credentials. "
                       "The address is a capability that lives as long as a preview link "
                       "(`POST /v1/sessions/{id}/ports/{port}:presign` asks for one with its own lifetime).")
async def port_with_key(request: web.Request) -> web.StreamResponse:
    return redirect_to_preview(request)


@routes.route("*", r"/v1/sessions/{id}/ports/{port:\d+}")
async def port_root(request: web.Request) -> web.StreamResponse:
    """The port's root without its slash: the preview's root."""
    return redirect_to_preview(request)


def redirect_to_preview(request: web.Request) -> web.StreamResponse:
    """307 to the same path on the preview's origin (never guest content on the API's origin)."""
    live = request.app[SERVICE].sessions.get(request.match_info["id"])  # another workspace's session: 404 first
    port = check_port(request.match_info["port"])
    principal = principal_of(request)
    label, _ = request.app[PREVIEWS].grant(principal.workspace, live.row.id, live.row.created_at, port,
                                           principal.key_id, request.app[CONFIG].auth.presign_get_default_s,
                                           reuse=True)
    path, mark, query = request.raw_path.partition("?")  # as sent: nothing decoded on the way
    matched = _API_PATH.fullmatch(path)
    rest = (matched["rest"] if matched is not None else None) or "/"
    raise web.HTTPTemporaryRedirect(request.app[PREVIEWS].origin(label) + rest + mark + query)


async def proxy(request: web.Request, live: LiveSession, port: int, *, sandboxed: bool) -> web.StreamResponse:
    """Send `request` (its path and query as they came) to `port` inside the session's sandbox and
    stream the answer back; `sandboxed`: the page gets an opaque origin (see preview_server)."""
    service = request.app[SERVICE]
    process = await service.processes.listener(live, port)
    service.sessions.touch(live)
    target = URL(f"http://127.0.0.1:{port}{request.raw_path}", encoded=True)
    headers = CIMultiDict((k, v) for k, v in request.headers.items() if k.lower() not in NOT_FORWARDED)
    cookies = [without_console_cookie(v) for v in headers.popall("Cookie", [])]
    if any(cookies):
        headers["Cookie"] = "; ".join(c for c in cookies if c)
    headers["Host"] = f"127.0.0.1:{port}"
    headers["X-Forwarded-Host"] = request.host
    headers["X-Forwarded-Proto"] = request.scheme
    if is_websocket(request):
        return await _websocket(request, service.processes.client(live, process), target, headers, live, port)
    body = request.content if request.body_exists else None
    for retry in (True, False):
        client = service.processes.client(live, process)
        upstream_cm = client.request(request.method, target, headers=headers, data=body, allow_redirects=False,
                                     compress=None)
        try:
            upstream = await upstream_cm.__aenter__()
            break
        except (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError, ConnectionError) as exc:
            if retry and _refused(exc):  # nothing was sent: look for the port's listener again
                process = await service.processes.listener(live, port, fresh=True)
                continue
            raise unreachable(live, port, exc) from None
    own_host = request.host.rsplit(":", 1)[0].lower()

    def keep(name: str, value: str) -> bool:
        if name in NOT_RETURNED:
            return False
        if name == "set-cookie" and (sets_console_cookie(value) or not cookie_stays_on(value, own_host)):
            log.info("a preview's cookie for another host was dropped",
                     extra={"event": "preview_cookie_dropped", "session": live.row.id, "port": port})
            return False
        return not (opaque and name in ("access-control-allow-origin", "access-control-allow-credentials"))

    def cut(exc: Exception) -> None:
        log.info("a preview's upstream ended mid-body", extra={"event": "preview_body_cut", "session": live.row.id,
                                                               "port": port, "error": str(exc)})

    # A sandboxed page's module scripts and fetches are cross-origin to its own server: the preview's
    # host (its capability) is what admits them, so any reader may have them.
    opaque = sandboxed and request.headers.get("Origin") == "null"
    try:
        return await send_back(request, upstream, keep, cut, {"Access-Control-Allow-Origin": "*"} if opaque else None)
    finally:
        await upstream_cm.__aexit__(None, None, None)


def cookie_stays_on(set_cookie: str, host: str) -> bool:
    """Whether a `Set-Cookie` value reaches no host but `host` (and its subdomains): no Domain
    attribute, or one naming `host` itself. A Domain naming a parent would reach the API's host
    (`localhost`, or the domain the API and the previews share) and every other preview."""
    for attribute in set_cookie.split(";")[1:]:
        name, _, value = attribute.partition("=")
        if name.strip().lower() == "domain":
            domain = value.strip().lstrip(".").rstrip(".").lower()
            if domain != host:
                return False
    return True


def _refused(exc: BaseException) -> bool:
    return isinstance(exc, aiohttp.ClientConnectorError) and isinstance(exc.os_error, ConnectionRefusedError)


async def _websocket(request: web.Request, client: aiohttp.ClientSession, target: URL, headers: CIMultiDict,
                     live: LiveSession, port: int) -> web.StreamResponse:
    protocols = requested_protocols(request)
    forwarded = CIMultiDict((k, v) for k, v in headers.items() if k.lower() not in WEBSOCKET_HEADERS)
    try:
        upstream = await client.ws_connect(target, headers=forwarded, protocols=protocols, autoping=False,
                                           max_msg_size=0, compress=0)
    except aiohttp.WSServerHandshakeError as exc:
        raise ApiError(502, ErrorCode.PORT_UNREACHABLE, f"the server on port {port} refused the WebSocket "
                       f"upgrade ({exc.status} {exc.message})", "check the path the server expects") from None
    except (aiohttp.ClientConnectorError, ConnectionError) as exc:
        raise unreachable(live, port, exc) from None
    return await bridge(request, upstream)


def unreachable(live: LiveSession, port: int, exc: BaseException) -> ApiError:
    if _refused(exc):
        return not_listening(live.row.id, port, True)
    return ApiError(502, ErrorCode.PORT_UNREACHABLE, f"the server on port {port} of session {live.row.id!r} "
                    f"did not answer ({type(exc).__name__}: {exc})",
                    "check the process's output (GET /v1/sessions/{id}/processes/{pid}/output)")
