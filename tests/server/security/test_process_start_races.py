"""Starts racing the end of their session over HTTP: each answers (started, or refused with a clear
error), and no process outlives the session, whichever came first."""

from __future__ import annotations

import asyncio
import time

import pytest
from host_processes import host_processes_running
from process_calls import NATIVE_ROOT_SERVICE, SECTIONS, new_session

pytestmark = NATIVE_ROOT_SERVICE


@pytest.fixture
async def secure(start_secure):
    return await start_secure(**SECTIONS)


async def test_starts_racing_a_session_delete_are_refused_or_ended_and_leave_nothing(secure) -> None:
    marker = "4321.4375"
    answers: list[tuple[int, dict]] = []
    for delay in (0.0, 0.005, 0.01, 0.02, 0.04, 0.08):
        sid = await new_session(secure)

        async def start_one(sid: str = sid) -> None:
            status, data, _ = await secure.call("POST", f"/v1/sessions/{sid}/processes", "a_member",
                                                json={"command": ["sleep", marker]})
            answers.append((status, data))

        async def delete_soon(sid: str = sid, delay: float = delay) -> None:
            await asyncio.sleep(delay)
            started = time.monotonic()
            status, _, _ = await secure.call("DELETE", f"/v1/sessions/{sid}", "a_member")
            assert status == 204
            # a delete ends a start under way at once, never waiting for it to time out
            assert time.monotonic() - started < 5

        await asyncio.wait_for(asyncio.gather(start_one(), start_one(), start_one(), delete_soon()), 30)
        await asyncio.sleep(0.2)  # anything that would outlive the session has started by now
        assert host_processes_running(["sleep", marker]) == [], f"a process outlived its session (delay {delay})"
    for status, data in answers:
        assert status in (201, 404), data
        if status == 404:
            assert data["error"]["code"] == "session_not_found"
