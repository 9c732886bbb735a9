"""The background-process MCP tools (start_process, process_output, send_input, stop_process, preview_url)
through the official client, on native sandboxes."""

from __future__ import annotations

import asyncio
import os
import time

import httpx
import mcp_types as types
import pytest
from host_processes import host_processes_running
from mcp_connect import Connect, HttpService, connect_http
from preview_hosts import on_loopback

from wasm_runner.providers.native.bwrap import find_bwrap, probe
from wasm_runner_protocol.processes import PreviewLinkBody, ProcessOutputQuery, ProcessStart, ProcessStdin
from wasm_runner_server.mcp.catalog import TOOLS
from wasm_runner_server.mcp.tools import input_schema

_path = find_bwrap()
SANDBOX_PROBLEM = "bubblewrap is not installed (run scripts/install-native.sh)" if _path is None else probe(_path)
pytestmark = [
    pytest.mark.skipif(SANDBOX_PROBLEM is not None, reason=f"no usable sandbox: {SANDBOX_PROBLEM}"),
    pytest.mark.skipif(os.geteuid() != 0, reason="preview ports enter the sandbox's network namespace (root service)"),
]

READER = "import sys\nfor line in sys.stdin:\n    print('got', line.strip(), flush=True)\n"


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


def ok(result: types.CallToolResult) -> types.CallToolResult:
    assert not result.is_error, text_of(result)
    return result


def test_the_tool_schemas_are_the_http_wires_plus_the_process_and_session() -> None:
    schemas = {tool.name: input_schema(tool.args) for tool in TOOLS}
    for name, wire in (("start_process", ProcessStart), ("process_output", ProcessOutputQuery),
                       ("send_input", ProcessStdin), ("preview_url", PreviewLinkBody)):
        assert set(wire.__struct_fields__) <= set(schemas[name]["properties"]), name
        assert "session" in schemas[name]["properties"]
    for name in ("process_output", "send_input", "stop_process"):
        assert "process" in schemas[name]["required"], name
    assert schemas["preview_url"]["properties"]["port"]["maximum"] == 65535


async def test_output_by_offset_input_echoed_and_stop_kills_it(connect: Connect) -> None:
    marker = "4321.125"
    async with connect() as session:
        started = ok(await session.call_tool("start_process", {"code": READER, "language": "python"}))
        pid = started.structured_content["id"]
        assert f"process_output(process={pid!r})" in text_of(started)
        sent = ok(await session.call_tool("send_input", {"process": pid, "data": "one\n"}))
        assert sent.structured_content == {"written": 4}
        first = ok(await session.call_tool("process_output", {"process": pid, "wait_s": 10}))
        assert first.structured_content["data"] == "got one\n" and first.structured_content["next_offset"] == 8
        assert "read on with offset=8" in text_of(first)
        ok(await session.call_tool("send_input", {"process": pid, "data": "two\n"}))
        second = ok(await session.call_tool("process_output", {"process": pid, "offset": 8, "wait_s": 10}))
        assert second.structured_content["offset"] == 8 and second.structured_content["data"] == "got two\n"
        stopped = ok(await session.call_tool("stop_process", {"process": pid}))
        assert stopped.structured_content["state"] == "killed" and f"process {pid}" in text_of(stopped)
        late = await session.call_tool("send_input", {"process": pid, "data": "late\n"})
        assert late.is_error and "process_not_running" in text_of(late)
        tree = ok(await session.call_tool("start_process", {"command": ["bash", "-c", f"sleep {marker} & sleep {marker}"]}))
        deadline = time.monotonic() + 10
        while len(host_processes_running(["sleep", marker])) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert len(host_processes_running(["sleep", marker])) == 2
        ok(await session.call_tool("stop_process", {"process": tree.structured_content["id"]}))
        assert host_processes_running(["sleep", marker]) == []  # the whole tree, before the answer
        missing = await session.call_tool("stop_process", {"process": "p99"})
        assert missing.is_error and "process_not_found" in text_of(missing)


async def test_a_preview_url_fetches_the_dev_servers_page(http_service: HttpService) -> None:
    async with connect_http(http_service) as session:
        ok(await session.call_tool("write_file", {"path": "site/index.html", "content": "<h1>from mcp</h1>"}))
        ok(await session.call_tool("start_process", {
            "command": ["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"], "cwd": "site"}))
        result = ok(await session.call_tool("preview_url", {"port": 8000, "expires_in": 120}))
        link = result.structured_content
        assert link["port"] == 8000 and link["url"] in text_of(result) and link["url"].startswith("http://8000-")
    url, host = on_loopback(link["url"] + "index.html")
    async with httpx.AsyncClient(headers=host) as http:
        deadline = time.monotonic() + 10
        while (page := await http.get(url)).status_code == 502 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # until the server listens
        assert page.status_code == 200 and page.text == "<h1>from mcp</h1>"
