"""Over HTTP: every guest runs on a worker process the service supervises; a stuck or crashed
guest costs its worker, never a thread, memory or an answer of the service."""

import asyncio
import os
import signal
import statistics
import threading
import time
from pathlib import Path

from server_helpers import call, new_session, run
from stuck_guest import REAL_SLEEP

from wasm_runner_server.sessions.service import SERVICE


def own_status(field: str) -> int:
    """A number from this process's /proc status (the service runs in it): Threads, VmRSS (kB)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


DEFAULT_EXECUTOR_BOUND = min(32, (os.cpu_count() or 1) + 4)
"""asyncio's default executor (`asyncio.to_thread`) starts its threads lazily, up to this many."""


def threads_by_kind() -> tuple[int, int]:
    """This process's threads (from /proc, so threads Python does not know count too), and how many of
    them are asyncio's default executor's, which grow lazily to their bound with the calls' concurrency."""
    pool = sum(1 for thread in threading.enumerate() if thread.name.startswith("asyncio_"))
    return own_status("Threads") - pool, pool


async def turn_p50(client, session_id: str, turns: int = 30) -> float:
    times = []
    for _ in range(turns):
        began = time.perf_counter()
        await run(client, session_id, "x + 1")
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def supervisor(client):
    service = client.server.app[SERVICE]
    (workers,) = service.pool.supervisors()
    assert workers.wait_ready(120)
    return workers


async def test_twelve_guests_stuck_in_the_host_sleep_cost_the_service_no_thread_memory_or_latency(serve):
    client = await serve(server={"concurrency": 13})
    workers = supervisor(client)
    sleepers = [await new_session(client) for _ in range(12)]
    bystander = await new_session(client)
    # Every session has its kernel, and every thread the service starts lazily exists, before the counts
    await asyncio.gather(*(run(client, sid, "x = 1") for sid in [*sleepers, bystander]))
    before_p50 = await turn_p50(client, bystander)
    (threads, pool_before), rss_kib = threads_by_kind(), own_status("VmRSS")

    async def sleep_forever(session_id: str) -> tuple[float, dict]:
        began = time.monotonic()
        result = await run(client, session_id, REAL_SLEEP, limits={"timeout_s": 1})
        return time.monotonic() - began, result

    answers = await asyncio.gather(*(sleep_forever(sid) for sid in sleepers))
    for elapsed, result in answers:
        assert elapsed < 1 + 3, (elapsed, result)
        assert result["limit"] == "timeout" and result["stdout"] == "before the sleep\n", result
    assert workers.wait_ready(60)  # the replacements are up
    after_p50 = await turn_p50(client, bystander)
    others, pool = threads_by_kind()  # (earlier tests' loops may have left pools of their own: compare)
    assert abs(others - threads) <= 2 and pool - pool_before <= DEFAULT_EXECUTOR_BOUND, (others, threads, pool)
    assert own_status("VmRSS") - rss_kib < 50 * 1024
    assert after_p50 < max(3 * before_p50, before_p50 + 0.02), (before_p50, after_p50)
    assert workers.stats.restarts["deadline"] >= 1
    metrics = await (await client.get("/metrics")).text()
    assert 'wasm_runner_worker_restarts_total{cause="deadline"}' in metrics
    assert 'wasm_runner_workers{state="serving"} 2' in metrics
    assert "wasm_runner_kernels_per_worker{worker=" in metrics


async def test_a_crashed_worker_answers_its_call_restarts_its_sessions_and_spares_the_others(serve):
    client = await serve()
    workers = supervisor(client)
    sessions = [await new_session(client) for _ in range(4)]
    for i, sid in enumerate(sessions):
        await run(client, sid, f"state = {i}\nopen('f.txt', 'w').write('{i}')")
    service = client.server.app[SERVICE]
    by_worker: dict = {}
    for sid in sessions:
        by_worker.setdefault(workers.placement[sid], []).append(sid)
    (victim, together), (_, alone) = sorted(by_worker.items(), key=lambda kv: -len(kv[1]))[:2]
    busy, idle = together[:2]
    elsewhere = alone[0]

    in_flight = asyncio.ensure_future(run(client, busy, "while True: pass", limits={"timeout_s": 30}))
    await asyncio.sleep(0.5)
    os.kill(victim.pid, signal.SIGKILL)
    lost = await asyncio.wait_for(in_flight, 10)
    assert lost["error"]["type"] == "HostError" and "may be retried" in lost["error"]["message"], lost
    status, health = await call(client, "GET", "/healthz")
    assert status == 200, health  # the service never stopped answering
    for sid in (busy, idle):
        again = await run(client, sid, "print(open('f.txt').read())\n'state' in globals()")
        assert again["kernel_restarted"] is True and "ended unexpectedly" in again["restart_reason"], again
        assert again["value"] == "False" and again["stdout"] == f"{sessions.index(sid)}\n"
    untouched = await run(client, elsewhere, "state")
    assert untouched["value"] == str(sessions.index(elsewhere)) and untouched["kernel_restarted"] is False
    metrics = await (await client.get("/metrics")).text()
    assert 'wasm_runner_worker_restarts_total{cause="crash"} 1' in metrics
    assert service.sessions.live_kernels() >= 3
