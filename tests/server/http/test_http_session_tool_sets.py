"""Session-bound tool sets: `POST /v1/sessions {"tools": [...]}` narrows the tools the session's runs
may use within its profile's allowlist; a wider choice is refused; the choice survives a restart."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.helpers.server_helpers import assert_error_shape, call, new_session, run

pytestmark = pytest.mark.runtimes

HELPER = str(Path(__file__).resolve().parents[2] / "helpers" / "mcp_issue_server.py")
PROFILES = {"tracker": {"mcp_servers": [{"command": [sys.executable, HELPER], "env": {"TRACKER_TOKEN": "t"},
                                         "prefix": "tracker_"}],
                        "tools": ["tracker_search_issues", "tracker_issue_title", "tracker_whoami"]}}
PROGRAM = ("from sandbox import tools, ToolError\n"
           "for call in (lambda: tools.tracker_search_issues(query='crash'), lambda: tools.tracker_whoami()):\n"
           "    try:\n        print(call())\n    except ToolError as e:\n        print(e.kind)\n")


async def test_a_sessions_tool_set_narrows_its_runs_and_its_listing(serve):
    client = await serve(profiles=PROFILES)
    narrow = await new_session(client, profile="tracker", tools=["tracker_search_issues"])
    whole = await new_session(client, profile="tracker")
    status, info = await call(client, "GET", f"/v1/sessions/{narrow}")
    assert status == 200 and info["tools"] == ["tracker_search_issues"]
    result = await run(client, narrow, PROGRAM)
    assert result["stdout"] == "[1, 3]\nnot_allowed\n", result
    assert (await run(client, whole, PROGRAM))["stdout"] == "[1, 3]\ntoken of 1 characters\n"
    status, listed = await call(client, "GET", f"/v1/sessions/{narrow}/tools")
    assert status == 200 and [t["name"] for t in listed["tools"]] == ["tracker_search_issues"]
    assert "whoami" not in listed["python"]
    # a caller-side tool outside the session's set is refused like one outside the profile's
    status, refused = await call(client, "POST", f"/v1/sessions/{narrow}/exec", json={
        "code": "1", "tools": [{"name": "tracker_whoami"}]}, headers={"Accept": "text/event-stream"})
    assert status == 403 and refused["error"]["code"] == "tool_not_allowed"


@pytest.mark.parametrize(("tools", "status", "code"), [
    (["tracker_search_issues", "delete_everything"], 403, "tool_not_allowed"),
    (["Not A Name"], 422, "validation_error"),
])
async def test_a_wider_or_malformed_tool_set_is_refused_and_makes_no_session(serve, tools, status, code):
    client = await serve(profiles=PROFILES)
    got, answer = await call(client, "POST", "/v1/sessions", json={"profile": "tracker", "tools": tools, "id": "s1"})
    assert got == status, answer
    assert_error_shape(answer, code)
    assert (await call(client, "GET", "/v1/sessions/s1"))[0] == 404


async def test_the_tool_set_survives_a_restart(serve):
    client = await serve(profiles=PROFILES)
    sid = await new_session(client, profile="tracker", tools=["tracker_search_issues"])
    await client.close()
    again = await serve(profiles=PROFILES)
    status, info = await call(again, "GET", f"/v1/sessions/{sid}")
    assert status == 200 and info["tools"] == ["tracker_search_issues"]
    assert (await run(again, sid, PROGRAM))["stdout"] == "[1, 3]\nnot_allowed\n"
