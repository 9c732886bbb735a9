"""The code interpreter's `/execute` (NDJSON) and `/contexts`, on the session's kernels.

`run_code` runs in the sandbox's session through the API's execution call, streamed: stdout and
stderr lines as the program writes them, then its rich outputs (figures as PNG, HTML, text) as
results, the last expression as the main result, and an uncaught exception as the error. Python runs
with `[e2b] code_profile` (python-data: pandas, matplotlib); JavaScript and TypeScript with their
WebAssembly profiles; bash with the bash profile. A context is a language's kernel of the sandbox:
one per language, sharing the sandbox's files, as E2B's default contexts do.
"""

from __future__ import annotations

import json
import time
from typing import Any

from aiohttp import web

from wasm_runner_server.e2b.connect_rpc import SESSION_NOT_FOUND, RpcError, sandbox_not_found
from wasm_runner_server.e2b.paths import HOME, relative
from wasm_runner_server.e2b.sandbox import SandboxCall
from wasm_runner_server.e2b.upstream import SETTINGS, UpstreamError, events, session_path

routes = web.RouteTableDef()

LANGUAGES = {"python": "python", "py": "python", "javascript": "javascript", "js": "javascript",
             "typescript": "typescript", "ts": "typescript", "bash": "bash", "sh": "bash"}
PROFILES = {"javascript": "javascript", "typescript": "typescript", "bash": "bash"}


def _text_error(status: int, message: str) -> web.Response:
    return web.Response(status=status, text=message, content_type="text/plain")


def _language(name: Any) -> str:
    language = LANGUAGES.get(str(name or "python").lower())
    if language is None:
        raise RpcError("invalid_argument", f"language {name!r} is not supported here; use one of "
                                           f"{', '.join(sorted(set(LANGUAGES.values())))}")
    return language


def _line(kind: str, **fields: Any) -> bytes:
    return json.dumps({"type": kind, **fields}, separators=(",", ":")).encode() + b"\n"


def results_of(result: dict[str, Any]) -> list[dict[str, Any]]:
    """E2B results for an execution's rich outputs and last expression (one main result, not two)."""
    value = result.get("value")
    found: list[dict[str, Any]] = []
    main_seen = False
    for output in result.get("outputs", []):
        kind, data, plain = output.get("type"), output.get("data"), output.get("plain")
        item: dict[str, Any] = {"is_main_result": False}
        if kind == "image/png":
            item["png"] = data
        elif kind == "text/html":
            item["html"] = data
        else:
            item["text"] = data
        if plain is not None:
            item["text"] = plain
        if value is not None and not main_seen and item.get("text") == value:
            item["is_main_result"] = main_seen = True
        found.append(item)
    if value is not None and not main_seen:
        found.append({"text": value, "is_main_result": True})
    return found


def error_of(result: dict[str, Any]) -> dict[str, Any] | None:
    error = result.get("error")
    if error:
        return {"name": error.get("type", "Error"), "value": error.get("message", ""),
                "traceback": error.get("traceback", "")}
    if result.get("limit"):
        return {"name": "LimitExceeded", "value": f"the run hit its {result['limit']} limit", "traceback": ""}
    if result.get("exit_code"):
        return {"name": "ExitCode", "value": f"exited with code {result['exit_code']}", "traceback": ""}
    return None


@routes.post("/sandbox/execute")
async def execute(request: web.Request) -> web.StreamResponse:
    settings = request.config_dict[SETTINGS]
    try:
        call = SandboxCall(request)
        body = await request.json()
        if not isinstance(body, dict) or not isinstance(body.get("code"), str):
            raise RpcError("invalid_argument", 'give the code to run: {"code": "..."}')
        language = _language(body.get("context_id") or body.get("language"))
    except RpcError as exc:
        return _text_error(400, exc.message)
    except ValueError:
        return _text_error(400, "the body is not valid JSON")
    envs = body.get("env_vars") or {}
    if not isinstance(envs, dict) or not all(isinstance(v, str) for v in envs.values()):
        return _text_error(400, "env_vars must map names to strings")
    exec_body = {"code": body["code"], "language": language,
                 "profile": settings.code_profile if language == "python" else PROFILES[language], "env": envs}
    response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
    try:
        async with call.upstream.stream("POST", session_path(call.sandbox_id, "exec"), json_body=exec_body,
                                        headers={"Accept": "text/event-stream"}) as upstream:
            await response.prepare(request)
            async for name, data in events(upstream):
                payload = json.loads(data)
                if name in ("stdout", "stderr"):
                    await response.write(_line(name, text=payload["text"], timestamp=time.time_ns()))
                elif name == "result":
                    for item in results_of(payload):
                        await response.write(_line("result", **item))
                    error = error_of(payload)
                    if error is not None:
                        await response.write(_line("error", **error))
                elif name == "error":
                    detail = payload.get("error", {})
                    await response.write(_line("error", name=detail.get("code", "Error"),
                                               value=detail.get("message", ""), traceback=""))
    except UpstreamError as exc:
        if response.prepared:
            await response.write(_line("error", name=exc.code, value=exc.message, traceback=""))
        else:
            if exc.code == SESSION_NOT_FOUND:  # as E2B's proxy answers for a sandbox that is gone
                return _text_error(502, sandbox_not_found(exc))
            return _text_error(400 if exc.status in (409, 422) else exc.status, exc.message)
    except ConnectionResetError:
        return response
    await response.write_eof()
    return response


def _context(language: str) -> dict[str, str]:
    return {"id": language, "language": language, "cwd": HOME}


@routes.post("/sandbox/contexts")
async def create_context(request: web.Request) -> web.Response:
    try:
        body = await request.json() if request.can_read_body else {}
        if not isinstance(body, dict):
            raise RpcError("invalid_argument", "the body must be a JSON object")
        language = _language(body.get("language"))
        cwd = body.get("cwd")
        if cwd and relative(str(cwd), what="cwd"):
            raise RpcError("invalid_argument", f"a context's working directory is {HOME} here")
    except RpcError as exc:
        return _text_error(400, exc.message)
    except ValueError:
        return _text_error(400, "the body is not valid JSON")
    return web.json_response(_context(language))


@routes.get("/sandbox/contexts")
async def list_contexts(request: web.Request) -> web.Response:
    return web.json_response([_context("python")])


@routes.post("/sandbox/contexts/{context_id}/restart")
async def restart_context(request: web.Request) -> web.Response:
    return _text_error(501, "restarting a context is not supported here: a context is its language's kernel of "
                            "the sandbox; create another sandbox for a clean one")


@routes.delete("/sandbox/contexts/{context_id}")
async def remove_context(request: web.Request) -> web.Response:
    return _text_error(501, "removing a context is not supported here: a context is its language's kernel of "
                            "the sandbox, which lives as long as the sandbox")
