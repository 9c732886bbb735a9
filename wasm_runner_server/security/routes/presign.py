"""Presigned links: create one for a session file, and serve it (GET or PUT) without a key."""

from __future__ import annotations

import time

from aiohttp import web

from wasm_runner.workspace.file_errors import IsDirectoryError
from wasm_runner.workspace.relpaths import split_path
from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_protocol.processes import PreviewLink, PreviewLinkBody, TerminalLink
from wasm_runner_protocol.wire import PresignBody, PresignResult
from wasm_runner_server.errors import ApiError, session_not_found
from wasm_runner_server.http.bodies import json_response, read_json
from wasm_runner_server.http.openapi import operation
from wasm_runner_server.http.paths import ANY_PATH, PREVIEW_LINK_PREFIX, PTY_LINK_PREFIX
from wasm_runner_server.http.policy import CURRENT, PRINCIPAL, Principal, principal_of
from wasm_runner_server.http.preview_origins import PREVIEWS
from wasm_runner_server.http.public_url import absolute, absolute_websocket
from wasm_runner_server.http.routes import files as routes_files
from wasm_runner_server.http.routes import ports as routes_ports
from wasm_runner_server.http.routes import pty as routes_pty
from wasm_runner_server.security.presign import altered
from wasm_runner_server.security.state import SECURITY
from wasm_runner_server.sessions.manager import LiveSession
from wasm_runner_server.sessions.service import SERVICE

routes = web.RouteTableDef()


@routes.post("/v1/sessions/{id}/files/" + ANY_PATH + ":presign")
@operation(summary="A link that reads (GET) or writes (PUT) this one file until it expires, without a key",
           tag="files", body=PresignBody, body_required=False, response=PresignResult, errors=(404, 422))
