"""Tools that need approval: each call waits for the run's approver, which grants or refuses it; no
decision by the call's timeout refuses it. The decision is in the call's record."""

import asyncio
import json
import threading

import pytest

from wasm_runner import Runner
from wasm_runner.tools import ApprovalRefused, ApprovalRequest, ToolPolicy, ToolRegistry, ToolRun, tool

RAN: list[int] = []


def delete_issue(issue_id: int) -> str:
    """Delete an issue for good."""
    RAN.append(issue_id)
    return f"deleted {issue_id}"


def count(items: list[int]) -> int:
    """How many items there are."""
    return len(items)


def call(run: ToolRun, name: str, **kwargs) -> dict:
    return json.loads(run.handle(json.dumps({"name": name, "args": [], "kwargs": kwargs})))


@pytest.fixture(autouse=True)
def _forget():
    RAN.clear()


def test_an_approved_call_runs_and_the_approver_sees_the_checked_arguments():
    asked: list[ApprovalRequest] = []

    def approve(request: ApprovalRequest) -> bool:
        asked.append(request)
        return True

    run = ToolRun(ToolRegistry([tool(delete_issue, approval=True)]), approver=approve)
    assert call(run, "delete_issue", issue_id=7) == {"ok": True, "value": "deleted 7"}
    assert [(a.tool, a.arguments) for a in asked] == [("delete_issue", {"issue_id": 7})]
    assert RAN == [7]
    assert [(c.outcome, c.approval) for c in run.close()] == [("ok", "granted")]


def test_a_refused_call_never_runs_the_tool():
    run = ToolRun(ToolRegistry([tool(delete_issue, approval=True)]), approver=lambda request: False)
    answer = call(run, "delete_issue", issue_id=7)
    assert answer["ok"] is False and answer["error"]["kind"] == "refused"
    assert "refused" in answer["error"]["message"]
    assert RAN == []
    [record] = run.close()
    assert (record.outcome, record.approval) == ("refused", "refused")


def test_an_approver_refusing_with_a_reason_tells_the_guest_why():
    def refuse(request: ApprovalRequest) -> bool:
        raise ApprovalRefused("the reviewer is away")

    run = ToolRun(ToolRegistry([tool(delete_issue, approval=True)]), approver=refuse)
    answer = call(run, "delete_issue", issue_id=7)
    assert answer["error"] == {"kind": "refused",
                               "message": "delete_issue() needs approval and it was refused: the reviewer is away"}
    assert RAN == []
    assert [(c.outcome, c.approval) for c in run.close()] == [("refused", "refused")]


def test_no_decision_by_the_calls_timeout_refuses_it():
    release = threading.Event()
    run = ToolRun(ToolRegistry([tool(delete_issue, approval=True)]), ToolPolicy(call_timeout_s=0.3),
                  approver=lambda request: release.wait(30))
    try:
        answer = call(run, "delete_issue", issue_id=1)
    finally:
        release.set()
    assert answer["error"]["kind"] == "timeout"
    assert "needs approval and none was given" in answer["error"]["message"]
    assert RAN == []
    [record] = run.close()
    assert (record.outcome, record.approval) == ("timeout", "timeout")


def test_without_an_approver_such_calls_are_refused_and_other_tools_need_none():
    run = ToolRun(ToolRegistry([tool(delete_issue, approval=True), count]))
    assert call(run, "delete_issue", issue_id=1)["error"]["kind"] == "refused"
    assert RAN == []
    assert call(run, "count", items=[1, 2]) == {"ok": True, "value": 2}
    assert [c.approval for c in run.close()] == ["refused", None]


def test_bad_arguments_are_refused_before_anyone_is_asked():
    asked: list[ApprovalRequest] = []

    def approve(request: ApprovalRequest) -> bool:
        asked.append(request)
        return True

    run = ToolRun(ToolRegistry([tool(delete_issue, approval=True)]), approver=approve)
    assert call(run, "delete_issue", issue_id="seven")["error"]["kind"] == "invalid_arguments"
    assert asked == []


def test_a_coroutine_approver_runs_on_the_callers_loop():
    async def main() -> dict:
        loop = asyncio.get_running_loop()
        seen: list[asyncio.AbstractEventLoop] = []

        async def approve(request: ApprovalRequest) -> bool:
            seen.append(asyncio.get_running_loop())
            return request.arguments["issue_id"] == 3

        run = ToolRun(ToolRegistry([tool(delete_issue, approval=True)]), loop=loop, approver=approve)
        answers = [await asyncio.to_thread(call, run, "delete_issue", issue_id=n) for n in (3, 4)]
        run.close()
        assert seen == [loop, loop]
        return {"answers": answers}

    answers = asyncio.run(main())["answers"]
    assert answers[0] == {"ok": True, "value": "deleted 3"}
    assert answers[1]["error"]["kind"] == "refused"
    assert RAN == [3]


def test_closing_the_run_ends_a_wait_for_approval():
    release = threading.Event()
    run = ToolRun(ToolRegistry([tool(delete_issue, approval=True)]), approver=lambda r: release.wait(30))
    answers: list[dict] = []
    caller = threading.Thread(target=lambda: answers.append(call(run, "delete_issue", issue_id=1)))
    caller.start()
    try:
        run.close()
        caller.join(10)
    finally:
        release.set()
    assert answers[0]["error"]["kind"] == "cancelled"
    assert RAN == []


@pytest.mark.runtimes
def test_a_guest_call_waits_for_the_library_callback(tmp_path):
    decisions = {1: True, 2: False}
    with Runner(tmp_path) as runner:
        result = runner.run_sync(
            "from sandbox import tools, ToolError\n"
            "print(tools.delete_issue(issue_id=1))\n"
            "try:\n    tools.delete_issue(issue_id=2)\nexcept ToolError as e:\n    print(e.kind)\n",
            tools=[tool(delete_issue, approval=True)], on_approval=lambda r: decisions[r.arguments["issue_id"]])
    assert result.stdout == "deleted 1\nrefused\n", result.stderr
    assert RAN == [1]
    assert [(c.outcome, c.approval) for c in result.tool_calls] == [("ok", "granted"), ("refused", "refused")]
