"""The execution gate serves workspaces' queued calls in turn (no runtime needed)."""

from __future__ import annotations

import asyncio

import pytest

from wasm_runner_server.sessions.backpressure import ExecutionGate

pytestmark = pytest.mark.asyncio


async def test_a_flood_from_one_share_delays_another_share_by_one_slot_at_most():
    share = {"now": "alpha"}
    gate = ExecutionGate(limit=1, queue_size=100, queue_timeout_s=5, share_of=lambda: share["now"])
    served: list[str] = []
    release = asyncio.Event()

    async def call(name: str) -> float | None:
        async with gate.slot() as waited:
            served.append(name)
            if name == "alpha-0":
                await release.wait()
            return waited

    first = asyncio.create_task(call("alpha-0"))  # holds the only slot
    await asyncio.sleep(0)
    tasks = []
    for number in range(1, 6):
        tasks.append(asyncio.create_task(call(f"alpha-{number}")))
        await asyncio.sleep(0)
    share["now"] = "gamma"
    late = asyncio.create_task(call("gamma-0"))
    await asyncio.sleep(0)
    assert gate.queued == 6
    release.set()
    await asyncio.gather(first, late, *tasks)
    assert served[:3] == ["alpha-0", "alpha-1", "gamma-0"]  # gamma waited for one slot, not alpha's backlog
    assert served[3:] == [f"alpha-{n}" for n in range(2, 6)]  # one share's calls keep their order
    assert first.result() is None and late.result() is not None  # only a call that queued says it waited
    assert gate.queued == 0 and gate.active == 0


async def test_a_waiter_that_gives_up_leaves_no_trace_in_its_share():
    gate = ExecutionGate(limit=1, queue_size=10, queue_timeout_s=0.05)
    async with gate.slot():
        with pytest.raises(Exception) as refused:
            async with gate.slot():
                pass
        assert getattr(refused.value, "status", None) == 429
        assert gate.queued == 0
    assert gate.active == 0
