"""MCP over HTTP behind the service's API keys: the MCP request's key is the tool calls' key."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest_asyncio
from mcp_connect import HttpService, connect_http, connect_stdio, start_http_service

from wasm_runner_server.security.tenants import TenantStore


@pytest_asyncio.fixture
async def keyed(tmp_path: Path):
    data_dir = tmp_path / "keyed"
    data_dir.mkdir()
    tenants = TenantStore.in_data_dir(data_dir)
    key_a, _ = tenants.create_key("team-a", "agent-a", "member")
    key_b, _ = tenants.create_key("team-b", "agent-b", "member")
    tenants.close()
    service = await start_http_service(data_dir, auth={"enabled": True})
    try:
        yield service, key_a, key_b
    finally:
        await service.server.close()


async def test_mcp_needs_an_api_key_like_the_http_api(keyed) -> None:
    service, _, _ = keyed
    request = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
               "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
    async with aiohttp.ClientSession() as http:
        async with http.post(service.mcp_url, json=request,
                             headers={"Accept": "application/json, text/event-stream"}) as response:
            assert response.status == 401
            assert (await response.json())["error"]["code"] == "unauthorized"
        async with http.post(service.mcp_url, json=request, headers={
                "Authorization": "Bearer not-a-key", "Accept": "application/json, text/event-stream"}) as response:
            assert response.status == 401


async def test_tool_calls_act_with_the_callers_key_and_workspace(keyed) -> None:
    service: HttpService = keyed[0]
    key_a, key_b = keyed[1], keyed[2]
    async with connect_http(service, {"Authorization": f"Bearer {key_a}"}) as a, \
            connect_http(service, {"Authorization": f"Bearer {key_b}"}) as b:
        first = await a.call_tool("sandbox_execute_code", {"code": "token = 'a-only'"})
        assert not first.is_error, first.content
        sid = first.structured_content["session"]
        # the tool call reached the HTTP API with the MCP request's key
        assert (f"/v1/sessions/{sid}/exec", f"Bearer {key_a}") in service.seen

        stolen = await b.call_tool("sandbox_execute_code", {"code": "token", "session": sid})
        assert stolen.is_error
        assert stolen.structured_content["error"]["code"] == "session_not_found"  # as over HTTP: no such session
        listed = await b.call_tool("session_list", {})
        assert sid not in {s["id"] for s in listed.structured_content["sessions"]}
        mine = await a.call_tool("session_list", {})
        assert sid in {s["id"] for s in mine.structured_content["sessions"]}
        again = await a.call_tool("sandbox_execute_code", {"code": "token", "session": sid})
        assert again.structured_content["value"] == "'a-only'"


async def test_stdio_can_front_a_remote_server_with_an_api_key(keyed, tmp_path: Path) -> None:

    service, key_a, _ = keyed
    base = str(service.server.make_url("/"))
    async with connect_stdio(tmp_path, "--url", base, "--api-key", key_a) as session:
        result = await session.call_tool("sandbox_execute_code", {"code": "print('remote')"})
        assert not result.is_error, result.content
        assert result.structured_content["stdout"] == "remote\n"
    sid = result.structured_content["session"]
    assert (f"/v1/sessions/{sid}/exec", f"Bearer {key_a}") in service.seen
