"""Code mode in one-shot runs (POST /v1/exec): the run's stream opens with its id (`run`), the typed
client answers each caller-side tool call and approval under it (POST /v1/exec/{run_id}/...), and only
while the run lasts and only from the caller's workspace."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import httpx

from wasm_runner_client import AsyncClient, Client
from wasm_runner_protocol.tools import ApprovalEvent
from wasm_runner_server.security.tenants import TenantStore

ISSUES = {1: "crash on start", 2: "slow search", 3: "crash on exit"}
HELPER = str(Path(__file__).resolve().parents[1] / "helpers" / "mcp_issue_server.py")
WAIT_SPEC = {"name": "wait_here", "parameters": {"type": "object", "properties": {}}}


def search_issues(query: str, limit: int = 10) -> list[int]:
    """Issue numbers whose title holds the query."""
    return [n for n, title in ISSUES.items() if query in title][:limit]


def issue_title(number: int) -> str:
    """The title of an issue."""
    if number not in ISSUES:
        raise LookupError(f"no issue #{number}")
    return ISSUES[number]


def test_a_python_one_shot_calls_the_callers_tools_with_files(server) -> None:
    with Client(server.url) as client:
        result = client.run("from sandbox import tools, ToolError\n"
                            "found = tools.search_issues(query='crash')\n"
                            "open('titles.txt', 'w').write('\\n'.join(tools.issue_title(number=n) for n in found))\n"
                            "try:\n    tools.issue_title(number=9)\nexcept ToolError as e:\n    print(e.kind, e)\n",
                            tools=[search_issues, issue_title], output_files=["titles.txt"])
    assert result.error is None, result.stderr
    assert result.stdout == "tool_error no issue #9\n"
    assert result.output_files["titles.txt"].content == "crash on start\ncrash on exit"
    assert [(c.tool, c.outcome) for c in result.tool_calls] == [
        ("search_issues", "ok"), ("issue_title", "ok"), ("issue_title", "ok"), ("issue_title", "tool_error")]


def test_an_async_clients_javascript_one_shot_calls_its_tools(server) -> None:
    async def lookup(number: int) -> dict:
        await asyncio.sleep(0)
        return {"number": number, "title": ISSUES[number]}

    async def main():
        async with AsyncClient(server.url) as client:
            return await client.run("const issue = await tools.lookup({number: 2});\nconsole.log(issue.title);",
                                    language="javascript", profile="javascript", tools=[lookup])

    result = asyncio.run(main())
    assert result.error is None, result.stderr
    assert result.stdout == "slow search\n"
    assert [c.outcome for c in result.tool_calls] == ["ok"]


def test_a_one_shot_asks_approval_on_its_stream(start_server) -> None:
    server = start_server(profiles={"tracker": {
        "mcp_servers": [{"command": [sys.executable, HELPER], "env": {"TRACKER_TOKEN": "t"}, "prefix": "tracker_"}],
        "approval_tools": ["tracker_issue_title"]}})
    asked: list[ApprovalEvent] = []

    def decide(event: ApprovalEvent) -> bool:
        asked.append(event)
        return event.arguments["number"] == 1

    code = ("from sandbox import tools, ToolError\n"
            "for n in (1, 3):\n"
            "    try:\n        print(tools.tracker_issue_title(number=n))\n"
            "    except ToolError as e:\n        print(e.kind, e)\n")
    with Client(server.url) as client:
        result = client.run(code, profile="tracker", on_approval=decide)
        plain = client.run(code, profile="tracker")  # no stream, no one to ask: refused
    assert result.error is None, result.stderr
    assert result.stdout.splitlines() == [
        "crash on start", "refused tracker_issue_title() needs approval and it was refused"]
    assert [a.arguments for a in asked] == [{"number": 1}, {"number": 3}]
    assert [(c.outcome, c.approval) for c in result.tool_calls] == [("ok", "granted"), ("refused", "refused")]
    assert [c.approval for c in plain.tool_calls] == ["refused", "refused"]


def test_answers_come_from_the_runs_workspace_while_it_runs(start_server, tmp_path: Path) -> None:
    data_dir = tmp_path / "keyed"
    data_dir.mkdir()
    tenants = TenantStore.in_data_dir(data_dir)
    owner, _ = tenants.create_key("team-a", "a", "member")
    colleague, _ = tenants.create_key("team-a", "a2", "app")
    other, _ = tenants.create_key("team-b", "b", "member")
    tenants.close()
    server = start_server(data_dir=data_dir, auth={"enabled": True})
    body = {"code": "from sandbox import tools\ntools.wait_here()", "tools": [WAIT_SPEC]}
    with httpx.Client(base_url=server.url, timeout=60) as raw:
        with raw.stream("POST", "/v1/exec", json=body, headers={"Accept": "text/event-stream",
                                                               "Authorization": f"Bearer {owner}"}) as stream:
            events = _events(stream.iter_lines())
            run_id = _next(events, "run")["run_id"]
            call_id = _next(events, "tool_call")["call_id"]
            path = f"/v1/exec/{run_id}/tool-calls/{call_id}"
            stolen = raw.post(path, json={"value": "from elsewhere"}, headers={"Authorization": f"Bearer {other}"})
            assert stolen.status_code == 404 and stolen.json()["error"]["code"] == "tool_call_not_found"
            assert raw.post(path, json={"value": 42}, headers={"Authorization": f"Bearer {colleague}"}).status_code == 200
            result = _next(events, "result")
        assert result["value"] == "42"
        late = raw.post(path, json={"value": 43}, headers={"Authorization": f"Bearer {owner}"})
        assert late.status_code == 404 and late.json()["error"]["code"] == "tool_call_not_found"
        decided = raw.post(f"/v1/exec/{run_id}/approvals/abc", json={"approve": True},
                           headers={"Authorization": f"Bearer {owner}"})
        assert decided.status_code == 404 and decided.json()["error"]["code"] == "approval_not_found"


def test_tools_in_a_one_shot_need_the_stream_and_code(server) -> None:
    plain = httpx.post(f"{server.url}/v1/exec", json={"code": "1", "tools": [WAIT_SPEC]})
    assert plain.status_code == 422 and "event stream" in plain.json()["error"]["message"]
    command = httpx.post(f"{server.url}/v1/exec", json={"command": ["true"], "tools": [WAIT_SPEC]},
                         headers={"Accept": "text/event-stream"})
    assert command.status_code == 422 and "command" in command.json()["error"]["message"]


def _events(lines):
    event = None
    for line in lines:
        if line.startswith("event: "):
            event = line[len("event: "):]
        elif line.startswith("data: ") and event is not None:
            yield event, json.loads(line[len("data: "):])
            event = None


def _next(events, name: str) -> dict:
    for event, data in events:
        if event == name:
            return data
        assert event in ("stdout", "stderr"), (event, data)
    raise AssertionError(f"the stream ended without a {name} event")
