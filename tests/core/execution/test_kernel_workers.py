"""Sessions' kernels on worker processes: a stuck or crashed guest costs its worker (killed,
replaced), the worker's other sessions restart on their next call and say why, files stay."""

import asyncio
import concurrent.futures
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from stuck_guest import REAL_SLEEP

from wasm_runner import Limits, Runner, WorkerPolicy
from wasm_runner.execution.containment import detect_containment
from wasm_runner.execution.kernel_workers import KernelWorkers


def started(runner: Runner) -> KernelWorkers:
    workers = runner.kernel_workers
    assert workers is not None and workers.wait_ready(120)
    return workers


@pytest.fixture
def runner(tmp_path):
    with Runner(tmp_path, kernel_workers=2, limits=Limits(timeout_s=1)) as r:
        started(r)
        yield r


def place_two_together(runner: Runner):
    """Three sessions with state and a file each: two on one worker, the third on the other."""
    workers = started(runner)
    sessions = [runner.session() for _ in range(4)]
    for i, session in enumerate(sessions):
        assert session.run_sync(f"state = {i}\nopen('f.txt', 'w').write('{i}')").ok
    by_worker: dict = {}
    for session in sessions:
        by_worker.setdefault(workers.placement[session.id], []).append(session)
    (shared, together), (_, alone) = sorted(by_worker.items(), key=lambda kv: -len(kv[1]))[:2]
    return shared, together[:2], alone[0]


def test_a_guest_stuck_in_the_host_sleep_gets_timeout_with_its_output_and_costs_only_its_worker(runner):
    workers = started(runner)
    stuck_worker, (stuck, neighbour), elsewhere = place_two_together(runner)
    threads = threading.active_count()
    began = time.monotonic()
    result = stuck.run_sync(REAL_SLEEP)
    assert time.monotonic() - began < 1 + 3
    assert result.limit == "timeout" and result.stdout == "before the sleep\n", result
    assert stuck_worker.worker.exited.wait(5)  # it retired and exited: nothing of it is left behind
    assert runner.executor.abandoned_workers == 0  # no thread of this process was given up
    assert threading.active_count() <= threads + 1
    again = neighbour.run_sync("print(open('f.txt').read())\nstate")
    assert again.kernel_restarted and "another guest on its worker process was stopped" in again.restart_reason
    assert again.stdout.strip() in "0123" and again.error.type == "NameError"  # files kept, state gone
    assert neighbour.run_sync("1 + 1").kernel_restarted is False
    untouched = elsewhere.run_sync("state")
    assert untouched.value is not None and not untouched.kernel_restarted
    assert workers.stats.restarts["deadline"] == 1 and workers.stats.deadline_kills["worker"] == 1
    assert len(workers.active) == 2 and workers.spare is not None


def test_a_killed_worker_gives_its_call_a_retryable_error_and_its_sessions_restart_with_files(runner):
    workers = started(runner)
    victim, (busy, idle), elsewhere = place_two_together(runner)

    async def crash_during_a_call():
        call = asyncio.ensure_future(busy.run("while True: pass", limits=Limits(timeout_s=30)))
        await asyncio.sleep(0.5)
        os.kill(victim.pid, signal.SIGKILL)
        return await asyncio.wait_for(call, 10)

    lost = asyncio.run(crash_during_a_call())
    assert lost.error.type == "HostError" and "may be retried" in lost.error.message, lost
    for session in (busy, idle):
        after = session.run_sync("print(open('f.txt').read())\n'state' in globals()")
        assert after.kernel_restarted and "ended unexpectedly (signal 9)" in after.restart_reason
        assert after.value == "False" and after.stdout.strip() in "0123"
    untouched = elsewhere.run_sync("state")
    assert untouched.value is not None and not untouched.kernel_restarted
    assert workers.stats.restarts["crash"] == 1
    assert victim not in workers.active


