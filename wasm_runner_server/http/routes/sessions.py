"""Sessions: create (lazily, or from a template), list, inspect, change, delete, cancel the running
call, hibernate now (forks and templates are in copies.py)."""

from __future__ import annotations

from aiohttp import web
from msgspec import UNSET

from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_protocol.wire import (
    CancelResult,
    SessionCreate,
    SessionInfo,
    SessionList,
    SessionListQuery,
    SessionPatch,
)
from wasm_runner_server.errors import ApiError
from wasm_runner_server.http.bodies import json_response, read_json, read_query
from wasm_runner_server.http.openapi import operation
from wasm_runner_server.http.policy import POLICY
from wasm_runner_server.http.public_url import absolute
from wasm_runner_server.http.routes.copies import check_starter, copies_of, template_of
from wasm_runner_server.http.routes.packages import install_into
from wasm_runner_server.sessions.egress import body_policy
from wasm_runner_server.sessions.service import SERVICE

routes = web.RouteTableDef()


@routes.post("/v1/sessions")
@operation(summary="Create a session (cheap: no interpreter, no directory until first use)", tag="sessions",
           body=SessionCreate, body_required=False, response=SessionInfo, status=201,
           errors=(403, 409, 413, 415, 422, 503))
async def create_session(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    body = await read_json(request, SessionCreate, empty_ok=True)
    policy = request.app[POLICY]
    policy.check_session_quota(request)
    body = policy.scope_session_id(request, body)  # chosen ids never collide across workspaces
    policy.check_session_disk(request, body)  # e.g. a member's disk needs a key naming its member
    if body.starter is not None:
        check_starter(body.starter, body.template)
    temporary = body.temporary or body.ephemeral
    if temporary and body.template is not None:
        raise ApiError(422, ErrorCode.TEMPORARY_SESSION, "a temporary session starts from nothing, not from a template",
                       "leave out template, or create a session that is not temporary")
    if body.template is not None:  # before anything is made: an unknown template leaves no session
        template_of(request, policy.caller_workspace(request), body.template)
    live = service.sessions.create(body)
    policy.claim_session(request, live.row.id, temporary, body)  # the caller's workspace owns it
    if body.template is not None:
        try:
            record = await copies_of(request).start(live, policy.session_owner(live.row.id), body.template)
        except BaseException:
            await service.sessions.delete(live)
            raise
        policy.on_session_event(request, "template_start", live.row.id, {"template": record.name})
    if body.starter is not None:
        try:
            await copies_of(request).start_starter(live, body.starter)
        except BaseException:
            await service.sessions.delete(live)
            raise
        policy.on_session_event(request, "starter_start", live.row.id, {"starter": body.starter})
    if body.egress is not None:
        profile = service.sessions.profile_of(live)
        policy.on_egress_change(request, live.row.id, live.row.profile, profile.network.policy,
                                body_policy(body.egress), None)
    if body.packages is not None:  # e.g. another session's lock: the same environment before the first call
        try:
            result = await install_into(service, request, live, body.packages)
        except ApiError:  # refused before installing (the workspace's quota): no session either
            await service.sessions.delete(live)
            raise
        if not result.ok:
            await service.sessions.delete(live)
            error = result.error
            raise ApiError(422, ErrorCode.PACKAGES_FAILED,
                           f"the session's packages could not be installed: {error.message if error else 'refused'}",
                           error.hint if error else None)
    return json_response(service.sessions.info(live), status=201,
                         headers={"Location": absolute(request, f"/v1/sessions/{live.row.id}")})


@routes.get("/v1/sessions")
@operation(summary="List sessions (oldest first, cursor pagination)", tag="sessions",
           query=SessionListQuery, response=SessionList)
async def list_sessions(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    query = read_query(request, SessionListQuery)
    page, cursor = request.app[POLICY].visible_page(request, query.cursor, query.limit)
    return json_response(SessionList(sessions=[service.sessions.info(s) for s in page], next_cursor=cursor))


@routes.get("/v1/sessions/{id}")
@operation(summary="Inspect a session", tag="sessions", response=SessionInfo, errors=(404,))
async def get_session(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    live = service.sessions.get(request.match_info["id"])
    return json_response(service.sessions.info(live))


@routes.patch("/v1/sessions/{id}")
@operation(summary="Change a session: its network policy, from its next call on, or when it ends", tag="sessions",
           body=SessionPatch, response=SessionInfo, errors=(403, 404, 413, 415, 422),
           description="`egress` may only narrow the policy of the session's profile (GET /v1/profiles shows "
                       "it); a wider one is refused with 403 network_not_allowed, naming the profiles that "
                       "allow it. null goes back to the profile's policy. The change is committed and audited "
                       "before the answer; a call already running keeps the policy it started with, a queued "
                       "one gets the new policy when it narrows the old. `expires_in_s` ends the session that "
                       "long from now (within the server's maximum TTL, counted from its creation).")
async def patch_session(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    live = service.sessions.get(request.match_info["id"])
    body = await read_json(request, SessionPatch)
    if body.egress is UNSET and body.expires_in_s is UNSET:
        raise ApiError(422, ErrorCode.VALIDATION_ERROR, "nothing to change",
                       'e.g. {"egress": {"mode": "deny"}} or {"expires_in_s": 3600}')
    if body.expires_in_s is not UNSET:
        service.sessions.set_expiry(live, body.expires_in_s)
    if body.egress is UNSET:
        return json_response(service.sessions.info(live))
    policy = request.app[POLICY]
    previous = service.sessions.egress(live)
    requested = body_policy(body.egress)
    try:
        service.sessions.set_egress(live, requested)
    except ApiError as exc:
        if exc.status == 403:  # a refused widening is audited; a malformed policy is only answered
            policy.on_egress_change(request, live.row.id, live.row.profile, previous, requested, exc.message)
        raise
    policy.on_egress_change(request, live.row.id, live.row.profile, previous, requested, None)
    return json_response(service.sessions.info(live))


@routes.delete("/v1/sessions/{id}")
@operation(summary="Delete a session: stop its execution, drop its kernels, remove its files", tag="sessions",
           status=204, errors=(404,))
async def delete_session(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    live = service.sessions.get(request.match_info["id"])
    await service.sessions.delete(live)
    return web.Response(status=204)


@routes.post("/v1/sessions/{id}/cancel")
@operation(summary="Stop the session's running execution (its caller gets a `cancelled` result)",
           tag="sessions", response=CancelResult, errors=(404,))
async def cancel_execution(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    live = service.sessions.get(request.match_info["id"])
    return json_response(CancelResult(cancelled=service.sessions.cancel(live)))


HIBERNATE_WAIT_S = 30.0
"""How long a hibernation waits for a worker process to save the session's kernels before answering."""


@routes.post(r"/v1/sessions/{id:[^/:]+}:hibernate")
@operation(summary="Hibernate a session now: save its kernels with its files, drop them, end its processes",
           tag="sessions", response=SessionInfo, errors=(404, 409),
           description="What the service does by itself once a session has idled for its `idle_timeout_s`, "
                       "on request: the session's memory is freed and its next call restores the kernels' "
                       "variables and imports (or, where a kernel could not be saved, starts a new one and "
                       "says why). Background processes are stopped. A session running a call answers 409 "
                       "session_busy.")
async def hibernate_session(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    live = service.sessions.get(request.match_info["id"])
    await service.sessions.hibernate(live, HIBERNATE_WAIT_S)
    request.app[POLICY].on_session_event(request, "hibernate", live.row.id, {})
    return json_response(service.sessions.info(live))
