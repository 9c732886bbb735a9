"""Sessions: create (lazily, or from a template), list, inspect, change, delete, cancel the running
call, fork; templates: publish a session's state under a name, list, delete."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from aiohttp import web
from msgspec import UNSET

from wasm_runner.errors import InvalidRequestError
from wasm_runner.snapshots.templates import TemplateNotFound, TemplateRecord
from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_protocol.wire import (
    CancelResult,
    ForkFailure,
    SessionCreate,
    SessionFork,
    SessionForkResult,
    SessionInfo,
    SessionList,
    SessionListQuery,
    SessionPatch,
    TemplateCreate,
    TemplateInfo,
    TemplateList,
)
from wasm_runner_server.errors import ApiError
from wasm_runner_server.http.bodies import json_response, read_json, read_query
from wasm_runner_server.http.openapi import operation
from wasm_runner_server.http.policy import POLICY
from wasm_runner_server.http.routes.packages import install_into
from wasm_runner_server.sessions.copies import SessionCopies
from wasm_runner_server.sessions.service import SERVICE

routes = web.RouteTableDef()


@routes.post("/v1/sessions")
@operation(summary="Create a session (cheap: no interpreter, no directory until first use)", tag="sessions",
           body=SessionCreate, body_required=False, response=SessionInfo, status=201,
           errors=(403, 409, 413, 415, 422))
async def create_session(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    body = await read_json(request, SessionCreate, empty_ok=True)
    policy = request.app[POLICY]
    policy.check_session_quota(request)
    body = policy.scope_session_id(request, body)  # chosen ids never collide across workspaces
    if body.template is not None:  # before anything is made: an unknown template leaves no session
        _template(request, policy.caller_workspace(request), body.template)
    live = service.sessions.create(body)
    policy.claim_session(request, live.row.id, body.ephemeral)  # the caller's workspace owns it
    if body.template is not None:
        try:
            record = await _copies(request).start(live, policy.session_owner(live.row.id), body.template)
        except BaseException:
            await service.sessions.delete(live)
            raise
        policy.on_session_event(request, "template_start", live.row.id, {"template": record.name})
    if body.egress is not None:
        profile = service.sessions.profile_of(live)
        policy.on_egress_change(request, live.row.id, live.row.profile, profile.network.policy, body.egress, None)
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
                         headers={"Location": f"/v1/sessions/{live.row.id}"})


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
    try:
        service.sessions.set_egress(live, body.egress)
    except ApiError as exc:
        if exc.status == 403:  # a refused widening is audited; a malformed policy is only answered
            policy.on_egress_change(request, live.row.id, live.row.profile, previous, body.egress, exc.message)
        raise
    policy.on_egress_change(request, live.row.id, live.row.profile, previous, body.egress, None)
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


@routes.post(r"/v1/sessions/{id:[^/:]+}:fork")
@operation(summary="Fork a session: new sessions with a copy of its files, packages, network policy and kernel state",
           tag="sessions", body=SessionFork, body_required=False, response=SessionForkResult, status=201,
           errors=(404, 413, 415, 422, 429),
           description="Each copy is made whole or not at all (`failed` says which were not, and why). The live "
                       "WebAssembly kernels are saved first and keep running; each copy restores them on its "
                       "first call, with its own random seed. Native kernels start anew in the copies "
                       "(`fresh_kernels` says so). Copies count against the workspace's sessions and disk quota.")
async def fork_session(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    live = service.sessions.get(request.match_info["id"])
    body = await read_json(request, SessionFork, empty_ok=True)
    policy = request.app[POLICY]
    policy.check_session_quota(request, body.count)
    copies = _copies(request)
    quota = policy.workspace_quota(live.row.id)
    if quota is not None:
        _, cap, measure = quota
        needed = await copies.size(live) * body.count
        used, _ = await measure()
        if used + needed > cap:
            raise ApiError(429, ErrorCode.WORKSPACE_DISK_QUOTA,
                           f"{body.count} copies need {needed} bytes; the workspace holds {used} of its {cap}",
                           "delete files or sessions, or fork fewer copies")
    children, result = await copies.fork(live, body.count)
    ephemeral = policy.session_ephemeral(live.row.id)
    for child in children:
        policy.claim_session(request, child.row.id, ephemeral)
    policy.on_session_event(request, "fork", live.row.id,
                            {"children": [c.row.id for c in children], "failed": len(result.failed)})
    return json_response(SessionForkResult(
        sessions=[service.sessions.info(c) for c in children],
        failed=[ForkFailure(index=f.index, error=f.reason) for f in result.failed],
        kernels=result.kernels, fresh_kernels=result.fresh_kernels), status=201)


@routes.post("/v1/templates")
@operation(summary="Publish a session's state (files, packages, kernels) as a template of the workspace",
           tag="templates", body=TemplateCreate, response=TemplateInfo, status=201, errors=(404, 413, 415, 422, 429),
           description="A template of the same name is replaced. `POST /v1/sessions {\"template\": name}` starts "
                       "a session from it: its first call finds the template's variables, imports and files.")
async def publish_template(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    body = await read_json(request, TemplateCreate)
    live = service.sessions.get(body.session)
    policy = request.app[POLICY]
    owner = policy.session_owner(live.row.id)
    quota = policy.workspace_quota(live.row.id)
    copies = _copies(request)
    if quota is not None:
        _, cap, measure = quota
        needed = await copies.size(live)
        used, _ = await measure()
        if used + needed > cap:
            raise ApiError(429, ErrorCode.WORKSPACE_DISK_QUOTA,
                           f"the template needs {needed} bytes; the workspace holds {used} of its {cap}",
                           "delete files, sessions or templates first")
    record = await copies.publish(live, owner, body.name)
    policy.on_session_event(request, "template_publish", live.row.id, {"template": record.name, "bytes": record.bytes})
    return json_response(_info(record), status=201, headers={"Location": f"/v1/templates/{record.name}"})


@routes.get("/v1/templates")
@operation(summary="List the workspace's templates", tag="templates", response=TemplateList)
async def list_templates(request: web.Request) -> web.Response:
    owner = request.app[POLICY].caller_workspace(request)
    records = await asyncio.to_thread(_copies(request).templates(owner).list)
    return json_response(TemplateList(templates=[_info(r) for r in records]))


@routes.get("/v1/templates/{name}")
@operation(summary="Inspect a template", tag="templates", response=TemplateInfo, errors=(404,))
async def get_template(request: web.Request) -> web.Response:
    owner = request.app[POLICY].caller_workspace(request)
    return json_response(_info(_template(request, owner, request.match_info["name"])))


@routes.delete("/v1/templates/{name}")
@operation(summary="Delete a template (sessions started from it keep their copies)", tag="templates", status=204,
           errors=(404,))
async def delete_template(request: web.Request) -> web.Response:
    policy = request.app[POLICY]
    owner = policy.caller_workspace(request)
    name = request.match_info["name"]
    _template(request, owner, name)
    await asyncio.to_thread(_copies(request).templates(owner).delete, name)
    policy.on_session_event(request, "template_delete", None, {"template": name})
    return web.Response(status=204)


def _copies(request: web.Request) -> SessionCopies:
    copies = request.app[SERVICE].copies
    assert copies is not None
    return copies


def _template(request: web.Request, owner: str, name: str) -> TemplateRecord:
    """The caller's workspace's template `name`, or 404 (another workspace's is not found either)."""
    try:
        return _copies(request).templates(owner).get(name)
    except (TemplateNotFound, InvalidRequestError):
        raise ApiError(404, ErrorCode.TEMPLATE_NOT_FOUND, f"no template {name!r} in this workspace",
                       "GET /v1/templates lists them; POST /v1/templates publishes one") from None


def _info(record: TemplateRecord) -> TemplateInfo:
    return TemplateInfo(name=record.name, created_at=datetime.fromtimestamp(record.created_at, UTC),
                        bytes=record.bytes, kernels=record.kernels, fresh_kernels=record.fresh_kernels)
