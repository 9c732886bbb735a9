"""An MCP session id is no credential: only the key that opened the session can use it."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest_asyncio
from mcp_connect import start_http_service

from wasm_runner_server.security.tenants import TenantStore

ACCEPT = "application/json, text/event-stream"
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
LIST_TOOLS = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}


@pytest_asyncio.fixture
async def two_keys(tmp_path: Path):
    data_dir = tmp_path / "keyed"
    data_dir.mkdir()
    tenants = TenantStore.in_data_dir(data_dir)
    key_a, _ = tenants.create_key("team-a", "agent-a", "member")
    key_a2, _ = tenants.create_key("team-a", "agent-a2", "member")
    key_b, _ = tenants.create_key("team-b", "agent-b", "member")
    tenants.close()
    service = await start_http_service(data_dir, auth={"enabled": True})
    try:
        yield service, key_a, key_a2, key_b
    finally:
        await service.server.close()


async def _post(http: aiohttp.ClientSession, url: str, key: str, body: dict, session: str | None = None):
    headers = {"Authorization": f"Bearer {key}", "Accept": ACCEPT, "MCP-Protocol-Version": "2025-06-18"}
    if session is not None:
        headers["Mcp-Session-Id"] = session
    async with http.post(url, json=body, headers=headers) as response:
        return response.status, await response.text(), response.headers.get("mcp-session-id")


async def test_an_mcp_session_answers_404_to_any_key_but_the_one_that_opened_it(two_keys) -> None:
    service, key_a, key_a2, key_b = two_keys
    async with aiohttp.ClientSession() as http:
        status, _, session = await _post(http, service.mcp_url, key_a, INITIALIZE)
        assert status == 200 and session
        notified = await _post(http, service.mcp_url, key_a,
                               {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
        assert notified[0] == 202
        missing = await _post(http, service.mcp_url, key_b, LIST_TOOLS, "0" * 32)
        assert missing[0] == 404
        for other in (key_b, key_a2):  # another workspace's key, and another key of the same workspace
            status, text, _ = await _post(http, service.mcp_url, other, LIST_TOOLS, session)
            assert status == 404 and "Session not found" in text  # exactly what an unknown session answers
            assert text == missing[1]
            async with http.delete(service.mcp_url, headers={"Authorization": f"Bearer {other}",
                                                              "Mcp-Session-Id": session}) as response:
                assert response.status == 404
        status, text, _ = await _post(http, service.mcp_url, key_a, LIST_TOOLS, session)
        assert status == 200 and "sandbox_execute_code" in text  # still the owner's, and still alive
