"""wasm-runner over MCP (the official `mcp` SDK): the HTTP API's sessions, executions and files as MCP tools.

This module builds the MCP server; the package's other modules hold its parts: `arguments`
(the tools' input and output Structs), `tools` (`McpTools`, the implementation), `catalog` (the
tools listed, with what a model reads), `describe` and `rendering` (results as text, bounded),
`approvals`, `processes`, and the two transports. Both transports share one implementation,
`McpTools`, whose every tool is a call of the HTTP API through wasm_runner_client.AsyncClient:

- streamable HTTP (`streamable.py`): `mount_mcp(app)` serves /mcp on the HTTP service itself. The route goes
  through the app's middlewares (the same API keys guard it), and each tool call forwards
  the MCP request's Authorization header to the HTTP API of the same server, so the key's
  workspace, session ownership, quotas, rate limit and audit apply exactly as over HTTP;
- stdio: `wasm-runner mcp` (mcp/stdio.py) serves one connection on stdin/stdout,
  calling a service it runs in-process on a private Unix socket, or a remote one (--url,
  with an API key).

Sessions: one MCP connection is one wasm-runner session by default, created on first
use (again if it expires), so files and kernels persist across tool calls. Every tool
takes an optional `session` naming another session of the caller's workspace. Over
stdio the connection is the process; over HTTP it is the MCP session (Mcp-Session-Id)
with the caller's credential; a stateless request (no MCP session) gets a new session
per call, whose id the result names. An MCP session belongs to the key that opened it:
with another key its id answers 404, as an unknown session does.

Tool input schemas are generated with msgspec from Structs derived from the HTTP wire's
own (wasm_runner_protocol/wire.py): `ExecuteCodeArgs` is `ExecBody` plus `session`, `harness` and
`tests`, and so on; the HTTP bodies are built from the same fields. Arguments decode
with msgspec as HTTP bodies do. Failures are MCP tool errors (isError) whose text is the
HTTP error's code, message and hint and whose structured content is the HTTP error body.
Images the code wrote (PNG, JPEG, SVG, GIF, WebP) come back as MCP image content.
"""

from __future__ import annotations

import logging
from typing import Any

import mcp_types as types
import msgspec
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

from wasm_runner_client.errors import ApiError as ClientApiError
from wasm_runner_client.errors import TransportError
from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_server.errors import from_validation
from wasm_runner_server.mcp.approvals import asker
from wasm_runner_server.mcp.catalog import INSTRUCTIONS, TOOLS
from wasm_runner_server.mcp.rendering import bound_content, bound_structured
from wasm_runner_server.mcp.tools import STDIO, Caller, McpTools, input_schema, text_content

log = logging.getLogger("wasm_runner.server.mcp")

SERVER_NAME = "wasm-runner"


def _caller(ctx: ServerRequestContext[Any, Any]) -> Caller:
    request = ctx.request
    headers = getattr(request, "headers", None) if request is not None else None
    if headers is None:
        return Caller(STDIO, ask=asker(ctx.session, ctx.request_id))  # stdio: the process serves one connection
    session = headers.get("mcp-session-id")
    return Caller(f"http:{session}" if session else None, headers, asker(ctx.session, ctx.request_id))


def tool_error(code: str, message: str, hint: str | None = None) -> types.CallToolResult:
    """An MCP tool error carrying what the HTTP API answers for the same failure (its error body)."""
    text = f"{code}: {message}"
    if hint:
        text += f"\nhint: {hint}"
    body = {"error": {"code": code, "message": message, "hint": hint}}
    return types.CallToolResult(content=[text_content(text)], structured_content=body, is_error=True)


def build_server(tools: McpTools, *, version: str = "") -> Server[Any]:
    """The MCP server (low-level SDK server, schemas from msgspec) over `tools`."""
    by_name = {tool.name: tool for tool in TOOLS}
    schemas = {tool.name: input_schema(tool.args) for tool in TOOLS}
    listed = [
        types.Tool(
            name=tool.name, title=tool.title, description=tool.described(tools.max_result_chars),
            input_schema=schemas[tool.name],
            output_schema=input_schema(tool.output) if tool.output is not None else None,
            annotations=types.ToolAnnotations(title=tool.title, read_only_hint=tool.read_only,
                                              destructive_hint=tool.destructive if not tool.read_only else None,
                                              open_world_hint=False),
        )
        for tool in TOOLS
    ]
    decoders = {tool.name: tool.args for tool in TOOLS}

    async def list_tools(ctx: ServerRequestContext[Any, Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def call_tool(ctx: ServerRequestContext[Any, Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        tool = by_name.get(params.name)
        if tool is None:
            return tool_error(ErrorCode.UNKNOWN_TOOL, f"no tool named {params.name!r}", f"available: {', '.join(by_name)}")
        try:
            args = msgspec.convert(params.arguments or {}, decoders[tool.name], strict=False)
            content, structured = await tool.run(tools, _caller(ctx), args)
        except ClientApiError as exc:
            return tool_error(exc.code, exc.message, exc.hint)
        except TransportError as exc:
            return tool_error(ErrorCode.UNAVAILABLE, f"the HTTP API could not be reached: {exc}", "retry shortly")
        except msgspec.ValidationError as exc:
            error = from_validation(exc)
            return tool_error(error.code, error.message, error.hint)
        except Exception:
            log.exception("MCP tool failed", extra={"event": "mcp_tool_failed", "tool": tool.name})
            return tool_error(ErrorCode.INTERNAL_ERROR, "the server failed to handle this request",
                              "retry; if it persists, report it with the time of the request")
        # The last word on size, for every tool: no result hands a model more than the bound.
        limit = tools.max_result_chars
        return types.CallToolResult(
            content=bound_content(content, limit),
            structured_content=bound_structured(msgspec.to_builtins(structured), limit)
            if structured is not None else None)

    async def read_resource(ctx: ServerRequestContext[Any, Any],
                            params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        try:
            return await tools.read_resource(_caller(ctx), str(params.uri))
        except TransportError as exc:
            raise MCPError(types.INTERNAL_ERROR, f"the HTTP API could not be reached: {exc}") from None

    return Server(SERVER_NAME, version=version, title="wasm-runner",
                  instructions=INSTRUCTIONS.replace("{bound}", f"{tools.max_result_chars:,}"),
                  on_list_tools=list_tools, on_call_tool=call_tool, on_read_resource=read_resource,
                  get_tool_input_schema=lambda name: schemas.get(name))
