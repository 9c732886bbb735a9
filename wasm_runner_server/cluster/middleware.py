"""The placement middleware: a request for a session is served where the session's lease is.

Before the handler, a session whose node's lease expired is taken over (`Placement.adopt`); after a
request that may have changed the session (any method but GET and HEAD), its changes are stored
before the answer goes out (a call to `/exec` stores them itself, inside the session manager).
It runs inside the access policy's middleware: a session the caller may not see is a 404 before any
takeover.
"""

from __future__ import annotations

from aiohttp import web

from wasm_runner_server.sessions.service import SERVICE

READS = frozenset({"GET", "HEAD", "OPTIONS"})


def placement_middleware(session_routes: tuple[str, ...]):
    """The middleware for the routes whose canonical path starts with one of `session_routes` (each
    names its session `{id}`)."""

    @web.middleware
    async def middleware(request: web.Request, handler) -> web.StreamResponse:
        service = request.app.get(SERVICE)
        placement = service.sessions.placement if service is not None else None
        resource = request.match_info.route.resource
        canonical = resource.canonical if resource is not None else ""
        if placement is None or not canonical.startswith(session_routes):
            return await handler(request)
        session_id = request.match_info["id"]
        await placement.adopt(session_id)
        response = await handler(request)
        if (request.method not in READS and response.status < 400 and not canonical.endswith("/exec")
                and not response.prepared):
            live = service.sessions.sessions.get(session_id) if service is not None else None
            if live is not None:
                await placement.persist(live)
        return response

    return middleware
