"""Execution: in a session's kernel, as a native process in a session, and one-shot."""

from __future__ import annotations

import asyncio
import base64
import logging
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import msgspec
from aiohttp import web

from wasm_runner import ExecResult, OutputListener
from wasm_runner.profiles import Profile
from wasm_runner.tools import Tool, ToolPolicy, ToolRegistry, python_stubs, typescript_stubs
from wasm_runner.workspace.budget import Budget
from wasm_runner.workspace.file_errors import FileOpError
from wasm_runner.workspace.files import WorkspaceFiles
from wasm_runner.workspace.globs import Glob
from wasm_runner_protocol.egress import EgressPolicy
from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_protocol.guest import language_for_path
from wasm_runner_protocol.tools import (
    ApprovalDecided,
    ApprovalDecision,
    RunStarted,
    ToolAnswer,
    ToolAnswered,
    ToolCall,
    ToolList,
    ToolSpec,
)
from wasm_runner_protocol.wire import ExecBody, OneShotBody, OneShotResult, OutputFile, ProcessBody
from wasm_runner_server.errors import ApiError, from_file_error, not_found
from wasm_runner_server.http.bodies import json_response, read_json, wants_event_stream
from wasm_runner_server.http.file_work import request_budget, run_file_work
from wasm_runner_server.http.openapi import operation
from wasm_runner_server.http.policy import POLICY
from wasm_runner_server.http.routes.packages import allow_guest_installs
from wasm_runner_server.http.streaming import respond
from wasm_runner_server.sessions.egress import body_policy, check_shape
from wasm_runner_server.sessions.manager import ONESHOT_PREFIX
from wasm_runner_server.sessions.profile_tools import with_approvals
from wasm_runner_server.sessions.service import SERVICE, Service
from wasm_runner_server.sessions.tool_sets import run_allowlist

log = logging.getLogger("wasm_runner.server")
routes = web.RouteTableDef()

_EXEC_ERRORS = (402, 403, 404, 409, 413, 415, 429, 503)


def _code_or_path(body: ExecBody | OneShotBody, files_dir: Path, service: Service) -> tuple[str | None, str | None]:
    """The code to run and the language its file name implies."""
    if body.path is None:
        if body.code is None and getattr(body, "command", None) is None:
            raise ApiError(422, ErrorCode.VALIDATION_ERROR, "nothing to run: give code or path",
                           'e.g. {"code": "print(1 + 1)"}')
        return body.code, None
    if body.code is not None:
        raise ApiError(422, ErrorCode.VALIDATION_ERROR, "give either code or path, not both")
    code = WorkspaceFiles(files_dir).read_text(body.path, max_bytes=service.config.server.max_read_bytes)
    return code, language_for_path(body.path)


@routes.post("/v1/sessions/{id}/exec")
@operation(summary="Run code in the session (its kernel keeps variables; files persist)", tag="execution",
           body=ExecBody, response=ExecResult, stream=True, errors=_EXEC_ERRORS,
           description="Calls to one session run one at a time, in order. After idle hibernation or a "
                       "restart the kernel is rebuilt and the result says kernel_restarted.")
