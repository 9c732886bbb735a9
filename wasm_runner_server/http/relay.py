"""Relaying an HTTP exchange to another server: an answer streamed back, WebSockets bridged frame by frame.

Two doors use it: preview ports (routes/ports.py: a server inside a sandbox) and forwarding
(forwarding.py: the node that holds a session).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping

import aiohttp
from aiohttp import web

HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                        "trailers", "transfer-encoding", "upgrade"})
"""Headers of one connection (RFC 9110, 7.6.1): never relayed."""
WEBSOCKET_HEADERS = frozenset({"sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions",
                               "sec-websocket-protocol", "sec-websocket-accept"})
"""The handshake's own headers: the client library makes its own."""


def is_websocket(request: web.Request) -> bool:
    return request.headers.get("Upgrade", "").lower() == "websocket"


def requested_protocols(request: web.Request) -> list[str]:
    return [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",") if p.strip()]


async def send_back(request: web.Request, upstream: aiohttp.ClientResponse,
                    keep: Callable[[str, str], bool] = lambda name, value: True,
                    on_cut: Callable[[Exception], None] = lambda exc: None,
                    extra: Mapping[str, str] | None = None) -> web.StreamResponse:
    """`upstream`'s answer to `request`: its status, its end-to-end headers that `keep` accepts (given
    the lower-case name and the value) and then `extra`, and its body as it arrives (sized when it
    was, else chunked). `on_cut` hears of a body that ended short."""
    response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
    for name, value in upstream.headers.items():
        lower = name.lower()
        if lower not in HOP_BY_HOP and keep(lower, value):
            response.headers.add(name, value)
    response.headers.update(extra or {})
    if not (request.method == "HEAD" or upstream.status in (204, 304) or "Content-Length" in upstream.headers):
        response.headers.popall("Content-Length", None)
        response.enable_chunked_encoding()
    try:
        await response.prepare(request)
        async for chunk in upstream.content.iter_any():
            await response.write(chunk)
    except aiohttp.ClientPayloadError as exc:
        # The headers are out: an error answer is no longer possible. The body ends short, and the
        # caller's connection is closed so that it cannot take it for a whole one.
        on_cut(exc)
        if request.transport is not None:
            request.transport.close()
        return response
    await response.write_eof()
    return response


async def bridge(request: web.Request, upstream: aiohttp.ClientWebSocketResponse) -> web.WebSocketResponse:
    """Answer `request`'s upgrade and relay frames both ways with `upstream` until either side closes."""
    downstream = web.WebSocketResponse(protocols=[upstream.protocol] if upstream.protocol else (), autoping=False,
                                       max_msg_size=0, compress=False)
    await downstream.prepare(request)

    async def relay(source, sink) -> None:
        async for message in source:
            if message.type == aiohttp.WSMsgType.TEXT:
                await sink.send_str(message.data)
            elif message.type == aiohttp.WSMsgType.BINARY:
                await sink.send_bytes(message.data)
            elif message.type == aiohttp.WSMsgType.PING:
                await sink.ping(message.data)
            elif message.type == aiohttp.WSMsgType.PONG:
                await sink.pong(message.data)
            else:
                break
        with contextlib.suppress(Exception):
            await sink.close(code=source.close_code or aiohttp.WSCloseCode.OK)

    tasks = [asyncio.ensure_future(relay(downstream, upstream)), asyncio.ensure_future(relay(upstream, downstream))]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await upstream.close()
        await downstream.close()
    return downstream
