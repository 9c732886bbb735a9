"""Guest code calling tools: Python (`sandbox.tools`) and JavaScript/TypeScript (`tools`), one-shot
and in session kernels, in this process and on worker processes; the host decides every call."""

import asyncio
import threading
from typing import TypedDict

import pytest

from wasm_runner import Limits, Runner
from wasm_runner.tools import ToolPolicy

pytestmark = pytest.mark.runtimes


class Issue(TypedDict):
    id: int
    title: str


ISSUES = [{"id": n, "title": f"issue {n}: {word}"} for n, word in enumerate(["crash", "slow", "crash again", "typo"])]


def search_issues(query: str, limit: int = 5) -> list[Issue]:
    """Search the tracker's issues."""
    return [i for i in ISSUES if query in i["title"]][:limit]


def close_issue(issue_id: int) -> str:
    """Close an issue."""
    if issue_id >= len(ISSUES):
        raise LookupError(f"no issue {issue_id}")
    return "closed"


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    """A Runner whose guests run on worker processes (the default): calls come back up the pipe."""
    with Runner(tmp_path_factory.mktemp("tool-workers"), concurrency=1) as r:
        yield r


PY_PROGRAM = """
from sandbox import tools, ToolError
found = tools.search_issues(query="crash", limit=5)
print([i["id"] for i in found])
try:
    tools.close_issue(99)
except ToolError as e:
    print("refused:", e.kind, e)
"""


def test_python_guest_calls_tools_one_shot(runner):
    result = runner.run_sync(PY_PROGRAM, tools=[search_issues, close_issue])
    assert result.error is None, result.stderr
    assert result.stdout == "[0, 2]\nrefused: tool_error no issue 99\n"
    assert [(c.tool, c.outcome) for c in result.tool_calls] == [("search_issues", "ok"), ("close_issue", "tool_error")]


def test_python_guest_calls_tools_on_a_worker_process(workers):
    result = workers.run_sync(PY_PROGRAM, tools=[search_issues, close_issue])
    assert result.error is None, result.stderr
    assert result.stdout == "[0, 2]\nrefused: tool_error no issue 99\n"
    assert [c.outcome for c in result.tool_calls] == ["ok", "tool_error"]


def test_a_guest_cannot_name_a_tool_it_was_not_given(runner):
    code = ("from sandbox import tools, ToolError\n"
            "for name in ('close_issue', 'closeIssue', 'handle', 'nope'):\n"
            "    try:\n        getattr(tools, name)(0)\n        print('called', name)\n"
            "    except (ToolError, AttributeError) as e:\n        print(name, type(e).__name__)\n")
    result = runner.run_sync(code, tools=[search_issues, close_issue], allow_tools=["search_issues"])
    assert "called" not in result.stdout, result.stdout
    assert result.stdout.count("ToolError") == 4, result.stdout
    assert {c.outcome for c in result.tool_calls} == {"not_allowed"}
    bare = runner.run_sync("from sandbox import tools\ntools.search_issues('crash')")
    assert bare.error is not None and bare.error.type == "ToolError" and "no tools" in bare.error.message
    assert bare.tool_calls == []


BAD_CALLS = """
from sandbox import tools, ToolError
for args, kwargs in [((3,), {}), ((), {"query": "x", "limit": "2"}), ((), {"limit": 1}), (("a", 1, 2), {}),
                     (("a",), {"query": "b"}), ((), {"query": "x", "page": 2})]:
    try:
        tools.search_issues(*args, **kwargs)
    except ToolError as e:
        print(e.kind, e)
print(tools.search_issues("crash", 1), sorted(dir(tools)))
"""


def test_bad_arguments_are_refused_in_the_guest_before_the_call_leaves_it(runner, workers):
    """The guest checks a call against the tool's schema (asked of the host once per run): a wrong call
    raises at once and never reaches the host, so it is not among the run's calls."""
    for where in (runner, workers):
        result = where.run_sync(BAD_CALLS, tools=[search_issues, close_issue])
        assert result.error is None, result.stderr
        lines = result.stdout.splitlines()
        assert lines[:6] == [
            'invalid_arguments search_issues(): query: 3 is not of type "string"',
            'invalid_arguments search_issues(): limit: "2" is not of type "integer"',
            'invalid_arguments search_issues(): "query" is a required property',
            "invalid_arguments search_issues() takes 2 arguments, 3 were given positionally",
            "invalid_arguments search_issues() got two values for 'query'",
            'invalid_arguments search_issues(): Additional properties are not allowed ("page" was unexpected)',
        ], result.stdout
        assert lines[6] == "[{'id': 0, 'title': 'issue 0: crash'}] ['close_issue', 'search_issues']"
        assert [c.outcome for c in result.tool_calls] == ["ok"]


