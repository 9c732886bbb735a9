"""The console's sign-in exchange: POST a key for an HttpOnly cookie and a CSRF token, DELETE to sign
out. Served without a key (the middleware lets CONSOLE_SESSION_PATH through); each handler checks
what it needs itself. The token is answered only here, once: no route gives it out again (see
console_sessions)."""

from __future__ import annotations

from typing import Annotated

import msgspec
from aiohttp import web
from msgspec import Meta

from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_server.errors import ApiError
from wasm_runner_server.http.bodies import json_response, read_json
from wasm_runner_server.http.openapi import operation
from wasm_runner_server.http.paths import CONSOLE_SESSION_PATH
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
    principal = security.authenticator.verify_key(body.key.strip())
    security.authenticator.take_rate(principal.key_id)
    security.console.close(request.cookies.get(COOKIE))
    session_id, session = security.console.open(principal)
    response = json_response(_state(session), headers={"Clear-Site-Data": CLEAR_SITE_DATA, "Cache-Control": "no-store"})
    set_cookie(response, request, session_id, security.console.lifetime_s)
    return response


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
