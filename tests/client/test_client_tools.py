"""Caller-side tools over HTTP: the typed client runs the tools in its own process, the service sends
each call the host allows as an event on the exec stream and gives the guest the posted answer."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import httpx
import pytest

from wasm_runner_client import AsyncClient, Client, PermissionDeniedError
from wasm_runner_server.security.tenants import TenantStore

ISSUES = {1: "crash on start", 2: "slow search", 3: "crash on exit"}


def search_issues(query: str, limit: int = 10) -> list[int]:
    """Issue numbers whose title holds the query."""
    return [n for n, title in ISSUES.items() if query in title][:limit]


def issue_title(number: int) -> str:
    """The title of an issue."""
    if number not in ISSUES:
        raise LookupError(f"no issue #{number}")
    return ISSUES[number]


def test_a_python_kernel_calls_the_callers_tools(server) -> None:
    seen_in_this_process = []

    def remember(note: str) -> int:
        seen_in_this_process.append(note)
        return len(seen_in_this_process)

    with Client(server.url) as client:
        sid = client.create_session().id
        first = client.exec(sid, "from sandbox import tools, ToolError\n"
                                 "found = tools.search_issues(query='crash')\n"
                                 "titles = [tools.issue_title(number=n) for n in found]\n"
                                 "tools.remember(note=titles[0])\n",
                            tools=[search_issues, issue_title, remember])
        assert first.error is None, first.stderr
        assert first.value == "1" and seen_in_this_process == ["crash on start"]
        assert [(c.tool, c.outcome) for c in first.tool_calls] == [
            ("search_issues", "ok"), ("issue_title", "ok"), ("issue_title", "ok"), ("remember", "ok")]
        second = client.exec(sid, "try:\n    tools.issue_title(number=9)\nexcept ToolError as e:\n    print(e.kind, e)\n"
                                  "print(titles)", tools=[issue_title])
        assert second.stdout == "tool_error no issue #9\n['crash on start', 'crash on exit']\n"  # state kept
        assert [c.outcome for c in second.tool_calls] == ["tool_error"]


def test_the_service_decides_before_the_caller_is_asked(server) -> None:
    asked = []

    def record(number: int) -> int:
        asked.append(number)
        return number

    with Client(server.url) as client:
        sid = client.create_session().id
        code = ("from sandbox import tools, ToolError\n"
                "for call in (lambda: tools.record(number='x'), lambda: tools.search_issues(query='a'),\n"
                "             lambda: tools.record(7)):\n"
                "    try:\n        print(call())\n    except ToolError as e:\n        print(e.kind)\n")
        result = client.exec(sid, code, tools=[record])
    assert result.stdout == "invalid_arguments\nnot_allowed\n7\n"
    assert asked == [7]


def test_an_async_client_answers_a_javascript_guest(server) -> None:
    async def lookup(number: int) -> dict:
        await asyncio.sleep(0)
        return {"number": number, "title": ISSUES[number]}

    async def main():
        async with AsyncClient(server.url) as client:
            sid = (await client.create_session(profile="javascript")).id
            return await client.exec(sid, "const issue = await tools.lookup({number: 2});\n"
                                          "console.log(issue.title);\n"
                                          "try { await tools.issueTitle({number: 5}) } catch (e) { console.log(e.message) }",
                                     language="javascript", tools=[lookup, issue_title])

    result = asyncio.run(main())
    assert result.error is None, result.stderr
    assert result.stdout == "slow search\nno issue #5\n"


def test_tools_need_the_event_stream_and_valid_specs(server) -> None:
    with Client(server.url) as client:
        sid = client.create_session().id
    spec = json.loads(json.dumps({"name": "f", "parameters": {"type": "object", "properties": {}}}))
    plain = httpx.post(f"{server.url}/v1/sessions/{sid}/exec", json={"code": "1", "tools": [spec]})
    assert plain.status_code == 422 and "event stream" in plain.json()["error"]["message"]
    for bad, says in (({"name": "Bad-Name"}, "snake_case"),
                      ({"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "string",
                                                                                        "pattern": "(a+)+$"}}}},
                       "pattern"),
                      ({"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": 7}}}},
                       "not a valid JSON schema"),
                      ({"name": "f", "parameters": {"type": "array"}}, "type object")):
        answer = httpx.post(f"{server.url}/v1/sessions/{sid}/exec", json={"code": "1", "tools": [bad]},
                            headers={"Accept": "text/event-stream"})
        assert answer.status_code == 422, answer.text
        assert says in answer.json()["error"]["message"]
    with Client(server.url) as client:
        with pytest.raises(TypeError, match="snake_case"):  # refused here, before anything is sent
            client.exec(sid, "1", tools=[lambda: 1])
        with pytest.raises(ValueError, match="two tools"):
            client.exec(sid, "1", tools=[search_issues, issue_title, search_issues])
        assert client.exec(sid, "1", tools={"one": lambda: 1}).tool_calls == []  # named by the mapping


def test_an_answer_is_taken_once_and_only_for_the_sessions_own_call(server) -> None:
    with Client(server.url) as client:
        sid = client.create_session().id
        other = client.create_session().id
        body = {"code": "from sandbox import tools\ntools.wait_here()", "tools": [
            {"name": "wait_here", "parameters": {"type": "object", "properties": {}}}]}
        with httpx.Client(base_url=server.url, timeout=30) as raw:
            with raw.stream("POST", f"/v1/sessions/{sid}/exec", json=body,
                            headers={"Accept": "text/event-stream"}) as stream:
                lines = stream.iter_lines()
                call_id = _next_tool_call(lines)["call_id"]
                wrong = raw.post(f"/v1/sessions/{other}/tool-calls/{call_id}", json={"value": "from elsewhere"})
                assert wrong.status_code == 404 and wrong.json()["error"]["code"] == "tool_call_not_found"
                assert raw.post(f"/v1/sessions/{sid}/tool-calls/{call_id}", json={"value": 42}).status_code == 200
                again = raw.post(f"/v1/sessions/{sid}/tool-calls/{call_id}", json={"value": 43})
                assert again.status_code == 404
                result = _result(lines)
        assert result["value"] == "42"


def test_a_client_gone_mid_call_ends_the_run_and_its_call(server) -> None:
    with Client(server.url) as client:
        sid = client.create_session().id
        body = {"code": "from sandbox import tools\ntools.wait_here()", "tools": [
            {"name": "wait_here", "parameters": {"type": "object", "properties": {}}}]}
        with httpx.Client(base_url=server.url, timeout=30) as raw:
            with raw.stream("POST", f"/v1/sessions/{sid}/exec", json=body,
                            headers={"Accept": "text/event-stream"}) as stream:
                call_id = _next_tool_call(stream.iter_lines())["call_id"]
            # the connection is closed: the run is cancelled, and its call with it
            late = None
            for _ in range(200):
                late = raw.post(f"/v1/sessions/{sid}/tool-calls/{call_id}", json={"value": 1})
                if late.status_code == 404:
                    break
                threading.Event().wait(0.05)
            assert late is not None and late.status_code == 404
        assert client.exec(sid, "1 + 1").value == "2"  # the session is free again


def test_each_tool_call_is_an_audit_row_without_its_arguments(start_server, tmp_path: Path) -> None:
    data_dir = tmp_path / "keyed"
    data_dir.mkdir()
    tenants = TenantStore.in_data_dir(data_dir)
    key, _ = tenants.create_key("team-a", "a", "member")
    tenants.close()
    server = start_server(data_dir=data_dir, auth={"enabled": True})
    with Client(server.url, api_key=key) as client:
        sid = client.create_session().id
        result = client.exec(sid, "from sandbox import tools\ntools.search_issues(query='secret-word-123')\n"
                                  "try:\n    tools.nope()\nexcept Exception:\n    pass", tools=[search_issues])
        assert [c.outcome for c in result.tool_calls] == ["ok", "not_allowed"]
    rows = []
    for _ in range(100):  # rows reach the database in batches
        page = httpx.get(f"{server.url}/v1/audit", params={"kind": "tool"},
                         headers={"Authorization": f"Bearer {key}"}).json()
        rows = page["entries"]
        if len(rows) == 2:
            break
        threading.Event().wait(0.1)
    by_tool = {row["path"]: row for row in rows}
    assert set(by_tool) == {"search_issues", "nope"}
    assert by_tool["search_issues"]["outcome"] == "ok" and by_tool["search_issues"]["session"] == sid
    assert by_tool["search_issues"]["code_sha256"] == result.tool_calls[0].arguments_sha256
    assert by_tool["nope"]["outcome"] == "not_allowed"
    assert "secret-word-123" not in json.dumps(rows)


def _events(lines):
    event = None
    for line in lines:
        if line.startswith("event: "):
            event = line[len("event: "):]
        elif line.startswith("data: ") and event is not None:
            yield event, json.loads(line[len("data: "):])
            event = None


def _next_tool_call(lines) -> dict:
    for event, data in _events(lines):
        if event == "tool_call":
            return data
        assert event in ("stdout", "stderr"), (event, data)
    raise AssertionError("the stream ended without a tool call")


def _result(lines) -> dict:
    for event, data in _events(lines):
        if event == "result":
            return data
    raise AssertionError("the stream ended without a result")


def test_a_profiles_tool_allowlist_narrows_what_a_call_may_offer(start_server) -> None:
    server = start_server(profiles={"issues": {"tools": ["search_issues"]}, "no-tools": {"tools": []}})
    with Client(server.url) as client:
        sid = client.create_session(profile="issues").id
        allowed = client.exec(sid, "from sandbox import tools\ntools.search_issues(query='crash')",
                              tools=[search_issues])
        assert allowed.value == "[1, 3]"
        with pytest.raises(PermissionDeniedError) as refused:
            client.exec(sid, "1", tools=[search_issues, issue_title])
        assert refused.value.code == "tool_not_allowed" and "issue_title" in refused.value.message
        bare = client.create_session(profile="no-tools").id
        with pytest.raises(PermissionDeniedError):
            client.exec(bare, "1", tools=[search_issues])


def test_a_profiles_mcp_servers_give_its_runs_their_tools(start_server, monkeypatch) -> None:
    import sys

    token = "tracker-secret-51f0"
    monkeypatch.setenv("TRACKER_TOKEN", token)  # the host's environment: passed to the MCP server only
    helper = str(Path(__file__).resolve().parents[1] / "helpers" / "mcp_issue_server.py")
    server = start_server(profiles={"tracker": {"mcp_servers": [
        {"command": [sys.executable, helper], "env_from": ["TRACKER_TOKEN"], "prefix": "tracker_"}]}})
    with Client(server.url) as client:
        sid = client.create_session(profile="tracker").id
        plain = client.exec(sid, "from sandbox import tools\n"
                                 "found = tools.tracker_search_issues(query='crash')\n"
                                 "import os\nprint(os.environ.get('TRACKER_TOKEN'), tools.tracker_whoami())\n"
                                 "found")
        assert plain.error is None, plain.stderr
        assert plain.value == "[1, 3]"
        assert plain.stdout == f"None token of {len(token)} characters\n"
        both = client.exec(sid, "[tools.issue_title(number=n) for n in found] + [tools.tracker_issue_title(number=2)]",
                           tools=[issue_title])  # the caller's own tools beside the profile's
        assert both.value == "['crash on start', 'crash on exit', 'slow search']"
        assert [c.tool for c in both.tool_calls] == ["issue_title", "issue_title", "tracker_issue_title"]
        assert token not in repr(plain) + repr(both)
        once = client.run("console.log(await tools.trackerIssueTitle({number: 3}))", language="javascript",
                          profile="tracker")  # one-shot runs of the profile get them too
        assert once.stdout == "crash on exit\n" and [c.outcome for c in once.tool_calls] == ["ok"]
