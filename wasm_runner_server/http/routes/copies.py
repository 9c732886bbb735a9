"""Sessions made as copies: forks of a session, and templates of a workspace (publish, list, inspect,
delete). Copies count against the workspace's sessions and disk quotas and are audited."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from aiohttp import web

from wasm_runner.errors import InvalidRequestError
from wasm_runner.providers.native.web_starters import find_starter, starter_catalog, starter_names
from wasm_runner.snapshots.templates import TemplateNotFound, TemplateRecord
from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_protocol.wire import (
    ForkFailure,
    SessionFork,
    SessionForkResult,
    StarterInfo,
    StarterList,
    TemplateCreate,
    TemplateInfo,
    TemplateList,
)
from wasm_runner_server.errors import ApiError
from wasm_runner_server.http.bodies import json_response, read_json
from wasm_runner_server.http.openapi import operation
from wasm_runner_server.http.policy import POLICY
from wasm_runner_server.http.public_url import absolute
from wasm_runner_server.sessions.copies import SessionCopies
from wasm_runner_server.sessions.manager import LiveSession, temporary_refused
from wasm_runner_server.sessions.service import SERVICE

routes = web.RouteTableDef()


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
    copies = copies_of(request)
    await _check_room(request, live, body.count, "delete files or sessions, or fork fewer copies")
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
           tag="templates", body=TemplateCreate, response=TemplateInfo, status=201, errors=(404, 409, 413, 415, 422, 429),
           description="A template of the same name is replaced. `POST /v1/sessions {\"template\": name}` starts "
                       "a session from it: its first call finds the template's variables, imports and files.")
async def publishtemplate_of(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    body = await read_json(request, TemplateCreate)
    live = service.sessions.get(body.session)
    policy = request.app[POLICY]
    if live.temporary:
        raise temporary_refused("publishes no template")
    owner = policy.session_owner(live.row.id)
    await _check_room(request, live, 1, "delete files, sessions or templates first")
    record = await copies_of(request).publish(live, owner, body.name)
    policy.on_session_event(request, "template_publish", live.row.id, {"template": record.name, "bytes": record.bytes})
    return json_response(_info(record), status=201, headers={"Location": absolute(request, f"/v1/templates/{record.name}")})


@routes.get("/v1/templates")
@operation(summary="List the workspace's templates", tag="templates", response=TemplateList)
async def list_templates(request: web.Request) -> web.Response:
    owner = request.app[POLICY].caller_workspace(request)
    records = await asyncio.to_thread(copies_of(request).list_templates, owner)
    return json_response(TemplateList(templates=[_info(r) for r in records]))


@routes.get("/v1/starters")
@operation(summary="List the web starters a session can start with, and whether each is installed here",
           tag="templates", response=StarterList)
async def list_starters(request: web.Request) -> web.Response:
    catalog = await asyncio.to_thread(starter_catalog)  # reads each install's marker
    return json_response(StarterList(starters=[StarterInfo(name=s.name, description=s.description,
                                                           dev_command=list(s.dev_command), port=s.port, ready=s.ready)
                                               for s in catalog]))


@routes.get("/v1/templates/{name}")
@operation(summary="Inspect a template", tag="templates", response=TemplateInfo, errors=(404,))
async def gettemplate_of(request: web.Request) -> web.Response:
    owner = request.app[POLICY].caller_workspace(request)
    return json_response(_info(template_of(request, owner, request.match_info["name"])))


@routes.delete("/v1/templates/{name}")
@operation(summary="Delete a template (sessions started from it keep their copies)", tag="templates", status=204,
           errors=(404,))
async def deletetemplate_of(request: web.Request) -> web.Response:
    policy = request.app[POLICY]
    owner = policy.caller_workspace(request)
    name = request.match_info["name"]
    template_of(request, owner, name)
    await asyncio.to_thread(copies_of(request).delete_template, owner, name)
    policy.on_session_event(request, "template_delete", None, {"template": name})
    return web.Response(status=204)


async def _check_room(request: web.Request, live: LiveSession, count: int, hint: str) -> None:
    """429 when `count` copies of the session would pass its workspace's disk quota."""
    quota = request.app[POLICY].workspace_quota(live.row.id)
    if quota is None:
        return
    _, cap, measure = quota
    needed = await copies_of(request).size(live) * count
    used, _ = await measure()
    if used + needed > cap:
        raise ApiError(429, ErrorCode.WORKSPACE_DISK_QUOTA,
                       f"{count} cop{'y' if count == 1 else 'ies'} of the session need {needed} bytes; the workspace "
                       f"holds {used} of its {cap}", hint)


def copies_of(request: web.Request) -> SessionCopies:
    """The service's forks and templates."""
    copies = request.app[SERVICE].copies
    assert copies is not None
    return copies


def check_starter(name: str, template: str | None) -> None:
    """422 for an unknown starter (or one asked for with a template), 503 for one not installed here."""
    if template is not None:
        raise ApiError(422, ErrorCode.VALIDATION_ERROR, "a session starts from a template or a starter, not both",
                       "leave out `template` or `starter`")
    names = starter_names()
    if name not in names:
        raise ApiError(422, ErrorCode.VALIDATION_ERROR, f"no web starter {name!r}",
                       f"the starters are: {', '.join(names)}")
    if find_starter(name) is None:
        raise ApiError(503, ErrorCode.PROVIDER_UNAVAILABLE, f"the web starter {name!r} is not installed on this server",
                       "the operator runs `wasm-runner prepare` (it installs the starters' node_modules)")


def template_of(request: web.Request, owner: str, name: str) -> TemplateRecord:
    """The caller's workspace's template `name`, or 404 (another workspace's is not found either)."""
    try:
        return copies_of(request).template(owner, name)
    except (TemplateNotFound, InvalidRequestError):
        raise ApiError(404, ErrorCode.TEMPLATE_NOT_FOUND, f"no template {name!r} in this workspace",
                       "GET /v1/templates lists them; POST /v1/templates publishes one") from None


def _info(record: TemplateRecord) -> TemplateInfo:
    return TemplateInfo(name=record.name, created_at=datetime.fromtimestamp(record.created_at, UTC),
                        bytes=record.bytes, kernels=record.kernels, fresh_kernels=record.fresh_kernels)
