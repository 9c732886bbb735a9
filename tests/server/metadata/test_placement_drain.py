"""A node's drain at shutdown lets go the sessions it holds, including one busy for a moment (the end of a
call, a sweep or a checkpoint holding its lock), and leaves what stays busy past its bound to a takeover."""

import asyncio
import time
from types import SimpleNamespace

from wasm_runner_server.cluster.placement import Placement
from wasm_runner_server.metrics import Metrics
from wasm_runner_server.sessions.manager import LiveSession


class Manager:
    """What `Placement.drain` asks of the session manager: its sessions, and hibernating one."""

    def __init__(self, *ids: str) -> None:
        self.metrics = Metrics()
        self.sessions = {i: LiveSession(row=SimpleNamespace(id=i), epoch=1) for i in ids}  # type: ignore[arg-type]
        self.let_go: list[str] = []

    async def hibernate(self, live: LiveSession, wait_s: float) -> None:
        assert not live.busy
        self.let_go.append(live.row.id)


async def test_a_session_busy_when_the_drain_starts_is_let_go_once_it_is_idle():
    manager = Manager("idle", "briefly-busy", "stuck")
    placement = Placement(manager, SimpleNamespace(durable=True), leases=object())  # type: ignore[arg-type]
    await manager.sessions["briefly-busy"].lock.acquire()
    await manager.sessions["stuck"].lock.acquire()
    asyncio.get_running_loop().call_later(0.2, manager.sessions["briefly-busy"].lock.release)

    started = time.monotonic()
    await placement.drain(within_s=1.0)
    assert sorted(manager.let_go) == ["briefly-busy", "idle"]  # "stuck" keeps its lease: a takeover's
    assert 1.0 <= time.monotonic() - started < 5  # it waited out its bound for "stuck", no longer