async def exec_in_session(request: web.Request) -> web.StreamResponse:
    service = request.app[SERVICE]
    live = service.sessions.get(request.match_info["id"])
    body = await read_json(request, ExecBody)
    profile_name, profile = service.execution.profile(body.profile or live.row.profile)
    runner, session = service.sessions.core(live, profile)
    allow_guest_installs(service, request, live, runner, session)  # for the guest's own `sandbox.install`
    code, path_language = _code_or_path(body, session.workspace.files, service)
    exec_request = service.execution.request(
        profile, language=body.language, code=code, command=None, stdin=body.stdin, env=body.env,
        limits=body.limits, fresh=body.fresh, id=body.id, path_language=path_language,
        harness=body.harness, tests=body.tests, typecheck=body.typecheck, typecheck_timeout_s=body.typecheck_timeout_s,
        network=service.sessions.call_egress(live, body_policy(body.egress)))
    configured = await mcp_tools(service, profile_name, profile)
    streams: list[OutputListener] = []  # the run's event stream, once it starts

    def emit(name: str, data: bytes) -> None:
        streams[0](name, data)  # type: ignore[arg-type]  # code mode's events share the output stream

    allowed = run_allowlist(profile, live.row.tools)
    tools = configured + (caller_tools(request, service, live.row.id, allowed, profile, body.tools, emit,
                                       what="the session's profile and tool set", instead="or use another session")
                          if body.tools else [])
    # the rules go with this call: another call of the session may run under another profile
    tool_policy = ToolPolicy(call_timeout_s=profile.tool_call_timeout_s, allow=allowed,
                             audit=tool_audit(request, live.row.id)) if tools else None
    # approvals are asked on the stream: without one, calls needing approval are refused (ToolRun)
    approver = (service.approvals.approver(live.row.id, emit)
                if wants_event_stream(request) and any(t.spec.approval for t in tools) else None)

    def run(listener: OutputListener | None, started: Callable[[], None] | None) -> Awaitable[ExecResult]:
        if listener is not None:
            streams.append(listener)
        return service.sessions.run(live, runner, exec_request, mode="session", listener=listener, on_start=started,
                                    tools=tools or None, on_approval=approver, tool_policy=tool_policy)

    return await respond(request, run)


def caller_tools(request: web.Request, service: Service, scope: str, allowed: frozenset[str] | None,
                 profile: Profile, specs: list[ToolSpec], emit: Callable[[str, bytes], None], *,
                 what: str, instead: str) -> list[Tool]:
    """The run's caller-side tools, their calls sent with `emit` and answered under `scope` (the run's tool
    policy audits each decided call); 422 when the request does not stream or a spec is not a tool's, 403
    when `allowed` (`what` allows) lacks one of them (it also holds in the core, for every call)."""
    if not wants_event_stream(request):
        raise ApiError(422, ErrorCode.VALIDATION_ERROR, "caller-side tools need the event stream: each call arrives "
                       "as a tool_call event", "send Accept: text/event-stream (the typed client does so for tools=)")
    refused = sorted({spec.name for spec in specs} - allowed) if allowed is not None else []
    if refused:
        raise ApiError(403, ErrorCode.TOOL_NOT_ALLOWED,
                       f"{what} do not allow the tools {', '.join(refused)}",
                       f"offer only tools they allow ({', '.join(sorted(allowed or ())) or 'none'}), {instead}")
    try:
        tools = service.caller_tools.tools(scope, specs, emit)
    except ValueError as exc:
        raise ApiError(422, ErrorCode.VALIDATION_ERROR, str(exc)) from None
    return with_approvals(tools, profile)


def tool_audit(request: web.Request, session_id: str) -> Callable[[ToolCall], None]:
    """Records each decided tool call of the session's run in the audit log (any thread)."""
    policy = request.app[POLICY]
    return lambda call: policy.on_tool_call(request, session_id, call)


async def mcp_tools(service: Service, name: str, profile: Profile) -> list[Tool]:
    """The tools of the profile's MCP servers; 503 when one cannot be started or reached."""
    try:
        return await service.profile_tools.tools(name, profile)
    except Exception as exc:  # noqa: BLE001 - the caller gets a status, the log the details
        log.warning("an MCP tool source failed", exc_info=True, extra={"event": "mcp_tools_failed", "profile": name})
        raise ApiError(503, ErrorCode.UNAVAILABLE, f"the profile's MCP tool servers are unavailable: {exc}",
                       "retry later, or ask the operator to check the profile's mcp_servers") from None


@routes.get("/v1/sessions/{id}/tools")
@operation(summary="The tools the session's code may call from its profile, and their generated API",
           tag="execution", response=ToolList, errors=(404, 503),
           description="The tools of the profile's MCP servers (within its allowlist), with a Python stub module "
                       "and a TypeScript declaration to show a model; caller-side tools are the caller's own.")
