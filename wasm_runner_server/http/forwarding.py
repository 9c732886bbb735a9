"""Any node serves any session: a request for a session another node holds is relayed to that node.

A node that receives a request for a session it does not hold looks the session up in the shared
database (`NodeDirectory.locate`). When another node holds it (its lease live, with object storage)
and has said where it is reached, the request goes there as it came: method, path and query, the
end-to-end headers (the caller's credential and Host included) and the body, streamed; the answer
comes back the same way, so SSE streams and large downloads pass as they are made, and a WebSocket
upgrade (a terminal) becomes a bridge frame by frame.

This node checks nothing of the request: the node that holds the session does every check (key,
tenancy, limits, audit) as for a request it received itself, so a forwarded request is counted and
audited once. A forwarded request carries FORWARDED_BY and is never forwarded again (the node it
reaches serves it or answers as a lone node would). When the holder does not answer, the caller
gets 503 with Retry-After: once its lease expires, the next request takes the session over here. A
holder that accepts the connection but does not answer (paused, or its event loop stuck) is waited for
only while it still renews its lease: once the lease runs out before the answer's headers came, the
caller gets the same 503, and its retry takes the session over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_server.cluster.nodes import Location, NodeDirectory
from wasm_runner_server.errors import ApiError
from wasm_runner_server.http.paths import SESSION_SCOPED
from wasm_runner_server.http.relay import HOP_BY_HOP, WEBSOCKET_HEADERS, bridge, is_websocket, requested_protocols, send_back
from wasm_runner_server.metrics import Counter
from wasm_runner_server.sessions.manager import SESSION_ID
from wasm_runner_server.sessions.service import SERVICE

log = logging.getLogger("wasm_runner.server")

FORWARDED_BY = "X-Wasm-Runner-Forwarded-By"
"""Names the node that forwarded a request: the node it reaches never forwards it again."""
CONNECT_TIMEOUT_S = 3.0
"""How long a node waits for the session's node to accept a connection before it answers 503."""
LEASE_MARGIN_S = 0.1
"""How long after a holder's lease should have run out it is looked up again (its renewal may be in flight)."""
KEEPALIVE_S = 30.0
"""Idle connections to other nodes are closed before the nodes' own 75 s keep-alive closes them under a request."""
KEPT_S = 5.0
"""How long a session's place is remembered at most (a lease remembers it no longer than it runs)."""
MAX_KEPT = 10_000


class Locations:
    """Where sessions held elsewhere are, remembered for a while: a session cannot move while its lease
    runs (only the node holding it, or one claiming it once the lease expired, changes that), so a
    forwarded request mostly needs no database round trip."""

    def __init__(self) -> None:
        self._kept: dict[str, tuple[float, Location | None]] = {}

    async def get(self, nodes: NodeDirectory, session_id: str) -> Location | None:
        kept = self._kept.get(session_id)
        now = time.monotonic()
        if kept is not None and now < kept[0]:
            return kept[1]
        where = await asyncio.to_thread(nodes.locate, session_id)
        if where is not None and where.node != nodes.node and where.url is not None:
            left = KEPT_S if where.lease_left_s is None else min(where.lease_left_s, KEPT_S)
            if left > 0:
                if len(self._kept) >= MAX_KEPT:
                    self._kept.clear()
                self._kept[session_id] = (now + left, where)
        return where

    def forget(self, session_id: str) -> None:
        self._kept.pop(session_id, None)


HANDSHAKE_REFUSALS = {401: ErrorCode.UNAUTHORIZED, 403: ErrorCode.PERMISSION_DENIED,
                      404: ErrorCode.SESSION_NOT_FOUND}
"""The code of a WebSocket upgrade the holder refused, by its status (the handshake carries no body)."""
LOCATIONS = web.AppKey("locations", Locations)
FORWARD_CLIENT = web.AppKey("forward_client", aiohttp.ClientSession)
FORWARDS = web.AppKey("forwards", Counter)


async def forwarding_context(app: web.Application) -> AsyncIterator[None]:
    """One pooled client per process for the requests this node forwards (keep-alive to each node)."""
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_S)
    client = aiohttp.ClientSession(auto_decompress=False, connector=connector,
                                   timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S))
    app[FORWARD_CLIENT] = client
    app[LOCATIONS] = Locations()
    forwards = Counter("wasm_runner_forwarded_requests_total",
                       "Requests this node relayed to the node that holds their session.")
    app[FORWARDS] = forwards
    service = app.get(SERVICE)
    if service is not None:
        service.metrics.gauges.append(forwards)
    yield
    await client.close()


@web.middleware
async def forwarding_middleware(request: web.Request, handler) -> web.StreamResponse:
    resource = request.match_info.route.resource
    if resource is None or not resource.canonical.startswith(SESSION_SCOPED):
        return await handler(request)
    where = await holder_elsewhere(request, request.app, request.match_info.get("id", ""))
    if where is None:
        return await handler(request)  # here, unknown, or free to take over: served as on a lone node
    return await forward(request, request.app, where, request.match_info["id"])


