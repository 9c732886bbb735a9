"""MCP over streamable HTTP on the aiohttp service itself: the SDK's session manager run for the life of the
application, reached through an ASGI bridge behind the app's middlewares (so /mcp needs the same API keys)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from aiohttp import web
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from multidict import CIMultiDict

from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_server.errors import ApiError
from wasm_runner_server.http.policy import LOCAL, PRINCIPAL
from wasm_runner_server.mcp.server import build_server
from wasm_runner_server.mcp.tools import McpTools
from wasm_runner_server.sessions.service import CONFIG

log = logging.getLogger("wasm_runner.server.mcp")

MCP_PATH = "/mcp"



class _HttpTransport:
    """The SDK's streamable-HTTP session manager, run for the life of the application."""

    def __init__(self, manager: StreamableHTTPSessionManager) -> None:
        self.manager = manager
        self._stop = asyncio.Event()
        self._task: asyncio.Task | None = None
        self.background: set[asyncio.Task] = set()
        """Requests answered whose handling is winding down (see serve_asgi)."""

    async def start(self) -> None:
        started = asyncio.Event()

        async def run() -> None:
            async with self.manager.run():
                started.set()
                await self._stop.wait()

        self._task = asyncio.create_task(run(), name="wasm-runner-mcp")
        waiter = asyncio.ensure_future(started.wait())
        await asyncio.wait({waiter, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if not started.is_set():
            waiter.cancel()
            self._task.result()  # raises what stopped it

    async def stop(self) -> None:
        """End every MCP session (their open streams close), then the manager."""
        for task in list(self.background):
            task.cancel()
        self._stop.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, 10)
            except (TimeoutError, asyncio.CancelledError):
                log.warning("the MCP transport did not stop within 10 s", extra={"event": "mcp_stop_timeout"})
            except Exception:
                log.exception("the MCP transport failed", extra={"event": "mcp_failed"})
            self._task = None


MCP_HTTP = web.AppKey("mcp_http", _HttpTransport)

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def mount_mcp(app: web.Application, path: str = MCP_PATH) -> None:
    """Serve MCP over streamable HTTP at `path` on the service `app`.

    The route goes through the app's middlewares like any other (so /mcp needs the same API
    keys), and each tool call is a request to this same service's HTTP API carrying the MCP
    request's Authorization header, so keys, workspaces, quotas and audit apply unchanged.
    On a loopback address, Host and Origin are checked against DNS rebinding (as the SDK does).
    """
    tools = McpTools(max_result_chars=app[CONFIG].mcp.max_result_chars)
    server = build_server(tools)

    async def start(app: web.Application) -> None:
        settings = app[CONFIG].server
        security = None
        if settings.host in _LOOPBACK:
            security = TransportSecuritySettings(
                enable_dns_rebinding_protection=True,
                allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*", "127.0.0.1", "localhost", "[::1]"],
                allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"])
        manager = StreamableHTTPSessionManager(server, security_settings=security,
                                               max_request_body_size=settings.max_body_bytes)
        transport = _HttpTransport(manager)
        await transport.start()
        app[MCP_HTTP] = transport

    async def stop(app: web.Application) -> None:
        transport = app.get(MCP_HTTP)
        if transport is not None:
            await transport.stop()
        await tools.aclose()

    async def handle(request: web.Request) -> web.StreamResponse:
        transport = request.app.get(MCP_HTTP)
        if transport is None:
            raise ApiError(503, ErrorCode.NOT_READY, "the MCP endpoint is not running", "retry shortly")
        if tools.base_url is None:
            tools.base_url, tools.uds = _own_address(request)
        user = _mcp_user(request)

        async def as_caller(scope: dict, receive: Callable[[], Awaitable[dict]],
                            send: Send) -> None:
            scope["user"] = user
            await transport.manager.handle_request(scope, receive, send)

        return await serve_asgi(request, as_caller, transport.background)

    app.on_startup.append(start)
    app.on_shutdown.append(stop)
    app.on_cleanup.append(stop)
    app.router.add_route("*", path, handle)


def _mcp_user(request: web.Request) -> AuthenticatedUser:
    """The caller's key as the SDK's authenticated user: the SDK binds an MCP session to the user that
    opened it and answers any other exactly as an unknown session (404), so a session id is no credential."""
    principal = request.get(PRINCIPAL) or LOCAL
    return AuthenticatedUser(AccessToken(token="", client_id=f"{principal.workspace}/{principal.key_id}", scopes=[]))


def _own_address(request: web.Request) -> tuple[str, str | None]:
    """How this server is reached from itself: the local address the request came in on."""
    sock = request.transport.get_extra_info("sockname") if request.transport is not None else None
    if isinstance(sock, str) and sock:
        return "http://wasm-runner", sock  # a Unix socket
    if isinstance(sock, tuple):
        host, port = sock[0], sock[1]
        return (f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"), None
    raise ApiError(500, ErrorCode.INTERNAL_ERROR, "the MCP endpoint cannot tell its own address")


def _client_gone(exc: BaseException) -> bool:
    """The connection closed under a write (the client left, or the server is closing connections)."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_client_gone(e) for e in exc.exceptions)
    return isinstance(exc, (ConnectionResetError, BrokenPipeError))


def _settled(task: asyncio.Task) -> None:
    if task.cancelled():
        return
    failure = task.exception()
    if failure is not None and not _client_gone(failure):
        log.error("MCP request failed after its answer", exc_info=failure, extra={"event": "mcp_request_failed"})


Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
AsgiApp = Callable[[dict, Callable[[], Awaitable[dict]], Send], Awaitable[None]]


async def serve_asgi(request: web.Request, app: AsgiApp, background: set[asyncio.Task]) -> web.StreamResponse:
    """Answer an aiohttp request with an ASGI application (HTTP scope; streamed both ways).

    Work the app still does after its response is complete goes on in a task kept in `background`.
    """
    peer = request.transport.get_extra_info("peername") if request.transport is not None else None
    sock = request.transport.get_extra_info("sockname") if request.transport is not None else None
    scope = {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": f"{request.version.major}.{request.version.minor}",
        "method": request.method, "scheme": request.scheme, "path": request.path,
        "raw_path": request.raw_path.split("?", 1)[0].encode("latin-1"),
        "query_string": request.query_string.encode("latin-1"), "root_path": "",
        "headers": [(name.lower(), value) for name, value in request.raw_headers],
        "client": tuple(peer[:2]) if isinstance(peer, tuple) else None,
        "server": tuple(sock[:2]) if isinstance(sock, tuple) else None,
        "state": {},
    }
    response: web.StreamResponse | None = None
    finished = asyncio.Event()
    body_read = False

    async def receive() -> dict:
        nonlocal body_read
        if not body_read:
            chunk = await request.content.read(256 * 1024)
            body_read = request.content.at_eof()
            return {"type": "http.request", "body": chunk, "more_body": not body_read}
        while not finished.is_set():  # nothing more to read: wait for the end of the exchange
            transport = request.transport
            if transport is None or transport.is_closing():
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(finished.wait(), 1.0)
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        nonlocal response
        if message["type"] == "http.response.start":
            headers = CIMultiDict((k.decode("latin-1"), v.decode("latin-1")) for k, v in message.get("headers", ()))
            response = web.StreamResponse(status=message["status"], headers=headers)
        elif message["type"] == "http.response.body":
            if response is None:
                raise RuntimeError("ASGI body before response start")
            if not response.prepared:
                await response.prepare(request)
            body = message.get("body", b"")
            if body:
                await response.write(body)
            if not message.get("more_body", False):
                await response.write_eof()
                finished.set()

    # The app runs as its own task: once the response is complete, the rest of its work
    # (closing streams, committing a new MCP session) must not be cancelled with the
    # handler when the client closes the connection, as aiohttp does on disconnect.
    task = asyncio.ensure_future(app(scope, receive, send))
    task.add_done_callback(lambda _: finished.set())
    complete = asyncio.ensure_future(finished.wait())
    try:
        await asyncio.wait({task, complete}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        if not task.done() and (response is None or not response.prepared or not finished.is_set()):
            task.cancel()  # the client left before its answer was complete
        raise
    finally:
        complete.cancel()
    if task.done():
        failure = None if task.cancelled() else task.exception()
        if failure is not None and not (_client_gone(failure) and response is not None and response.prepared):
            raise failure  # the app's own failure (a client that left mid-answer is not one)
    else:
        background.add(task)
        task.add_done_callback(_settled)
        task.add_done_callback(background.discard)
    if response is None:
        raise ApiError(500, ErrorCode.INTERNAL_ERROR, "the MCP endpoint gave no answer")
    if not response.prepared:
        await response.prepare(request)
        await response.write_eof()
    return response
