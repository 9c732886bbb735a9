"""An MCP server (official SDK, stdio) as a tool source: its tools called from Python and JavaScript
guests, one-shot and in a kernel, decided by the host like any tool; its credential stays with it."""

import os
import sys
from pathlib import Path

import pytest

from wasm_runner.tools import ToolRegistry, python_stubs
from wasm_runner.tools.mcp_source import McpTools, snake_name

pytestmark = pytest.mark.runtimes

SERVER = Path(__file__).resolve().parents[2] / "helpers" / "mcp_issue_server.py"
TOKEN = "tracker-secret-7c1e9a"


@pytest.fixture(scope="module")
def issues():
    """The MCP server, run by the host with its token in its own environment only."""
    source = McpTools(command=[sys.executable, str(SERVER)], env={"TRACKER_TOKEN": TOKEN, "PATH": os.environ["PATH"]})
    source.start()
    yield source
    source.close()


def test_names_become_snake_case():
    assert [snake_name(n) for n in ("searchIssues", "search-issues", "get.URL", "2fa")] == [
        "search_issues", "search_issues", "get_url", "t_2fa"]
    assert snake_name("list", prefix="github_") == "github_list"


def test_the_servers_tools_are_listed_with_their_schemas(issues):
    registry = ToolRegistry(issues.tools)
    assert registry.names() == ["search_issues", "issue_title", "whoami"]
    assert registry.get("search_issues").spec.parameters["required"] == ["query"]
    assert "def issue_title(*, number: int)" in python_stubs(registry.specs())


def test_a_python_guest_calls_the_mcp_servers_tools(runner, issues):
    code = ("from sandbox import tools, ToolError\n"
            "found = tools.search_issues(query='crash')\n"
            "print([tools.issue_title(number=n) for n in found])\n"
            "try:\n    tools.issue_title(number=9)\nexcept ToolError as e:\n    print(e.kind, e)\n"
            "print(tools.whoami())\n"
            "import os\nprint(os.environ.get('TRACKER_TOKEN'))\n")
    result = runner.run_sync(code, tools=issues.tools)
    assert result.error is None, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "['crash on start', 'crash on exit']"
    assert lines[1].startswith("tool_error ") and lines[1].endswith("no issue #9")  # the server's message
    assert lines[2:] == [f"token of {len(TOKEN)} characters", "None"]
    assert [c.outcome for c in result.tool_calls] == ["ok", "ok", "ok", "tool_error", "ok"]
    assert TOKEN not in repr(result)


def test_a_javascript_kernel_calls_them_and_keeps_its_state(workers_runner, issues):
    session = workers_runner.session()
    try:
        first = session.run_sync("var found = await tools.searchIssues({query: 'crash'});", language="javascript",
                                 tools=issues.tools)
        assert first.error is None, first.stderr
        second = session.run_sync("console.log(await tools.issueTitle({number: found[1]}))", language="javascript",
                                  tools=issues.tools)
        assert second.stdout == "crash on exit\n"
        bad = session.run_sync("await tools.issueTitle({number: 'one'})", language="javascript", tools=issues.tools)
        assert bad.error is not None and bad.error.type == "ToolError" and "not of type" in bad.error.message
        assert bad.tool_calls == []  # refused in the guest against the server's schema: the server was not asked
    finally:
        session.destroy()


@pytest.fixture(scope="module")
def workers_runner(tmp_path_factory):
    from wasm_runner import Runner

    with Runner(tmp_path_factory.mktemp("mcp-workers"), concurrency=1) as r:
        yield r
