"""Workspaces share the execution slots fairly: one tenant's runaway loops cannot starve another's call."""

from __future__ import annotations

import asyncio

import pytest

pytestmark = pytest.mark.asyncio

LOOP = {"code": "while True: pass", "limits": {"timeout_s": 0.5}}


async def test_two_workspaces_loops_delay_a_third_workspaces_call_by_one_slot_at_most(start_secure):
    secure = await start_secure(server={"concurrency": 1})
    finished: list[str] = []

    async def one_shot(key: str, body: dict, name: str) -> dict:
        status, result, _ = await secure.call("POST", "/v1/exec", key, json=body)
        assert status == 200, result
        finished.append(name)
        return result

    floods = []
    for number in range(4):  # both floods are queued before the quick call arrives
        floods.append(asyncio.create_task(one_shot("a_member", LOOP, f"alpha-{number}")))
        floods.append(asyncio.create_task(one_shot("b_member", LOOP, f"beta-{number}")))
    await asyncio.sleep(0.3)
    quick = await one_shot("c_member", {"code": "print(1)"}, "gamma")
    results = await asyncio.gather(*floods)
    assert all(result["limit"] == "timeout" for result in results)
    assert quick["stdout"] == "1\n"
    # Served in turn: the loop running when it came, then at most one loop of each other waiting workspace.
    assert finished.index("gamma") <= 3, finished
    assert quick["queued_ms"] is not None and quick["queued_ms"] > 0
