"""The console's sign-in exchange: POST a key (or a sign-in link's token) for an HttpOnly cookie and a
CSRF token, DELETE to sign out. Served without a key (the middleware lets CONSOLE_SESSION_PATH
through); each handler checks what it needs itself. The token is answered only here, once: no route
gives it out again (see console_sessions). A key asks for a sign-in link (CONSOLE_LINKS_PATH, with
the key as on any route)."""

from __future__ import annotations

from typing import Annotated

import msgspec
from aiohttp import web
from msgspec import Meta

from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_protocol.wire import ConsoleLink
from wasm_runner_server.errors import ApiError
from wasm_runner_server.http.bodies import json_response, read_json
from wasm_runner_server.http.openapi import operation
from wasm_runner_server.http.paths import CONSOLE_LINKS_PATH, CONSOLE_PREFIX, CONSOLE_SESSION_PATH
from wasm_runner_server.http.policy import principal_of
from wasm_runner_server.http.public_url import absolute
from wasm_runner_server.security.console_sessions import (
    COOKIE,
    ConsoleSession,
    check_csrf,
    check_same_origin,
    clear_cookie,
    cookie_session,
    set_cookie,
)
from wasm_runner_server.security.state import SECURITY

routes = web.RouteTableDef()
CLEAR_SITE_DATA = '"cache", "storage"'
"""Sent with a sign-in: whatever an earlier document of this origin left (storage, service workers) is gone."""


class SignIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    key: Annotated[str, Meta(max_length=512)] = ""
    """The API key (empty when the service runs without keys)."""
    link: Annotated[str, Meta(max_length=128)] = ""
    """Or the token of a sign-in link (POST /v1/console/sign-in-links), instead of the key."""


class ConsoleState(msgspec.Struct, kw_only=True):
    workspace: str
    kind: str
    csrf_token: str
    """Send it as X-CSRF-Token on every call made with the cookie; it is not given out again."""
    expires_at: float


def _state(session: ConsoleSession) -> ConsoleState:
    return ConsoleState(workspace=session.principal.workspace, kind=session.principal.kind,
                        csrf_token=session.csrf_token, expires_at=session.expires_at)


@routes.post(CONSOLE_SESSION_PATH)
@operation(summary="The console's sign-in: a key exchanged for an HttpOnly, SameSite=Strict session cookie and a "
                   "CSRF token", tag="console", body=SignIn, response=ConsoleState, errors=(401, 403, 415))
async def sign_in(request: web.Request) -> web.Response:
    check_same_origin(request)
    if request.content_type != "application/json":  # no form or text/plain post from another site
        raise ApiError(415, ErrorCode.UNSUPPORTED_MEDIA_TYPE, "the sign-in takes a JSON body",
                       "send Content-Type: application/json")
    body = await read_json(request, SignIn)
    security = request.app[SECURITY]
    if body.link:
        linked = security.console.redeem(body.link)
        if linked is None or not security.authenticator.key_active(linked.key_id):
            raise ApiError(401, ErrorCode.LINK_INVALID, "this sign-in link is unknown, used or expired",
                           "ask for another: wasm-runner console (or POST /v1/console/sign-in-links with your key)")
        principal = linked
    else:
        principal = security.authenticator.verify_key(body.key.strip())
    security.authenticator.take_rate(principal.key_id)
    security.console.close(request.cookies.get(COOKIE))
    session_id, session = security.console.open(principal)
    response = json_response(_state(session), headers={"Clear-Site-Data": CLEAR_SITE_DATA, "Cache-Control": "no-store"})
    set_cookie(response, request, session_id, security.console.lifetime_s)
    return response


@routes.post(CONSOLE_LINKS_PATH)
@operation(summary="A one-time link that signs the console in as the calling key, without the key reaching the "
                   "browser (valid ten minutes)", tag="console", response=ConsoleLink, status=201, errors=(401,))
async def sign_in_link(request: web.Request) -> web.Response:
    security = request.app[SECURITY]
    token, expires = security.console.link(principal_of(request))
    return json_response(ConsoleLink(url=absolute(request, f"{CONSOLE_PREFIX}/#sign-in={token}"), expires_at=expires),
                         status=201, headers={"Cache-Control": "no-store"})


@routes.delete(CONSOLE_SESSION_PATH)
@operation(summary="Sign the console out: its session ends and its cookie is cleared", tag="console",
           status=204, errors=(403,))
async def sign_out(request: web.Request) -> web.Response:
    security = request.app[SECURITY]
    session = cookie_session(request, security.console)
    if session is not None:
        check_csrf(request, session)
    security.console.close(request.cookies.get(COOKIE))
    response = web.Response(status=204, headers={"Clear-Site-Data": CLEAR_SITE_DATA})
    clear_cookie(response, request)
    return response
