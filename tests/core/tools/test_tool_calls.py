"""The host's decision on each guest tool call (ToolRun), as a guest would make the calls (JSON)."""

import asyncio
import json
import threading

import pytest

from wasm_runner.tools import ToolPolicy, ToolRegistry, ToolRun


def add(a: int, b: int = 0) -> int:
    """Add two integers."""
    return a + b


def fail(reason: str) -> None:
    raise RuntimeError(reason)


def big(n: int) -> str:
    return "x" * n


def call(run: ToolRun, name: str, *args, **kwargs) -> dict:
    return json.loads(run.handle(json.dumps({"name": name, "args": list(args), "kwargs": kwargs})))


@pytest.fixture
def release():
    """An event the blocking tool waits on, set when the test ends (its thread then returns)."""
    event = threading.Event()
    yield event
    event.set()


def test_a_call_is_answered_and_recorded_without_its_arguments():
    run = ToolRun(ToolRegistry([add]))
    assert call(run, "add", 2, b=3) == {"ok": True, "value": 5}
    assert call(run, "add", a=40, b=2)["value"] == 42
    calls = run.close()
    assert [c.outcome for c in calls] == ["ok", "ok"]
    assert calls[0].tool == "add" and len(calls[0].arguments_sha256) == 64
    assert "40" not in repr(calls[1])  # a digest, not the values


def test_a_tool_the_run_was_not_given_is_refused_whatever_the_guest_names():
    run = ToolRun(ToolRegistry([add]).narrowed(["add"]))
    for name in ("fail", "__init__", "handle", "../add", 7, None):
        answer = json.loads(run.handle(json.dumps({"name": name, "kwargs": {"reason": "x"}})))
        assert answer["ok"] is False and answer["error"]["kind"] == "not_allowed"
    assert {c.outcome for c in run.calls} == {"not_allowed"}


@pytest.mark.parametrize("args, kwargs, says", [
    ((), {}, '"a" is a required property'),
    (("2",), {}, '"2" is not of type "integer"'),
    ((1,), {"c": 1}, "Additional properties are not allowed"),
    ((1, 2, 3), {}, "takes 2 arguments"),
    ((1,), {"a": 1}, "two values for 'a'"),
])
def test_bad_arguments_are_refused_before_the_tool_runs(args, kwargs, says):
    ran = []

    def add(a: int, b: int = 0) -> int:
        ran.append((a, b))
        return a + b

    run = ToolRun(ToolRegistry([add]))
    answer = call(run, "add", *args, **kwargs)
    assert answer["ok"] is False and answer["error"]["kind"] == "invalid_arguments"
    assert says in answer["error"]["message"]
    assert not ran and run.calls[0].outcome == "invalid_arguments"


def test_a_request_that_is_not_a_call_is_refused():
    run = ToolRun(ToolRegistry([add]))
    for text in ("not json", "[1, 2]", json.dumps({"name": "add", "args": {"a": 1}})):
        assert json.loads(run.handle(text))["error"]["kind"] == "invalid_arguments"


def test_the_tools_error_reaches_the_guest_with_its_message():
    run = ToolRun(ToolRegistry([fail]))
    answer = call(run, "fail", reason="the tracker is down")
    assert answer == {"ok": False, "error": {"kind": "tool_error", "message": "the tracker is down"}}
    assert run.calls[0].outcome == "tool_error" and run.calls[0].error == "the tracker is down"


def test_the_call_budget_is_enforced():
    run = ToolRun(ToolRegistry([add]), ToolPolicy(max_calls=3))
    answers = [call(run, "add", i) for i in range(5)]
    assert [a["ok"] for a in answers] == [True, True, True, False, False]
    assert answers[3]["error"]["kind"] == "budget" and "3 calls" in answers[3]["error"]["message"]
    assert [c.outcome for c in run.calls] == ["ok", "ok", "ok", "budget", "budget"]


def test_the_tool_time_budget_is_enforced(release):
    def slow() -> None:
        release.wait(30)

    run = ToolRun(ToolRegistry([slow]), ToolPolicy(max_total_s=0.2, call_timeout_s=10))
    first = call(run, "slow")
    assert first["error"]["kind"] == "timeout"  # waited no longer than the budget left
    second = call(run, "slow")
    assert second["error"]["kind"] == "budget" and "tool time" in second["error"]["message"]


