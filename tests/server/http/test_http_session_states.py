"""A session's state says what it is: active while a call or a background process runs, idle, and hibernated
once idle past its idle timeout; a running process (a dev server) keeps its session from hibernating."""

from __future__ import annotations

import asyncio

import pytest
from server_helpers import call, eventually, new_session, run

from wasm_runner.providers.native.bwrap import find_bwrap
from wasm_runner_server.sessions.service import SERVICE

pytestmark = pytest.mark.asyncio


async def state_of(client, sid: str) -> str:
    status, info = await call(client, "GET", f"/v1/sessions/{sid}")
    assert status == 200, info
    return info["state"]


async def idle_past_timeout(client, sid: str) -> None:
    """Let the session's idle timeout pass (its last use moved back) and run the idle sweep once."""
    service = client.server.app[SERVICE]
    live = service.sessions.sessions[sid]
    live.row.last_used_at -= live.row.idle_timeout_s + 1
    await service.sessions.sweep()


@pytest.mark.skipif(find_bwrap() is None, reason="background processes need bubblewrap")
async def test_a_session_running_a_background_process_is_active_and_does_not_hibernate(client):
    sid = await new_session(client, idle_timeout_s=60)
    await run(client, sid, "x = 1")
    status, process = await call(client, "POST", f"/v1/sessions/{sid}/processes",
                                 json={"command": ["sleep", "600"], "name": "dev-server"})
    assert status == 201, process
    assert await state_of(client, sid) == "active"

    async def process_running() -> bool:
        _, info = await call(client, "GET", f"/v1/sessions/{sid}/processes/{process['id']}")
        return info["state"] == "running"

    await eventually(process_running, timeout=20)

    await idle_past_timeout(client, sid)  # no call for longer than the idle timeout, the server still running
    assert await state_of(client, sid) == "active"
    assert await process_running()
    assert (await run(client, sid, "x"))["value"] == "1"  # the kernel was kept too

    status, _ = await call(client, "DELETE", f"/v1/sessions/{sid}/processes/{process['id']}")
    assert status in (200, 204)

    async def stopped() -> bool:
        return await state_of(client, sid) != "active"

    await eventually(stopped, timeout=20)
    assert await state_of(client, sid) == "idle"
    await idle_past_timeout(client, sid)  # with nothing running the idle timeout hibernates it
    assert await state_of(client, sid) == "hibernated"


async def test_a_session_is_idle_active_while_its_call_runs_then_idle_then_hibernated(client):
    sid = await new_session(client, idle_timeout_s=60)
    assert await state_of(client, sid) == "idle"
    running = asyncio.create_task(call(client, "POST", f"/v1/sessions/{sid}/exec",
                                       json={"code": "while True: pass", "limits": {"timeout_s": 3}}))

    async def active() -> bool:
        return await state_of(client, sid) == "active"

    await eventually(active, timeout=30)
    status, result = await running
    assert status == 200 and result["limit"] == "timeout"
    assert await state_of(client, sid) == "idle"
    await run(client, sid, "y = 2")
    await idle_past_timeout(client, sid)
    assert await state_of(client, sid) == "hibernated"
    assert (await run(client, sid, "y"))["value"] == "2"  # restored
    assert await state_of(client, sid) == "idle"
