"""Batches that carry tools: every item may call the batch's callables, each item's calls decided,
budgeted and recorded on their own; a Ray batch refuses caller-side tools with a clear error."""

from __future__ import annotations

import threading

import pytest

from wasm_runner import ExecRequest, Runner
from wasm_runner.cluster import RayCluster
from wasm_runner.tools import ApprovalRequest, ToolPolicy, tool

ISSUES = {1: "crash on start", 2: "slow search", 3: "crash on exit"}


def issue_title(number: int) -> str:
    """The title of an issue."""
    if number not in ISSUES:
        raise LookupError(f"no issue #{number}")
    return ISSUES[number]


def close_issue(number: int) -> str:
    """Close an issue."""
    return f"closed {number}"


PROGRAM = ("from sandbox import tools, ToolError\n"
           "try:\n    print(tools.issue_title(number={n}))\nexcept ToolError as e:\n    print(e.kind, e)\n")


async def test_each_item_calls_the_batchs_tools_and_has_its_own_record(runner):
    audited: list[str] = []
    lock = threading.Lock()

    def audit(call) -> None:
        with lock:
            audited.append(call.tool)

    requests = [ExecRequest(code=PROGRAM.format(n=n), id=f"item-{n}") for n in (1, 2, 3, 9)]
    results = {r.id: r async for r in runner.run_many(requests, concurrency=2, tools=[issue_title],
                                                      tool_policy=ToolPolicy(audit=audit))}
    assert {k: r.stdout for k, r in results.items()} == {
        "item-1": "crash on start\n", "item-2": "slow search\n", "item-3": "crash on exit\n",
        "item-9": "tool_error no issue #9\n"}
    assert {k: [c.outcome for c in r.tool_calls] for k, r in results.items()} == {
        "item-1": ["ok"], "item-2": ["ok"], "item-3": ["ok"], "item-9": ["tool_error"]}
    assert audited == ["issue_title"] * 4


async def test_the_budget_and_approvals_are_per_item(runner):
    code = ("from sandbox import tools, ToolError\n"
            "for n in (1, 2):\n"
            "    try:\n        print(tools.close_issue(number=n))\n"
            "    except ToolError as e:\n        print(e.kind)\n")
    asked: list[int] = []

    def approve(request: ApprovalRequest) -> bool:
        asked.append(request.arguments["number"])
        return request.arguments["number"] == 1

    results = [r async for r in runner.run_many([ExecRequest(code=code, id=str(i)) for i in range(2)],
                                                tools=[tool(close_issue, approval=True)], on_approval=approve,
                                                tool_policy=ToolPolicy(max_calls=1))]
    # one call each: the budget is the item's, not the batch's; the second call is over it
    assert [r.stdout for r in results] == ["closed 1\nbudget\n"] * 2
    assert sorted(asked) == [1, 1]


def test_a_ray_batch_refuses_caller_side_tools_with_a_clear_error(tmp_path):
    with Runner(tmp_path) as runner:
        with pytest.raises(ValueError, match="caller-side tools are not available on Ray batches: "):
            runner.run_many([ExecRequest(code="1")], cluster=RayCluster(), tools=[issue_title])
