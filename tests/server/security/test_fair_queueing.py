"""Workspaces share the execution slots fairly: one tenant's runaway loops cannot starve another's call, a
queued call says how long it waited, and past the bound the service answers 429 with Retry-After."""

from __future__ import annotations

import asyncio

import pytest
from server_helpers import eventually

from wasm_runner_server.sessions.service import SERVICE

pytestmark = pytest.mark.asyncio

LOOP = {"code": "while True: pass", "limits": {"timeout_s": 1.5}}


async def test_two_workspaces_loops_do_not_delay_a_third_workspaces_call_beyond_one_slot(start_secure):
    secure = await start_secure(server={"concurrency": 2})
    gate = secure.client.server.app[SERVICE].gate
    finished: list[str] = []

    async def session_of(key: str) -> str:
        status, info, _ = await secure.call("POST", "/v1/sessions", key, json={})
        assert status == 201, info
        return info["id"]

    async def exec_in(key: str, sid: str, body: dict, name: str) -> dict:
        status, result, _ = await secure.call("POST", f"/v1/sessions/{sid}/exec", key, json=body)
        assert status == 200, result
        finished.append(name)
        return result

    quick_session = await session_of("c_member")
    assert (await exec_in("c_member", quick_session, {"code": "1"}, "warm-up"))["error"] is None
    finished.clear()
    floods = {key: [await session_of(key) for _ in range(2)] for key in ("a_member", "b_member")}
    loops = []

    async def loop_in(key: str, number: int, running: int, queued: int) -> None:
        """Two runaway loops in session `number` of the workspace, once the gate holds what came before."""
        for turn in range(2):
            name = f"{key[0]}-{number}-{turn}"
            loops.append(asyncio.create_task(exec_in(key, floods[key][number], LOOP, name)))
        await eventually(lambda: _true(gate.active == running and gate.queued == queued), timeout=30)

    # Both workspaces' loops run and wait, each workspace's in the order it sent them.
    await loop_in("a_member", 0, running=1, queued=0)
    await loop_in("b_member", 0, running=2, queued=0)
    await loop_in("a_member", 1, running=2, queued=1)
    await loop_in("b_member", 1, running=2, queued=2)
    quick = await exec_in("c_member", quick_session, {"code": "print(1)"}, "gamma")
    results = await asyncio.gather(*loops)
    assert all(result["limit"] == "timeout" for result in results)
    assert quick["stdout"] == "1\n" and quick["error"] is None
    # The first slot to free after it came was its: only the loops already running then ended before it.
    assert finished.index("gamma") <= 2, finished
    assert quick["queued_ms"] is not None and quick["queued_ms"] > 0
    assert any(result["queued_ms"] is None for result in results)  # a call that found a slot free did not wait


async def test_a_workspace_past_its_queue_bound_gets_429_with_retry_after_while_another_is_served(start_secure):
    secure = await start_secure(server={"concurrency": 1, "workspace_queue_size": 1})
    gate = secure.client.server.app[SERVICE].gate
    holding = asyncio.create_task(secure.call("POST", "/v1/exec", "a_member", json=LOOP))
    await eventually(lambda: _true(gate.active == 1), timeout=30)
    waiting = asyncio.create_task(secure.call("POST", "/v1/exec", "a_member", json=LOOP))
    await eventually(lambda: _true(gate.queued == 1), timeout=30)

    status, body, headers = await secure.call("POST", "/v1/exec", "a_member", json={"code": "print(2)"})
    assert status == 429, body
    assert int(headers["Retry-After"]) >= 1
    assert body["error"]["code"] == "overloaded" and "already waiting" in body["error"]["message"]
    assert "Retry-After" in body["error"]["hint"]

    status, quick, _ = await secure.call("POST", "/v1/exec", "c_member", json={"code": "print(3)"})
    assert status == 200 and quick["stdout"] == "3\n" and quick["queued_ms"] > 0
    assert [(await task)[0] for task in (holding, waiting)] == [200, 200]


async def _true(value: bool) -> bool:
    return value
