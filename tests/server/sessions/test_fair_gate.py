"""The execution gate serves queued calls fairly across workspaces and sessions, and refuses past its bounds
(no runtime needed)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from wasm_runner_server.errors import ApiError
from wasm_runner_server.sessions.backpressure import ExecutionGate

pytestmark = pytest.mark.asyncio


@dataclass
class Calls:
    """Calls through a gate, each holding its slot until told to finish; records the order they start."""

    gate: ExecutionGate
    share: dict[str, str] = field(default_factory=lambda: {"now": ""})
    started: list[str] = field(default_factory=list)
    finish: dict[str, asyncio.Event] = field(default_factory=dict)
    tasks: dict[str, asyncio.Task] = field(default_factory=dict)

    async def _call(self, name: str, caller: str) -> float | None:
        async with self.gate.slot(caller) as waited:
            self.started.append(name)
            await self.finish[name].wait()
            return waited

    async def send(self, name: str, workspace: str, caller: str = "") -> None:
        """Start call `name` of `workspace` (and session `caller`), and let it reach the gate."""
        self.share["now"] = workspace  # read by the gate as the call arrives
        self.finish[name] = asyncio.Event()
        self.tasks[name] = asyncio.create_task(self._call(name, caller))
        await asyncio.sleep(0)

    async def end(self, name: str) -> None:
        """Let `name` finish, and the next call (if one waits) start in its slot."""
        waiting, started = self.gate.queued, len(self.started)
        self.finish[name].set()
        await self.tasks[name]
        if waiting:
            async with asyncio.timeout(5):
                while len(self.started) == started:
                    await asyncio.sleep(0)

    async def end_all(self) -> None:
        for name in self.finish:
            self.finish[name].set()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)


def calls(limit: int, queue_size: int = 100, share_queue_size: int | None = None) -> Calls:
    share = {"now": ""}
    gate = ExecutionGate(limit=limit, queue_size=queue_size, queue_timeout_s=30, share_of=lambda: share["now"],
                         share_queue_size=share_queue_size)
    return Calls(gate, share)


async def test_two_workspaces_floods_delay_a_third_workspaces_call_by_one_slot_only():
    run = calls(limit=2)
    await run.send("alpha-0", "alpha")
    await run.send("beta-0", "beta")  # both slots are taken by the floods' first loops
    for number in range(1, 5):
        await run.send(f"alpha-{number}", "alpha")
        await run.send(f"beta-{number}", "beta")
    await run.send("gamma-0", "gamma")
    assert run.gate.queued == 9
    await run.end("alpha-0")  # the first slot that frees goes to gamma, not to a flood's backlog
    assert run.started == ["alpha-0", "beta-0", "gamma-0"]
    assert run.tasks["gamma-0"].done() is False
    await run.end("gamma-0")
    assert run.tasks["gamma-0"].result() is not None  # it queued, and says so
    assert run.tasks["alpha-0"].result() is None  # it found a free slot
    for _ in range(8):
        await run.end(run.started[-1])
    # The floods then take turns, each in its own arrival order.
    assert run.started[3:] == ["alpha-1", "beta-1", "alpha-2", "beta-2", "alpha-3", "beta-3", "alpha-4", "beta-4"]
    await run.end_all()
    assert run.gate.queued == 0 and run.gate.active == 0


async def test_a_sessions_call_is_not_queued_behind_its_workspaces_one_shot_flood():
    run = calls(limit=1)
    await run.send("oneshot-0", "alpha")
    for number in range(1, 6):
        await run.send(f"oneshot-{number}", "alpha")
    await run.send("session-a", "alpha", caller="session-a")
    await run.send("session-b", "alpha", caller="session-b")
    await run.end("oneshot-0")
    await run.end("session-a")
    await run.end("session-b")
    await run.end("oneshot-1")
    assert run.started == ["oneshot-0", "session-a", "session-b", "oneshot-1", "oneshot-2"]
    await run.end_all()


async def test_a_workspace_past_its_queue_bound_gets_429_with_retry_after_and_another_still_queues():
    run = calls(limit=1, queue_size=10, share_queue_size=2)
    await run.send("alpha-0", "alpha")
    await run.send("alpha-1", "alpha")
    await run.send("alpha-2", "alpha")
    await run.send("alpha-3", "alpha")
    refused = run.tasks["alpha-3"].exception()
    assert isinstance(refused, ApiError) and refused.status == 429
    assert int(refused.headers["Retry-After"]) >= 1
    assert "2 executions of this workspace are already waiting" in refused.message
    assert refused.hint is not None and "Retry-After" in refused.hint and "fewer calls" in refused.hint
    await run.send("gamma-0", "gamma")
    assert not run.tasks["gamma-0"].done() and run.gate.queued_in("gamma") == 1
    await run.end_all()


async def test_a_full_queue_still_takes_the_first_call_of_a_workspace_with_none_waiting():
    run = calls(limit=1, queue_size=3)
    for number in range(4):
        await run.send(f"alpha-{number}", "alpha")
    await run.send("alpha-4", "alpha")
    assert isinstance(run.tasks["alpha-4"].exception(), ApiError)  # the queue is full for alpha
    await run.send("gamma-0", "gamma")
    assert not run.tasks["gamma-0"].done()  # gamma has nothing waiting: its first call queues
    await run.send("gamma-1", "gamma")
    refused = run.tasks["gamma-1"].exception()
    assert isinstance(refused, ApiError) and refused.status == 429 and "Retry-After" in refused.headers
    await run.end("alpha-0")
    assert run.started == ["alpha-0", "gamma-0"]
    await run.end_all()


async def test_a_waiter_that_gives_up_leaves_no_trace_in_its_share():
    gate = ExecutionGate(limit=1, queue_size=10, queue_timeout_s=0.05)
    async with gate.slot():
        with pytest.raises(ApiError) as refused:
            async with gate.slot():
                pass
        assert refused.value.status == 429 and "Retry-After" in refused.value.headers
        assert gate.queued == 0
    assert gate.active == 0
