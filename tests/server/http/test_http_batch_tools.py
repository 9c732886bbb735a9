"""POST /v1/batch?tools=...: every item may call the named tools of the profile's MCP servers, each
item's calls decided and recorded on their own; names outside the profile's allowlist are refused
before anything runs (on a Ray cluster: tests/server/http/test_http_batch_cluster.py)."""

import json
import sys
from pathlib import Path

from server_helpers import assert_error_shape

HELPER = str(Path(__file__).resolve().parents[2] / "helpers" / "mcp_issue_server.py")
PROFILES = {"tracker": {"tools": ["tracker_search_issues", "tracker_issue_title"],
                        "mcp_servers": [{"command": [sys.executable, HELPER], "env": {"TRACKER_TOKEN": "t"},
                                         "prefix": "tracker_"}]}}
PROGRAM = ("from sandbox import tools, ToolError\n"
           "try:\n    print(tools.tracker_issue_title(number={n}))\nexcept ToolError as e:\n    print(e.kind)\n"
           "try:\n    tools.tracker_search_issues(query='crash')\nexcept ToolError as e:\n    print(e.kind)\n")


def ndjson(items):
    return "".join(json.dumps(item) + "\n" for item in items).encode()


async def test_each_item_calls_the_batchs_tool_set(serve):
    client = await serve(profiles=PROFILES)
    items = [{"id": f"i{n}", "code": PROGRAM.format(n=n)} for n in (1, 2, 3)]
    response = await client.post("/v1/batch?profile=tracker&tools=tracker_issue_title", data=ndjson(items))
    assert response.status == 200, await response.text()
    by_id = {r["id"]: r for r in map(json.loads, (await response.text()).splitlines())}
    # the batch's set holds issue_title only: search_issues, though the profile's, is not allowed
    assert {k: r["stdout"] for k, r in by_id.items()} == {
        "i1": "crash on start\nnot_allowed\n", "i2": "slow search\nnot_allowed\n", "i3": "crash on exit\nnot_allowed\n"}
    assert all([c["outcome"] for c in r["tool_calls"]] == ["ok", "not_allowed"] for r in by_id.values())


async def test_a_tool_outside_the_profile_is_refused(serve):
    client = await serve(profiles=PROFILES)
    wider = await client.post("/v1/batch?profile=tracker&tools=tracker_whoami", data=ndjson([{"code": "1"}]))
    assert wider.status == 403
    assert_error_shape(await wider.json(), "tool_not_allowed")
    bad = await client.post("/v1/batch?profile=tracker&tools=Not-A-Name", data=ndjson([{"code": "1"}]))
    assert bad.status == 422