async def holder_elsewhere(request: web.Request, app: web.Application, session_id: str) -> Location | None:
    """Where the node that holds `session_id` is reached, when it is another node that `request` (not
    forwarded already) must go to (`app`: the service's application)."""
    service = app.get(SERVICE)
    nodes = service.nodes if service is not None else None
    if (service is None or nodes is None or FORWARDED_BY in request.headers or not SESSION_ID.fullmatch(session_id)
            or session_id in service.sessions.sessions):
        return None
    where = await app[LOCATIONS].get(nodes, session_id)
    if (where is None or where.node == nodes.node or where.url is None
            or (where.lease_left_s is not None and where.lease_left_s <= 0)):
        return None
    return where


async def forward(request: web.Request, app: web.Application, where: Location, session_id: str) -> web.StreamResponse:
    """`request` relayed to the node at `where`, which holds `session_id`, its answer streamed back."""
    nodes = app[SERVICE].nodes
    assert where.url is not None and nodes is not None  # (as holder_elsewhere found)
    client = app[FORWARD_CLIENT]
    target = URL(where.url + request.raw_path, encoded=True)
    headers = CIMultiDict((k, v) for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP)
    headers[FORWARDED_BY] = nodes.node
    if request.remote:
        headers.add("X-Forwarded-For", request.remote)
    app[FORWARDS].inc()
    try:
        if is_websocket(request):
            upgrade = CIMultiDict((k, v) for k, v in headers.items() if k.lower() not in WEBSOCKET_HEADERS)
            try:
                socket = await client.ws_connect(target, headers=upgrade, protocols=requested_protocols(request),
                                                 autoping=False, max_msg_size=0, compress=0)
            except aiohttp.WSServerHandshakeError as exc:  # the holder's own refusal: its status, told again
                raise ApiError(exc.status, HANDSHAKE_REFUSALS.get(exc.status, ErrorCode.BAD_REQUEST),
                               f"node {where.node!r}, which holds the session, refused the terminal's upgrade: "
                               f"{exc.status} {exc.message}", "check the key, the session's id and the query") from None
            return await bridge(request, socket)
        body = request.content if request.body_exists else None
        upstream = await _answered_while_held(client.request(request.method, target, headers=headers, data=body,
                                                             allow_redirects=False, compress=None),
                                              nodes, session_id, where)
        async with upstream:
            return await send_back(request, upstream, on_cut=lambda exc: log.warning(
                "a forwarded answer ended short", extra={"event": "forward_cut", "node": where.node,
                                                         "error": str(exc)}))
    except (aiohttp.ClientConnectorError, aiohttp.ServerTimeoutError, aiohttp.ServerDisconnectedError,
            ConnectionError, HolderStopped) as exc:
        app[LOCATIONS].forget(session_id)
        raise unavailable(session_id, where, exc) from None


class HolderStopped(Exception):
    """The node a request was relayed to let its lease run out before it answered."""


async def _answered_while_held(answer: Awaitable[aiohttp.ClientResponse], nodes: NodeDirectory, session_id: str,
                               where: Location) -> aiohttp.ClientResponse:
    """The holder's answer (its headers), unless its lease on the session runs out first (HolderStopped)."""
    relayed = asyncio.ensure_future(answer)
    watch = asyncio.ensure_future(_until_let_go(nodes, session_id, where))
    try:
        await asyncio.wait({relayed, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        if not relayed.done():
            relayed.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await relayed
    if relayed.cancelled():
        raise HolderStopped(f"its lease ran out before it answered ({where.node!r} paused or cut off)")
    return relayed.result()


async def _until_let_go(nodes: NodeDirectory, session_id: str, where: Location) -> None:
    """Returns once `where.node` no longer holds a live lease on the session; checks as each lease it
    renewed runs out (never, for a session without a lease: it lives on its node's disk)."""
    left = where.lease_left_s
    while left is not None:
        await asyncio.sleep(max(left, 0.0) + LEASE_MARGIN_S)
        now = await asyncio.to_thread(nodes.locate, session_id)
        if now is None or now.node != where.node or now.lease_left_s is None or now.lease_left_s <= 0:
            return
        left = now.lease_left_s
    await asyncio.Event().wait()


def unavailable(session_id: str, where: Location, exc: BaseException) -> ApiError:
    left = where.lease_left_s
    after = max(1, math.ceil(left)) if left is not None else 5
    when = (f"if it does not answer within {after} s (its lease), the session moves to the node that serves "
            "the next request" if left is not None else "the session lives on that node's disk: it is served "
            "again when that node is back")
    if isinstance(exc, HolderStopped):
        after, when = 1, "its lease ran out, so the next request takes the session over"
    log.warning("session node unreachable", extra={"event": "forward_failed", "session": session_id,
                                                   "node": where.node, "error": f"{type(exc).__name__}: {exc}"})
    return ApiError(503, ErrorCode.SESSION_NODE_UNAVAILABLE,
                    f"node {where.node!r}, which holds session {session_id!r}, does not answer "
                    f"({type(exc).__name__}); {when}", "retry after the number of seconds in Retry-After",
                    {"Retry-After": str(after)})