def test_a_guest_that_skips_its_own_check_is_refused_by_the_host(runner):
    code = ("import wit_world\n"
            "print(wit_world.call_tool('{\"name\": \"search_issues\", \"kwargs\": {\"query\": 3}}'))")
    result = runner.run_sync(code, tools=[search_issues])
    assert result.error is None, result.stderr
    assert '"kind": "invalid_arguments"' in result.stdout and '3 is not of type \\"string\\"' in result.stdout
    assert [c.outcome for c in result.tool_calls] == ["invalid_arguments"]


def test_the_budget_stops_a_loop_of_calls(runner):
    code = ("from sandbox import tools, ToolError\nn = 0\ntry:\n    while True:\n"
            "        tools.search_issues('crash')\n        n += 1\nexcept ToolError as e:\n    print(n, e.kind)\n")
    result = runner.run_sync(code, tools=[search_issues], tool_policy=ToolPolicy(max_calls=3))
    assert result.stdout == "3 budget\n"
    assert [c.outcome for c in result.tool_calls] == ["ok"] * 3 + ["budget"]


def test_a_tool_past_its_timeout_raises_in_the_guest_which_goes_on(runner):
    release = threading.Event()

    def hang() -> None:
        release.wait(30)

    code = ("from sandbox import tools, ToolError\ntry:\n    tools.hang()\nexcept ToolError as e:\n"
            "    print(e.kind)\nprint(tools.search_issues('typo'))\n")
    try:
        result = runner.run_sync(code, tools=[hang, search_issues], tool_policy=ToolPolicy(call_timeout_s=0.3))
    finally:
        release.set()
    assert result.stdout == "timeout\n[{'id': 3, 'title': 'issue 3: typo'}]\n"
    assert [c.outcome for c in result.tool_calls] == ["timeout", "ok"]


@pytest.mark.parametrize("where", ["in-process", "workers"])
def test_a_tool_call_ends_at_the_runs_deadline(runner, workers, where):
    release = threading.Event()

    def hang() -> None:
        release.wait(60)

    try:
        result = (runner if where == "in-process" else workers).run_sync("from sandbox import tools\ntools.hang()", tools=[hang],
                                  limits=Limits(timeout_s=1))
    finally:
        release.set()
    # In process the guest gets the tool's timeout as a ToolError; on a worker the run's deadline also ends the
    # worker (epoch-free), and whichever of the two comes first is the run's error. The call says it was cut.
    assert result.error is not None
    assert result.error.type in (("ToolError",) if where == "in-process" else ("ToolError", "LimitExceeded"))
    assert result.tool_calls[0].outcome in ("timeout", "cancelled")


def test_async_python_awaits_tools(runner):
    code = ("import asyncio\nfrom sandbox import tools\n"
            "async def main():\n"
            "    a, b = await asyncio.gather(tools.search_issues('crash'), tools.search_issues('slow'))\n"
            "    return len(a), len(b)\n"
            "print(asyncio.run(main()))\n")
    result = runner.run_sync(code, tools=[search_issues])
    assert result.error is None, result.stderr
    assert result.stdout == "(2, 1)\n"


def test_a_kernel_keeps_state_across_calls_that_use_tools(workers):
    session = workers.session()
    try:
        first = session.run_sync("from sandbox import tools\nseen = tools.search_issues('crash')", tools=[search_issues])
        assert first.error is None, first.stderr
        second = session.run_sync("seen += tools.search_issues('typo')\n[i['id'] for i in seen]",
                                  tools=[search_issues])
        assert second.error is None, second.stderr
        assert second.value == "[0, 2, 3]" and not second.kernel_restarted
        # tools kept in the kernel's state are not a way around a later run that was given none
        third = session.run_sync("tools.search_issues('slow')")
        assert third.error is not None and third.error.type == "ToolError" and third.tool_calls == []
        assert session.run_sync("len(seen)").value == "3"
    finally:
        session.destroy()


def test_cancelling_the_run_cancels_its_call_in_flight(workers):
    started = threading.Event()
    release = threading.Event()
    seen = []

    def hang() -> None:
        started.set()
        release.wait(60)

    async def main() -> None:
        session = workers.session()
        session.on_tool_call = seen.append
        try:
            task = asyncio.create_task(session.run("from sandbox import tools\ntools.hang()", tools=[hang]))
            assert await asyncio.to_thread(started.wait, 30)
            task.cancel()  # the caller goes away mid-call
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            release.set()
            session.destroy()

    asyncio.run(main())
    assert [c.outcome for c in seen] == ["cancelled"]


JS_PROGRAM = """
const found = await tools.searchIssues({query: "crash"});
console.log(JSON.stringify(found.map((i) => i.id)));
try {
  await tools.closeIssue({issue_id: 99});
} catch (e) {
  console.log(e instanceof ToolError, e.kind, e.message);
}
try {
  await tools.deleteEverything({});
} catch (e) {
  console.log(e.kind);
}
"""


