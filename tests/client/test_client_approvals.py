"""Tools that need approval, over HTTP: a call pauses with an `approval_required` event on the exec
stream and goes on once the session's owner posts the decision (the typed client's `on_approval`);
refused, or refused when no decision comes by the call's timeout; each decision in `tool_calls` and
in the audit row."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import httpx
import pytest

from wasm_runner_client import Client
from wasm_runner_protocol.tools import ApprovalEvent
from wasm_runner_server.security.tenants import TenantStore

HELPER = str(Path(__file__).resolve().parents[1] / "helpers" / "mcp_issue_server.py")


def tracker(**profile) -> dict:
    """A profile whose MCP server's `tracker_issue_title` needs approval."""
    return {"tracker": {"mcp_servers": [{"command": [sys.executable, HELPER], "env": {"TRACKER_TOKEN": "t"},
                                          "prefix": "tracker_"}],
                        "approval_tools": ["tracker_issue_title"], **profile}}


PROGRAM = ("from sandbox import tools, ToolError\n"
           "print(tools.tracker_search_issues(query='crash'))\n"
           "for n in (1, 3):\n"
           "    try:\n        print(tools.tracker_issue_title(number=n))\n"
           "    except ToolError as e:\n        print(e.kind, e)\n")


def test_the_owner_grants_one_call_and_refuses_another(start_server) -> None:
    server = start_server(profiles=tracker())
    asked: list[ApprovalEvent] = []

    def decide(event: ApprovalEvent) -> bool:
        asked.append(event)
        return event.arguments["number"] == 1

    with Client(server.url) as client:
        sid = client.create_session(profile="tracker").id
        listed = {t.name: t.approval for t in client.tools(sid).tools}
        assert listed["tracker_issue_title"] is True and listed["tracker_search_issues"] is False
        result = client.exec(sid, PROGRAM, on_approval=decide)
        assert result.error is None, result.stderr
        assert result.stdout.splitlines() == [
            "[1, 3]", "crash on start", "refused tracker_issue_title() needs approval and it was refused"]
        assert [(a.tool, a.arguments) for a in asked] == [("tracker_issue_title", {"number": 1}),
                                                          ("tracker_issue_title", {"number": 3})]
        assert [(c.outcome, c.approval) for c in result.tool_calls] == [
            ("ok", None), ("ok", "granted"), ("refused", "refused")]
        # no event stream, so no one to ask: refused at once, the other tools still answer
        plain = client.exec(sid, PROGRAM)
        assert plain.stdout.splitlines()[:2] == ["[1, 3]", "refused tracker_issue_title() needs approval and "
                                                 "this run has no one to give it (over HTTP: an exec with "
                                                 "Accept: text/event-stream)"]
        assert [c.approval for c in plain.tool_calls] == [None, "refused", "refused"]


def test_no_decision_by_the_calls_timeout_refuses_it(start_server) -> None:
    server = start_server(profiles=tracker(tool_call_timeout_s=1))
    with Client(server.url) as client:
        sid = client.create_session(profile="tracker").id
    code = ("from sandbox import tools, ToolError\n"
            "try:\n    tools.tracker_issue_title(number=2)\nexcept ToolError as e:\n    print(e.kind, e)\n")
    with httpx.Client(base_url=server.url, timeout=60) as raw:  # reads the stream and never decides
        with raw.stream("POST", f"/v1/sessions/{sid}/exec", headers={"Accept": "text/event-stream"},
                        json={"code": code}) as response:
            events = dict(_events(response.iter_lines()))
        approval = events["approval_required"]
        assert approval["tool"] == "tracker_issue_title" and approval["arguments"] == {"number": 2}
        assert approval["timeout_s"] <= 1
        result = events["result"]
        assert result["stdout"].startswith("timeout tracker_issue_title() needs approval and none was given")
        assert [(c["outcome"], c["approval"]) for c in result["tool_calls"]] == [("timeout", "timeout")]
        late = raw.post(f"/v1/sessions/{sid}/approvals/{approval['approval_id']}", json={"approve": True})
        assert late.status_code == 404 and late.json()["error"]["code"] == "approval_not_found"


def _events(lines):
    event = None
    for line in lines:
        if line.startswith("event: "):
            event = line[len("event: "):]
        elif line.startswith("data: ") and event is not None:
            yield event, json.loads(line[len("data: "):])
            event = None


def test_only_the_sessions_owner_decides_and_the_decision_is_audited(start_server, tmp_path: Path) -> None:
    data_dir = tmp_path / "keyed"
    data_dir.mkdir()
    tenants = TenantStore.in_data_dir(data_dir)
    owner, _ = tenants.create_key("team-a", "a", "member")
    other, _ = tenants.create_key("team-b", "b", "member")
    tenants.close()
    server = start_server(data_dir=data_dir, auth={"enabled": True}, profiles=tracker())
    tried: list[httpx.Response] = []

    def decide(event: ApprovalEvent) -> bool:
        tried.append(httpx.post(f"{server.url}/v1/sessions/{sid}/approvals/{event.approval_id}",
                                json={"approve": True}, headers={"Authorization": f"Bearer {other}"}))
        return False  # the owner refuses; the other workspace's approval above changed nothing

    with Client(server.url, api_key=owner) as client:
        sid = client.create_session(profile="tracker").id
        result = client.exec(sid, PROGRAM.replace("(1, 3)", "(2,)"), on_approval=decide)
    assert [t.status_code for t in tried] == [404]
    assert tried[0].json()["error"]["code"] == "session_not_found"
    assert [(c.tool, c.outcome, c.approval) for c in result.tool_calls] == [
        ("tracker_search_issues", "ok", None), ("tracker_issue_title", "refused", "refused")]
    rows: list[dict] = []
    for _ in range(100):  # rows reach the database in batches
        rows = httpx.get(f"{server.url}/v1/audit", params={"kind": "tool"},
                         headers={"Authorization": f"Bearer {owner}"}).json()["entries"]
        if len(rows) == 2:
            break
        threading.Event().wait(0.1)
    assert sorted((row["path"], row["outcome"], row["mode"]) for row in rows) == [
        ("tracker_issue_title", "refused", "approval_refused"), ("tracker_search_issues", "ok", "call")]


@pytest.mark.parametrize("body", [{}, {"approve": "yes"}, {"approve": True, "extra": 1}])
def test_a_malformed_decision_is_a_422(server, body) -> None:
    with Client(server.url) as client:
        sid = client.create_session().id
    response = httpx.post(f"{server.url}/v1/sessions/{sid}/approvals/abc", json=body)
    assert response.status_code == 422, response.text


def test_an_async_clients_coroutine_decides_a_javascript_guests_call(start_server) -> None:
    import asyncio

    from wasm_runner_client import AsyncClient

    server = start_server(profiles=tracker())

    async def main():
        async def decide(event: ApprovalEvent) -> bool:
            await asyncio.sleep(0)
            return event.arguments == {"number": 3}

        async with AsyncClient(server.url) as client:
            sid = (await client.create_session(profile="tracker")).id
            return await client.exec(sid, "for (const n of [3, 2]) {\n"
                                          "  try { console.log(await tools.trackerIssueTitle({number: n})); }\n"
                                          "  catch (e) { console.log(e.kind); }\n}", language="javascript",
                                     on_approval=decide)

    result = asyncio.run(main())
    assert result.stdout == "crash on exit\nrefused\n", result.stderr
    assert [c.approval for c in result.tool_calls] == ["granted", "refused"]