def test_the_supervisor_kills_a_worker_whose_call_is_unanswered_past_the_deadline(runner):
    workers = started(runner)
    session = runner.session()
    assert session.run_sync("x = 1").ok
    host = workers.placement[session.id]
    os.kill(host.pid, signal.SIGSTOP)  # neither the guest nor the worker's own watchdog can answer now
    while Path(f"/proc/{host.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T":
        time.sleep(0.01)  # stopped (the signal is delivered when the kernel next schedules it)
    began = time.monotonic()
    result = session.run_sync("x")
    assert result.limit == "timeout" and time.monotonic() - began < 1 + 3 + 0.5, result
    assert host.worker.exited.wait(5) and workers.stats.deadline_kills["supervisor"] == 1
    assert session.run_sync("1").ok


def test_every_call_past_its_deadline_on_a_killed_worker_gets_timeout_not_a_loss(runner):
    workers = started(runner)
    host, (first, second), _ = place_two_together(runner)
    os.kill(host.pid, signal.SIGSTOP)
    while Path(f"/proc/{host.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T":
        time.sleep(0.01)

    async def both():
        late = asyncio.create_task(asyncio.sleep(0.5, None))
        early_call = asyncio.create_task(first.run("1"))
        await late
        return await asyncio.gather(early_call, second.run("2"))  # 0.5 s later: past its deadline at the kill

    results = asyncio.run(both())
    assert [r.limit for r in results] == ["timeout", "timeout"], results
    assert host.worker.exited.wait(5) and workers.stats.deadline_kills["supervisor"] == 1


def test_a_worker_is_retired_after_its_runs_and_the_spare_takes_its_place(tmp_path):
    with Runner(tmp_path, kernel_workers=1, worker_policy=WorkerPolicy(max_runs=3)) as runner:
        workers = started(runner)
        session = runner.session()
        first = workers.active[0]
        spare = workers.spare
        for i in range(3):
            assert session.run_sync(f"n = {i}").ok
        deadline = time.monotonic() + 5
        while workers.active[0] is first and time.monotonic() < deadline:
            time.sleep(0.05)
        assert workers.active == [spare]  # started ahead: no call waits for a cold start
        result = session.run_sync("n")
        assert result.kernel_restarted and "after 3 runs" in result.restart_reason
        assert workers.stats.restarts["runs"] == 1
        assert first.worker.exited.wait(5)


def test_hibernate_and_destroy_reach_the_worker(runner):
    session = runner.session()
    session.run_sync("kept = 1\nopen('a', 'w').write('1')")
    assert session.kernels == ["python"]
    session.hibernate()
    assert session.kernels == []
    resumed = session.run_sync("(open('a').read(), kept)")
    assert resumed.kernel_restored and resumed.value == "('1', 1)"  # saved on the worker, restored there
    path = session.path
    session.destroy()
    assert not path.exists()


def test_streamed_output_reaches_the_listener_while_the_guest_runs(runner):
    session = runner.session()
    seen: list[tuple[str, bytes, float]] = []
    code = "import time, sys\nprint('first', flush=True)\ntime.sleep(0.5)\nprint('second')"
    began = time.monotonic()
    result = session.run_sync(code, listener=lambda stream, data: seen.append((stream, data, time.monotonic())))
    assert result.stdout == "first\nsecond\n"
    assert seen[0][:2] == ("stdout", b"first\n") and seen[0][2] - began < result.duration_ms / 1000


CGROUP = detect_containment(2**30)


@pytest.mark.skipif(not CGROUP.kind.startswith("cgroup"), reason=f"no writable cgroup here: {CGROUP.reason}")
def test_a_worker_past_its_memory_ceiling_is_killed_alone_and_replaced(tmp_path):
    policy = WorkerPolicy(memory_bytes=256 * 2**20, max_rss_bytes=None)
    with Runner(tmp_path, kernel_workers=2, worker_policy=policy) as runner:
        workers = started(runner)
        assert all(w.worker.cgroup is not None for w in workers.workers)
        limit_file = "memory.max" if CGROUP.kind == "cgroup-v2" else "memory.limit_in_bytes"
        assert int((workers.active[0].worker.cgroup.path / limit_file).read_text()) == 256 * 2**20
        hog, other = runner.session(), runner.session()
        assert other.run_sync("kept = 7").ok and hog.run_sync("pass").ok
        assert workers.placement[hog.id] is not workers.placement[other.id]  # the one with fewer sessions
        result = hog.run_sync("chunks = []\nwhile True: chunks.append(bytearray(16 * 2**20))",
                              limits=Limits(memory_bytes=1024 * 2**20, timeout_s=20))
        assert result.error.type == "HostError" and "may be retried" in result.error.message, result
        assert other.run_sync("kept").value == "7"
        assert workers.stats.restarts["crash"] == 1


def test_one_shot_runs_of_a_runner_with_kernel_workers_never_run_in_this_process(runner, monkeypatch):
    def in_process(*args, **kwargs):
        raise AssertionError("a guest ran in the Runner's own process")

    monkeypatch.setattr(runner.executor, "submit", in_process)
    chunks: list[bytes] = []

    async def runs():
        return (await runner.run("print(1)"), await runner.run("print(2)", listener=lambda s, d: chunks.append(d)))

    plain, streamed = asyncio.run(runs())
    assert plain.stdout == "1\n" and streamed.stdout == "2\n" and chunks == [b"2\n"]
    assert list(runner.sessions_dir.iterdir()) == [] and not list(runner.scratch_dir.glob("run-*"))


def test_a_worker_past_its_private_resident_size_is_retired(tmp_path):
    # a ceiling below any worker's size: each is retired at its first size check
    with Runner(tmp_path, kernel_workers=1, worker_policy=WorkerPolicy(max_rss_bytes=1)) as runner:
        workers = started(runner)
        session = runner.session()
        assert session.run_sync("kept = 1").ok
        first = workers.placement.get(session.id)  # none if its worker was retired already
        deadline = time.monotonic() + 10
        while first is not None and first.retiring is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert first is None or first.retiring == "memory"
        assert workers.stats.restarts["memory"] >= 1
        result = session.run_sync("'kept' in globals()")
        assert result.kernel_restarted and "MiB resident" in result.restart_reason, result


def test_a_worker_that_exits_before_it_is_watched_still_answers_its_calls(tmp_path, monkeypatch):
    """One that cannot start can exit before the supervisor watches it: its exit is reported
    all the same, and the call gets a result instead of waiting forever."""
    from wasm_runner.execution import workers

    started = workers.Worker.__init__

    def exits_first(self, *args, **kwargs):
        started(self, *args, **kwargs)
        assert self.exited.wait(30)

    monkeypatch.setattr(workers.Worker, "__init__", exits_first)
    monkeypatch.setattr("sys.executable", "/bin/false")
    with Runner(tmp_path) as runner:
        answered = concurrent.futures.ThreadPoolExecutor(1).submit(runner.session().run_sync, "print(3)")
        result = answered.result(timeout=30)
        assert result.error.type == "HostError" and "no worker process could start" in result.error.message