@pytest.mark.parametrize("language", ["javascript", "typescript"])
def test_javascript_and_typescript_guests_await_tools(runner, language):
    code = JS_PROGRAM if language == "javascript" else "const q: string = 'crash';\n" + JS_PROGRAM.replace('"crash"', "q")
    result = runner.run_sync(code, language=language, tools=[search_issues, close_issue])
    assert result.error is None, result.stderr
    assert result.stdout == "[0,2]\ntrue tool_error no issue 99\nnot_allowed\n"
    assert [c.outcome for c in result.tool_calls] == ["ok", "tool_error", "not_allowed"]


def test_a_javascript_kernel_on_a_worker_keeps_state_across_calls_that_use_tools(workers):
    session = workers.session()
    try:
        first = session.run_sync("var seen = await tools.searchIssues({query: 'crash'});", language="javascript",
                                 tools=[search_issues])
        assert first.error is None, first.stderr
        second = session.run_sync("seen = seen.concat(await tools.searchIssues({query: 'typo', limit: 1}));"
                                  "console.log(seen.length)", language="javascript", tools=[search_issues])
        assert second.error is None, second.stderr
        assert second.stdout == "3\n" and [c.outcome for c in second.tool_calls] == ["ok"]
        bad = session.run_sync("await tools.searchIssues('crash')", language="javascript", tools=[search_issues])
        assert bad.error is not None and bad.error.type == "ToolError" and "named arguments" in bad.error.message
        wrong = session.run_sync(
            "for (const args of [{query: 3}, {query: 'x', limit: 1.5}, {limit: 1}, {query: 'x', page: 2}]) {\n"
            "  try { await tools.searchIssues(args); } catch (e) { console.log(e.kind, e.message); }\n}",
            language="javascript", tools=[search_issues])
        assert wrong.stdout.splitlines() == [
            'invalid_arguments searchIssues(): query: 3 is not of type "string"',
            'invalid_arguments searchIssues(): limit: 1.5 is not of type "integer"',
            'invalid_arguments searchIssues(): "query" is a required property',
            'invalid_arguments searchIssues(): Additional properties are not allowed ("page" was unexpected)',
        ], wrong.stdout + wrong.stderr
        assert wrong.tool_calls == []  # refused in the guest: none reached the host
    finally:
        session.destroy()


@pytest.mark.native
def test_typescript_type_checks_against_the_runs_tools(workers):
    wrong = workers.run_sync("const found: string[] = await tools.searchIssues({query: 1});", language="typescript",
                             typecheck="block", tools=[search_issues])
    assert wrong.error is not None and wrong.error.type == "TypeCheckError"
    messages = [d.message for d in wrong.diagnostics or ()]
    assert any("not assignable to type 'string'" in m for m in messages), messages
    assert any("Issue" in m or "id: number" in m for m in messages), messages  # the result's type is known
    assert wrong.tool_calls == []  # blocked: nothing ran
    right = workers.run_sync("const found = await tools.searchIssues({query: 'crash', limit: 1});\n"
                             "console.log(found[0].title.toUpperCase());", language="typescript",
                             typecheck="block", tools=[search_issues])
    assert right.diagnostics == [], right.diagnostics
    assert right.stdout == "ISSUE 0: CRASH\n"


async def test_two_calls_of_one_session_keep_their_own_tool_rules_and_audit(runner):
    """The rules and the audit go with each call (a service's calls of one session may come under
    other profiles and keys): neither sees the other's, and the session's own are left alone."""
    session = runner.session()
    audits: dict[str, list[str]] = {"first": [], "second": []}
    code = ("from sandbox import tools, ToolError\nfor call in (lambda: tools.search_issues(query='crash'),"
            " lambda: tools.close_issue(issue_id=1)):\n    try:\n        call()\n        print('ok')\n"
            "    except ToolError as e:\n        print('refused')")
    policies = {name: ToolPolicy(allow=frozenset({allowed}), audit=lambda call, name=name: audits[name].append(call.tool))
                for name, allowed in (("first", "search_issues"), ("second", "close_issue"))}
    first, second = await asyncio.gather(
        *(session.run(code, tools=[search_issues, close_issue], tool_policy=policies[name]) for name in policies))
    assert first.stdout == "ok\nrefused\n" and second.stdout == "refused\nok\n", (first.stdout, second.stdout)
    assert audits == {"first": ["search_issues", "close_issue"], "second": ["search_issues", "close_issue"]}
    assert [c.outcome for c in first.tool_calls] == ["ok", "not_allowed"]
    assert [c.outcome for c in second.tool_calls] == ["not_allowed", "ok"]
    assert session.tool_allowlist is None and session.on_tool_call is None
    session.destroy()
