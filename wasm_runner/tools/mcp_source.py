"""Tools of an MCP server, called through the official MCP client SDK, the host deciding every call.

`McpTools` connects to one server the operator configured: a stdio command the host runs (its
environment, credentials included, stays with that process: the guest never sees it) or a
streamable-HTTP URL (its headers stay on the host). It lists the server's tools as `Tool`s whose
functions call the server; a run gets them like any other tool (allowlist, budget, schema,
timeout, audit). The client lives on a thread and event loop of its own, entered and left in
one task as the SDK requires; calls from any thread wait for it no longer than `call_timeout_s`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from wasm_runner.errors import WasmRunnerError
from wasm_runner.tools.registry import Tool, from_spec
from wasm_runner_protocol.tools import ToolSpec

__all__ = ["McpToolError", "McpTools", "snake_name"]


class McpToolError(WasmRunnerError, RuntimeError):
    """The MCP server answered the call with an error (`isError`), or could not be reached."""


def snake_name(name: str, prefix: str = "") -> str:
    """An MCP tool's name as a tool name here: `searchIssues` / `search-issues` -> `search_issues`."""
    words = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    words = re.sub(r"[^A-Za-z0-9]+", "_", words).strip("_").lower()
    words = re.sub(r"_+", "_", words)
    if words[:1].isdigit():
        words = "t_" + words
    return f"{prefix}{words}"[:64].rstrip("_")


class McpTools:
    """One MCP server's tools; `start()` connects and lists them, `close()` ends the connection."""

    def __init__(self, *, command: Sequence[str] | None = None, url: str | None = None,
                 env: Mapping[str, str] | None = None, headers: Mapping[str, str] | None = None,
                 prefix: str = "", call_timeout_s: float = 60.0, start_timeout_s: float = 60.0) -> None:
        if (command is None) == (url is None):
            raise ValueError("an MCP tool source has a command (stdio) or a url (streamable HTTP), not both")
        self.command = list(command) if command is not None else None
        self.url = url
        self.env = dict(env or {})
        self.headers = dict(headers or {})
        self.prefix = prefix
        self.call_timeout_s = call_timeout_s
        self.start_timeout_s = start_timeout_s
        self.tools: list[Tool] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session: Any = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> list[Tool]:
        """Connect, list the server's tools, and return them (McpToolError when it cannot)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._main, name="mcp-tool-source", daemon=True)
            self._thread.start()
        if not self._ready.wait(self.start_timeout_s):
            raise McpToolError(f"the MCP server did not answer within {self.start_timeout_s:g} s")
        if self._failure is not None:
            raise McpToolError(f"the MCP server could not be started or reached: {self._failure}") from self._failure
        return self.tools

    def close(self) -> None:
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop ended meanwhile
                loop.call_soon_threadsafe(stop.set)
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> McpTools:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the client's thread -----------------------------------------------------------

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # noqa: BLE001 - reported to start()
            self._failure = exc
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        from mcp import ClientSession

        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with contextlib.AsyncExitStack() as stack:
            read, write = await stack.enter_async_context(self._transport(stack))
            session = await stack.enter_async_context(ClientSession(read, write))
            await session.initialize()
            listed = await session.list_tools()
            self._session = session
            self.tools = [self._tool(t) for t in listed.tools]
            self._ready.set()
            await self._stop.wait()

    def _transport(self, stack: contextlib.AsyncExitStack) -> Any:
        if self.command is not None:
            from mcp import StdioServerParameters, stdio_client

            return stdio_client(StdioServerParameters(command=self.command[0], args=self.command[1:],
                                                      env=self.env or None))
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        assert self.url is not None
        http = httpx2.AsyncClient(headers=self.headers, timeout=httpx2.Timeout(30.0, read=self.call_timeout_s))
        stack.push_async_callback(http.aclose)
        return streamable_http_client(self.url, http_client=http)

    def _tool(self, listed: Any) -> Tool:
        schema = dict(listed.input_schema or {})
        schema.setdefault("type", "object")
        spec = ToolSpec(name=snake_name(listed.name, self.prefix), description=(listed.description or "")[:16384],
                        parameters=schema, returns=listed.output_schema)
        remote = listed.name

        def call(**arguments: Any) -> Any:
            return self._call(remote, arguments)

        def start(**arguments: Any) -> concurrent.futures.Future[Any]:
            return self._start(remote, arguments)

        found = from_spec(spec, call, allow_patterns=True)  # the operator configured this server
        return dataclasses.replace(found, start=start)

    def _start(self, name: str, arguments: dict[str, Any]) -> concurrent.futures.Future[Any]:
        """The call, started on the client's loop (a run waits for the future, bounded as it decides)."""
        loop, session = self._loop, self._session
        if loop is None or session is None or loop.is_closed():
            raise McpToolError("the MCP server's connection is closed")
        return asyncio.run_coroutine_threadsafe(self._answer(session, name, arguments), loop)

    def _call(self, name: str, arguments: dict[str, Any]) -> Any:
        future = self._start(name, arguments)
        try:
            return future.result(self.call_timeout_s)
        except TimeoutError:
            future.cancel()
            raise McpToolError(f"the MCP server did not answer within {self.call_timeout_s:g} s") from None

    @staticmethod
    async def _answer(session: Any, name: str, arguments: dict[str, Any]) -> Any:
        result = await session.call_tool(name, arguments)
        texts = [getattr(block, "text", "") for block in result.content or () if getattr(block, "type", "") == "text"]
        if result.is_error:
            raise McpToolError("\n".join(texts) or "the MCP tool failed")
        if result.structured_content is not None:
            structured = result.structured_content
            # the SDK wraps a non-object result as {"result": value}
            return structured["result"] if set(structured) == {"result"} else structured
        return texts[0] if len(texts) == 1 else "\n".join(texts)