async def session_tools(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    live = service.sessions.get(request.match_info["id"])
    name, profile = service.execution.profile(live.row.profile)
    registry = ToolRegistry(await mcp_tools(service, name, profile)).narrowed(run_allowlist(profile, live.row.tools))
    specs = registry.specs()
    return json_response(ToolList(tools=specs, python=python_stubs(specs), typescript=typescript_stubs(specs)))


@routes.post("/v1/sessions/{id}/tool-calls/{call_id}")
@operation(summary="Answer a tool call of the session's running code (code mode, caller-side tools)",
           tag="execution", body=ToolAnswer, response=ToolAnswered, errors=(404, 422),
           description="The call arrived as a tool_call event on the exec stream; its code waits for this "
                       "answer until the call's timeout or the run's end (then 404 tool_call_not_found).")
async def answer_tool_call(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    live = service.sessions.get(request.match_info["id"])
    body = await read_json(request, ToolAnswer)
    call_id = request.match_info["call_id"]
    return _answered(service.caller_tools.answer(live.row.id, call_id, body), call_id)


@routes.post("/v1/sessions/{id}/approvals/{approval_id}")
@operation(summary="Approve or refuse a tool call of the session's running code (code mode)",
           tag="execution", body=ApprovalDecision, response=ApprovalDecided, errors=(404, 422),
           description="The call arrived as an approval_required event on the exec stream; it waits for this "
                       "decision until the call's timeout or the run's end (then 404 approval_not_found, and "
                       "the call is refused). Only the session's owner reaches this route.")
async def decide_approval(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    live = service.sessions.get(request.match_info["id"])
    body = await read_json(request, ApprovalDecision)
    approval_id = request.match_info["approval_id"]
    return _decided(service.approvals.decide(live.row.id, approval_id, body.approve, body.reason), approval_id)


@routes.post("/v1/sessions/{id}/process")
@operation(summary="Run a program natively (bubblewrap) in the session's workspace", tag="execution",
           body=ProcessBody, response=ExecResult, stream=True, errors=_EXEC_ERRORS)
async def process_in_session(request: web.Request) -> web.StreamResponse:
    service = request.app[SERVICE]
    live = service.sessions.get(request.match_info["id"])
    body = await read_json(request, ProcessBody)
    _, profile = service.execution.profile(body.profile or live.row.profile)
    runner, _ = service.sessions.core(live, profile)
    exec_request = service.execution.request(
        profile, language="bash", code=None, command=body.command, stdin=body.stdin, env=body.env,
        limits=body.limits, fresh=True, id=body.id, network=service.sessions.call_egress(live, body_policy(body.egress)))
    return await respond(request, lambda listener, started: service.sessions.run(
        live, runner, exec_request, mode="process", listener=listener, on_start=started))


@routes.post("/v1/exec")
@operation(summary="Run once in a throwaway workspace: files in, output files back", tag="execution",
           body=OneShotBody, response=OneShotResult, stream=True, errors=_EXEC_ERRORS)
async def exec_one_shot(request: web.Request) -> web.StreamResponse:
    service = request.app[SERVICE]
    body = await read_json(request, OneShotBody)
    profile_name, profile = service.execution.profile(body.profile)
    if body.command is not None and (body.code is not None or body.path is not None):
        raise ApiError(422, ErrorCode.VALIDATION_ERROR, "give code, path or command, not several")
    for pattern in body.output_files:  # an invalid pattern is refused before anything runs
        Glob(pattern, what="output path")
    if body.tools and body.command is not None:
        raise ApiError(422, ErrorCode.VALIDATION_ERROR, "caller-side tools are for code: a command cannot call them",
                       "give code or path with tools=, or drop tools=")
    runner = service.pool.get(profile)
    configured = await mcp_tools(service, profile_name, profile) if body.command is None else []
    if (not body.files and not body.output_files and body.path is None and not configured
            and not body.tools):  # the core's one-shot path
        if body.code is None and body.command is None:
            raise ApiError(422, ErrorCode.VALIDATION_ERROR, "nothing to run: give code, path or command",
                           'e.g. {"code": "print(1 + 1)"}')
        exec_request = service.execution.request(
            profile, language=body.language, code=body.code, command=body.command, stdin=body.stdin,
            env=body.env, limits=body.limits, fresh=True, id=body.id, typecheck=body.typecheck,
            typecheck_timeout_s=body.typecheck_timeout_s, network=one_shot_egress(body))
        service.execution.check_provider(runner, exec_request)

        async def run_plain(listener, started) -> OneShotResult:
            result = await service.execution.run(runner, exec_request, mode="oneshot", listener=listener,
                                                 on_start=started)
            return OneShotResult(**msgspec.structs.asdict(result))

        return await respond(request, run_plain)
    session = runner.session(ONESHOT_PREFIX + uuid.uuid4().hex)
    files = WorkspaceFiles(session.workspace.files)
    try:
        limits = service.execution.limits(profile, body.limits)
        if body.files:
            session.workspace.ensure()
            await asyncio.to_thread(_write_inputs, files, body.files, limits.disk_bytes)
        code, path_language = _code_or_path(body, session.workspace.files, service)
        exec_request = service.execution.request(
            profile, language=body.language, code=code, command=body.command, stdin=body.stdin, env=body.env,
            limits=body.limits, fresh=True, id=body.id, path_language=path_language, typecheck=body.typecheck,
            typecheck_timeout_s=body.typecheck_timeout_s, network=one_shot_egress(body))
        service.execution.check_provider(runner, exec_request)
        # the profile's MCP tools and the caller's own, audited under this run's throwaway session; the
        # caller's answers and decisions come back under its id, from its workspace only
        allowed = frozenset(profile.tools) if profile.tools is not None else None
        scope = one_shot_scope(session.id, request.app[POLICY].caller_workspace(request))
        streams: list[OutputListener] = []

        def emit(name: str, data: bytes) -> None:
            streams[0](name, data)  # type: ignore[arg-type]  # code mode's events share the output stream

        tools = configured + (caller_tools(request, service, scope, allowed, profile, body.tools, emit,
                                           what="the profile", instead="or use another profile")
                              if body.tools else [])
        tool_policy = ToolPolicy(call_timeout_s=profile.tool_call_timeout_s, allow=allowed,
                                 audit=tool_audit(request, session.id)) if tools else None
        approver = (service.approvals.approver(scope, emit)
                    if wants_event_stream(request) and any(t.spec.approval for t in tools) else None)
        announce = body.tools is not None or approver is not None

        async def run(listener, started) -> OneShotResult:
            if listener is not None:
                streams.append(listener)
                if announce:  # before any call: the caller answers under this id
                    listener("run", msgspec.json.encode(RunStarted(run_id=session.id)))
            result = await service.execution.run(session, exec_request, mode="oneshot", listener=listener,
                                                 on_start=started, tools=tools or None, on_approval=approver,
                                                 tool_policy=tool_policy)
            outputs, missing = await run_file_work(request_budget(service), _collect_outputs, files, body.output_files,
                                                   service.config.server.max_output_files_bytes)
            return OneShotResult(**msgspec.structs.asdict(result), output_files=outputs, missing_outputs=missing)

        return await respond(request, run)
    finally:
        service.sessions.spawn_blocking(session.destroy)


def one_shot_scope(run_id: str, workspace: str) -> str:
    """Under what a one-shot run's pending calls wait: its id within the caller's workspace, so that only a
    key of that workspace answers them."""
    return f"{workspace}/{run_id}"


@routes.post("/v1/exec/{run_id}/tool-calls/{call_id}")
@operation(summary="Answer a tool call of a one-shot run (code mode, caller-side tools)",
           tag="execution", body=ToolAnswer, response=ToolAnswered, errors=(404, 422),
           description="The run's stream announced its id in its `run` event and the call in a tool_call event; "
                       "the code waits for this answer until the call's timeout or the run's end (then 404 "
                       "tool_call_not_found). Only a key of the run's workspace answers it.")
async def answer_one_shot_tool_call(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    body = await read_json(request, ToolAnswer)
    scope = one_shot_scope(request.match_info["run_id"], request.app[POLICY].caller_workspace(request))
    call_id = request.match_info["call_id"]
    return _answered(service.caller_tools.answer(scope, call_id, body), call_id)


@routes.post("/v1/exec/{run_id}/approvals/{approval_id}")
@operation(summary="Approve or refuse a tool call of a one-shot run (code mode)",
           tag="execution", body=ApprovalDecision, response=ApprovalDecided, errors=(404, 422),
           description="The run's stream announced its id in its `run` event and the call in an approval_required "
                       "event; it waits for this decision until the call's timeout or the run's end (then 404 "
                       "approval_not_found, and the call is refused). Only a key of the run's workspace decides.")
async def decide_one_shot_approval(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    body = await read_json(request, ApprovalDecision)
    scope = one_shot_scope(request.match_info["run_id"], request.app[POLICY].caller_workspace(request))
    approval_id = request.match_info["approval_id"]
    return _decided(service.approvals.decide(scope, approval_id, body.approve, body.reason), approval_id)


def one_shot_egress(body: OneShotBody) -> EgressPolicy | None:
    """The run's own policy when it names one (its shape checked: 422); the profile then refuses a
    wider one (403)."""
    policy = body_policy(body.egress)
    if policy is not None:
        check_shape(policy)
    return policy


def _write_inputs(files: WorkspaceFiles, inputs: dict, quota: int) -> None:
    total = 0
    for path, content in inputs.items():
        data = content.encode("utf-8") if isinstance(content, str) else content.base64
        total += len(data)
        if total > quota:
            raise ApiError(413, ErrorCode.QUOTA_EXCEEDED, f"the input files exceed the workspace quota of {quota} bytes",
                           "send fewer or smaller files, or raise limits.disk_bytes")
        try:
            files.write_bytes(path, data)
        except FileOpError as exc:
            raise from_file_error(exc) from None


def _collect_outputs(files: WorkspaceFiles, patterns: list[str], room: int, *,
                     budget: Budget) -> tuple[dict[str, OutputFile], list[str]]:
    outputs: dict[str, OutputFile] = {}
    missing: list[str] = []
    for pattern in patterns:
        try:
            matches = [e for e in files.glob(pattern, limit=1000, budget=budget).entries if e.type == "file"]
        except FileOpError:  # not there, or past the budget: reported as missing
            matches = []
        if not matches:
            missing.append(pattern)
        for entry in matches:
            if entry.path in outputs:
                continue
            if entry.size > room:
                outputs[entry.path] = OutputFile(size=entry.size, encoding="none",
                                                 omitted="over the size budget for output files")
                continue
            try:
                data = files.read_bytes(entry.path, max_bytes=room)
            except FileOpError:
                continue
            room -= len(data)
            try:
                if b"\x00" in data:
                    raise UnicodeDecodeError("utf-8", data, 0, 1, "binary")
                outputs[entry.path] = OutputFile(size=len(data), encoding="utf-8", content=data.decode("utf-8"))
            except UnicodeDecodeError:
                outputs[entry.path] = OutputFile(size=len(data), encoding="base64",
                                                 content=base64.b64encode(data).decode("ascii"))
    return outputs, missing


def _answered(taken: bool, call_id: str) -> web.Response:
    """A caller's answer to a tool call: taken, or 404 when the call no longer waits."""
    if not taken:
        raise not_found(ErrorCode.TOOL_CALL_NOT_FOUND, call_id[:64],
                        "the call ended (answered, timed out, or its run is over); answer each call once, in time")
    return json_response(ToolAnswered())


def _decided(taken: bool, approval_id: str) -> web.Response:
    """A decision on a call waiting for approval: taken, or 404 when the call no longer waits."""
    if not taken:
        raise not_found(ErrorCode.APPROVAL_NOT_FOUND, approval_id[:64],
                        "the call no longer waits (decided, timed out, or its run is over); decide each call once, "
                        "within its timeout_s")
    return json_response(ApprovalDecided())