def test_a_call_past_its_timeout_is_answered_and_the_next_call_still_runs(release):
    def stuck() -> None:
        release.wait(30)

    run = ToolRun(ToolRegistry([stuck, add]), ToolPolicy(call_timeout_s=0.2, threads=1))
    answer = call(run, "stuck")
    assert answer["error"]["kind"] == "timeout" and "did not answer within" in answer["error"]["message"]
    release.set()  # the stuck function returns; its thread serves the next call
    assert call(run, "add", 1, 1) == {"ok": True, "value": 2}


def test_no_call_waits_past_the_runs_deadline(release):
    import time

    def stuck() -> None:
        release.wait(30)

    run = ToolRun(ToolRegistry([stuck]), ToolPolicy(call_timeout_s=30), deadline=time.monotonic() + 0.2)
    assert call(run, "stuck")["error"]["kind"] == "timeout"


def test_arguments_and_results_are_capped():
    run = ToolRun(ToolRegistry([big]), ToolPolicy(max_argument_bytes=200, max_result_bytes=1000))
    assert call(run, "big", 10)["value"] == "x" * 10
    assert call(run, "big", 5000)["error"]["kind"] == "too_large"
    long = json.dumps({"name": "big", "kwargs": {"n": 1, "pad": "y" * 500}})
    assert json.loads(run.handle(long))["error"]["kind"] == "too_large"


def test_a_result_json_cannot_carry_is_a_tool_error():
    def socket_like() -> object:
        return object()

    run = ToolRun(ToolRegistry([socket_like]))
    answer = call(run, "socket_like")
    assert answer["error"]["kind"] == "tool_error" and "JSON" in answer["error"]["message"]


def test_closing_the_run_cancels_the_call_in_flight_and_refuses_later_ones(release):
    def stuck() -> None:
        release.wait(30)

    run = ToolRun(ToolRegistry([stuck, add]), ToolPolicy(call_timeout_s=30))
    answers: list[dict] = []
    guest = threading.Thread(target=lambda: answers.append(call(run, "stuck")))
    guest.start()
    for _ in range(500):  # until the call is in flight
        if run._pool is not None:
            break
        threading.Event().wait(0.01)
    run.close()
    guest.join(10)
    assert not guest.is_alive()
    assert answers[0]["error"]["kind"] == "cancelled"
    assert call(run, "add", 1)["error"]["kind"] == "cancelled"  # no call after the run ended


def test_coroutine_tools_run_on_the_callers_loop():
    async def lookup(key: str) -> str:
        await asyncio.sleep(0)
        return f"{key}@{id(asyncio.get_running_loop())}"

    async def main() -> dict:
        run = ToolRun(ToolRegistry([lookup]), loop=asyncio.get_running_loop())
        answer = await asyncio.to_thread(call, run, "lookup", key="k")  # a guest waits on another thread
        return {"answer": answer, "loop": id(asyncio.get_running_loop())}

    got = asyncio.run(main())
    assert got["answer"] == {"ok": True, "value": f"k@{got['loop']}"}
    # without a loop of the caller's, a coroutine tool runs on a loop of its own
    assert call(ToolRun(ToolRegistry([lookup])), "lookup", key="k")["ok"] is True


def test_each_decided_call_is_told_to_the_observer():
    seen = []
    run = ToolRun(ToolRegistry([add]), on_call=seen.append)
    call(run, "add", 1)
    call(run, "nope")
    assert [c.outcome for c in seen] == ["ok", "not_allowed"]


def test_inline_tools_run_on_the_guests_thread_and_default_ones_do_not():
    threads = []

    def where() -> None:
        threads.append(threading.get_ident())

    inline = ToolRun(ToolRegistry([where, fail]), ToolPolicy(inline=True))
    assert call(inline, "where")["ok"] and threads == [threading.get_ident()]
    assert call(inline, "fail", reason="down") == {"ok": False, "error": {"kind": "tool_error", "message": "down"}}
    assert call(ToolRun(ToolRegistry([where])), "where")["ok"] and threads[1] != threading.get_ident()