async def presign(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    security = request.app[SECURITY]
    live = service.sessions.get(request.match_info["id"])
    path = "/".join(split_path(request.match_info["path"]))
    if not path:
        raise ApiError(422, ErrorCode.VALIDATION_ERROR, "a link names one file", "give a file path")
    body = await read_json(request, PresignBody, empty_ok=True)
    settings = security.settings
    default, cap = ((settings.presign_get_default_s, settings.presign_get_max_s) if body.method == "GET"
                    else (settings.presign_put_default_s, settings.presign_put_max_s))
    expires_in = body.expires_in if body.expires_in is not None else default
    if expires_in > cap:
        raise ApiError(422, ErrorCode.LIMIT_EXCEEDS_MAXIMUM, f"expires_in = {expires_in:g} exceeds the maximum {cap:g} "
                       f"for {body.method} links", f"ask for at most {cap:g} seconds")
    principal = principal_of(request)
    url, expires = security.signer.sign(body.method, principal.workspace, live.row.id, path, expires_in,
                                        incarnation=incarnation(live), key_id=principal.key_id)
    return json_response(PresignResult(url=absolute(request, url), method=body.method, expires_at=expires,
                                       expires_in=round(expires - time.time(), 3)))


def incarnation(live: LiveSession) -> str:
    """What tells this session from one created later under the same id: its creation time."""
    return repr(live.row.created_at)


async def _follow(request: web.Request) -> web.StreamResponse:
    security = request.app[SECURITY]
    session_id = request.match_info["id"]
    path = "/".join(split_path(request.match_info["path"]))
    if path != request.match_info["path"] or request.query_string:  # one spelling per link
        raise altered()
    owner = security.tenants.owner(session_id)
    workspace = owner.workspace if owner is not None else security.authenticator.unowned_workspace
    live = request.app[SERVICE].sessions.sessions.get(session_id)
    key_id = security.signer.verify(request.match_info["token"], request.method, workspace or "", session_id,
                                    path, incarnation=incarnation(live) if live is not None else "")
    if workspace is None:
        raise session_not_found(session_id)
    security.authenticator.admit_link(key_id)
    principal = Principal(workspace, f"link:{key_id}", "link")
    token = CURRENT.set(principal)
    try:
        if request.method == "PUT":
            response = await routes_files.write_file(request)
            security.audit.record_file_change(  # on disk before the response
                workspace=workspace, key_id=principal.key_id, session=session_id,
                ephemeral=bool(owner and owner.ephemeral), mode="put", path=path, status=response.status)
            return response
        service = request.app[SERVICE]
        files = service.sessions.files(service.sessions.get(session_id))
        try:
            return await routes_files.send_file(request, files, path)  # a file, never a listing
        except IsDirectoryError:
            raise ApiError(409, ErrorCode.NOT_A_FILE, "a link serves one file, and this path is a directory",
                           "presign a link to a file") from None
    finally:
        CURRENT.reset(token)


# Not in /openapi.json: a link is an opaque URL handed out by :presign.
@routes.get("/v1/links/{token}/{id}/" + ANY_PATH)
async def follow_get(request: web.Request) -> web.StreamResponse:
    return await _follow(request)


@routes.put("/v1/links/{token}/{id}/" + ANY_PATH)
async def follow_put(request: web.Request) -> web.StreamResponse:
    return await _follow(request)


# -- preview links: one port of one session, any method, until a time ---------------------------

@routes.post(r"/v1/sessions/{id}/ports/{port:\d+}:presign")
@operation(summary="A link to the server on this port of the session (for a browser tab), without a key, "
                   "until it expires", tag="processes", body=PreviewLinkBody, body_required=False,
           response=PreviewLink, errors=(404, 422))
async def presign_preview(request: web.Request) -> web.Response:
    """The link is the preview's own origin (http/preview_origins.py): its host is the credential."""
    service = request.app[SERVICE]
    security = request.app[SECURITY]
    live = service.sessions.get(request.match_info["id"])
    port = routes_ports.check_port(request.match_info["port"])
    body = await read_json(request, PreviewLinkBody, empty_ok=True)
    settings = security.settings
    expires_in = body.expires_in if body.expires_in is not None else settings.presign_get_default_s
    if expires_in > settings.presign_get_max_s:
        raise ApiError(422, ErrorCode.LIMIT_EXCEEDS_MAXIMUM, f"expires_in = {expires_in:g} exceeds the maximum "
                       f"{settings.presign_get_max_s:g} for preview links",
                       f"ask for at most {settings.presign_get_max_s:g} seconds")
    principal = principal_of(request)
    previews = request.app[PREVIEWS]
    label, grant = previews.grant(principal.workspace, live.row.id, live.row.created_at, port, principal.key_id,
                                  expires_in)
    idle = await service.processes.listens(live, port)
    return json_response(PreviewLink(url=previews.origin(label) + "/", port=port, expires_at=grant.expires,
                                     expires_in=round(grant.expires - time.time(), 3), listening=idle is None,
                                     hint=None if idle is None else "; ".join(filter(None, (idle.message, idle.hint)))))


# Not in /openapi.json: the paths preview links had before previews moved to origins of their own.
@routes.route("*", PREVIEW_LINK_PREFIX + "{rest:.*}")
async def follow_preview(request: web.Request) -> web.StreamResponse:
    raise ApiError(410, ErrorCode.LINK_INVALID, "previews are no longer served on the API's origin: this preview "
                   "link is from before that change", "ask for a new link: POST /v1/sessions/{id}/ports/{port}:presign")


# -- terminal links: a browser's WebSocket to one session's terminal, opened within a short time ---

TERMINAL_METHOD = "TERMINAL"
"""What a terminal link's signature names instead of an HTTP method."""
TERMINAL_SUBJECT = "pty"
TERMINAL_LINK_DEFAULT_S = 60.0
"""A terminal link is for opening the socket now: it lives a minute unless asked otherwise."""


@routes.post("/v1/sessions/{id}/pty:presign")
@operation(summary="A short-lived link that opens this session's terminal WebSocket without a key (a browser "
                   "cannot send one on a WebSocket)", tag="processes", body=PreviewLinkBody, body_required=False,
           response=TerminalLink, errors=(404, 422))
async def presign_terminal(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    security = request.app[SECURITY]
    live = service.sessions.get(request.match_info["id"])
    body = await read_json(request, PreviewLinkBody, empty_ok=True)
    settings = security.settings
    expires_in = body.expires_in if body.expires_in is not None else TERMINAL_LINK_DEFAULT_S
    if expires_in > settings.presign_get_max_s:
        raise ApiError(422, ErrorCode.LIMIT_EXCEEDS_MAXIMUM, f"expires_in = {expires_in:g} exceeds the maximum "
                       f"{settings.presign_get_max_s:g} for terminal links",
                       f"ask for at most {settings.presign_get_max_s:g} seconds")
    principal = principal_of(request)
    token, expires = security.signer.token(TERMINAL_METHOD, principal.workspace, live.row.id, TERMINAL_SUBJECT,
                                           expires_in, incarnation=incarnation(live), key_id=principal.key_id)
    url = absolute_websocket(request, f"{PTY_LINK_PREFIX}{token}/{live.row.id}")
    return json_response(TerminalLink(url=url, expires_at=expires, expires_in=round(expires - time.time(), 3)))


# Not in /openapi.json: a link is an opaque URL handed out by :presign.
@routes.get(PTY_LINK_PREFIX + "{token}/{id}")
async def follow_terminal(request: web.Request) -> web.StreamResponse:
    security = request.app[SECURITY]
    session_id = request.match_info["id"]
    owner = security.tenants.owner(session_id)
    workspace = owner.workspace if owner is not None else security.authenticator.unowned_workspace
    service = request.app[SERVICE]
    live = service.sessions.sessions.get(session_id)
    key_id = security.signer.verify(request.match_info["token"], TERMINAL_METHOD, workspace or "", session_id,
                                    TERMINAL_SUBJECT, incarnation=incarnation(live) if live is not None else "")
    if workspace is None:
        raise session_not_found(session_id)
    security.authenticator.admit_link(key_id)
    principal = Principal(workspace, f"link:{key_id}", "link")
    request[PRINCIPAL] = principal  # the terminal it starts is the link's, like a call with its key
    token = CURRENT.set(principal)
    try:
        return await routes_pty.terminal(request)
    finally:
        CURRENT.reset(token)
