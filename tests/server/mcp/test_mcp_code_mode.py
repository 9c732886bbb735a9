"""Code mode through wasm-runner's MCP server: `sandbox_tools_api` shows the profile's tools as an API,
and `sandbox_execute_code` runs a program that calls them (the upstream MCP server's tools)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from mcp_connect import connect_http, start_http_service

HELPER = str(Path(__file__).resolve().parents[2] / "helpers" / "mcp_issue_server.py")


@pytest.mark.asyncio
async def test_an_mcp_client_gets_the_api_and_runs_a_program_that_calls_the_tools(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACKER_TOKEN", "tracker-secret-0b2d")
    service = await start_http_service(tmp_path / "data", profiles={"tracker": {
        "tools": ["search_issues", "issue_title"],  # whoami is left out
        "mcp_servers": [{"command": [sys.executable, HELPER], "env_from": ["TRACKER_TOKEN"]}]}})
    try:
        async with connect_http(service) as mcp:
            created = await mcp.call_tool("session_new", {"profile": "tracker"})
            assert not created.is_error
            api = await mcp.call_tool("sandbox_tools_api", {})
            assert not api.is_error
            text = api.content[0].text
            assert "def search_issues(*, query: str" in text and "def issue_title(" in text
            assert "whoami" not in text
            typescript = await mcp.call_tool("sandbox_tools_api", {"language": "typescript"})
            assert "searchIssues(args: { query: string; limit?: number }): Promise<" in typescript.content[0].text
            ran = await mcp.call_tool("sandbox_execute_code", {"code": (
                "from sandbox import tools, ToolError\n"
                "titles = [tools.issue_title(number=n) for n in tools.search_issues(query='crash')]\n"
                "try:\n    tools.whoami()\nexcept ToolError as e:\n    print(e.kind)\n"
                "titles")})
            assert not ran.is_error
            result = ran.structured_content
            assert result["value"] == "['crash on start', 'crash on exit']"
            assert result["stdout"] == "not_allowed\n"
            assert [c["outcome"] for c in result["tool_calls"]] == ["ok", "ok", "ok", "not_allowed"]
            assert "tracker-secret-0b2d" not in str(result)
    finally:
        await service.server.close()
