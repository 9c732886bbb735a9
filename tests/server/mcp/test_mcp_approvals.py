"""Approvals over MCP: code run with `sandbox_execute_code` that calls a tool needing approval makes the
server ask the MCP client (elicitation, through the official client SDK's callback); granted, declined,
unanswered within the call's timeout, and a client without the capability, each with the reason the
guest is told."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import mcp_types as types
import pytest
from mcp_connect import connect_http, start_http_service

HELPER = str(Path(__file__).resolve().parents[2] / "helpers" / "mcp_issue_server.py")
PROGRAM = ("from sandbox import tools, ToolError\n"
           "for n in (1, 3):\n"
           "    try:\n        print(tools.tracker_issue_title(number=n))\n"
           "    except ToolError as e:\n        print(e.kind, e)\n")


def tracker(**profile) -> dict:
    return {"tracker": {"mcp_servers": [{"command": [sys.executable, HELPER], "env": {"TRACKER_TOKEN": "t"},
                                          "prefix": "tracker_"}],
                        "approval_tools": ["tracker_issue_title"], **profile}}


async def _run(tmp_path: Path, callback, program: str = PROGRAM, **profile) -> dict:
    service = await start_http_service(tmp_path / "data", profiles=tracker(**profile))
    try:
        async with connect_http(service, elicitation_callback=callback) as mcp:
            assert not (await mcp.call_tool("session_new", {"profile": "tracker"})).is_error
            ran = await mcp.call_tool("sandbox_execute_code", {"code": program})
            assert not ran.is_error, ran.content
            return ran.structured_content
    finally:
        await service.server.close()


@pytest.mark.asyncio
async def test_the_mcp_client_grants_one_call_and_declines_another(tmp_path):
    asked: list[str] = []

    async def answer(context, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        if '"number": 1' in params.message:
            return types.ElicitResult(action="accept", content={"approve": True})
        return types.ElicitResult(action="decline")

    result = await _run(tmp_path, answer)
    assert result["stdout"].splitlines() == [
        "crash on start",
        "refused tracker_issue_title() needs approval and it was refused: the MCP client's user declined it"]
    assert [(c["outcome"], c["approval"]) for c in result["tool_calls"]] == [("ok", "granted"), ("refused", "refused")]
    assert len(asked) == 2 and all("tracker_issue_title" in m for m in asked)


@pytest.mark.asyncio
async def test_an_accepted_form_that_does_not_approve_refuses(tmp_path):
    async def answer(context, params):
        return types.ElicitResult(action="accept", content={"approve": False})

    result = await _run(tmp_path, answer, PROGRAM.replace("(1, 3)", "(2,)"))
    assert result["stdout"] == ("refused tracker_issue_title() needs approval and it was refused: "
                                "the MCP client's user did not approve it\n")


@pytest.mark.asyncio
async def test_no_answer_by_the_calls_timeout_refuses(tmp_path):
    async def never(context, params):
        await asyncio.Event().wait()

    result = await _run(tmp_path, never, PROGRAM.replace("(1, 3)", "(2,)"), tool_call_timeout_s=1)
    # the host's own wait ends the call (it started first); the question to the client ends with it
    assert [(c["outcome"], c["approval"]) for c in result["tool_calls"]] == [("timeout", "timeout")]
    assert result["stdout"].startswith("timeout tracker_issue_title() needs approval and none was given within")


@pytest.mark.asyncio
async def test_a_client_without_elicitation_is_refused_with_the_reason(tmp_path):
    result = await _run(tmp_path, None)
    assert result["stdout"].splitlines() == [
        "refused tracker_issue_title() needs approval and it was refused: the MCP client cannot be asked "
        "(it did not declare the elicitation capability), so no one can approve it: use a client that supports "
        "elicitation, or the HTTP API's event stream"] * 2
    assert [c["approval"] for c in result["tool_calls"]] == ["refused", "refused"]
