"""Runner(isolation="in-process", one_shot_workers=N): one-shot runs on worker processes once up, here meanwhile."""

import asyncio
import time

import pytest

from wasm_runner import ExecRequest, Limits, Runner
from wasm_runner.providers.wasm.provider import WasmProvider


async def _workers_up(runner: Runner) -> None:
    deadline = time.monotonic() + 60
    while not any(w.ready.is_set() for w in runner.one_shot_workers.workers):
        assert time.monotonic() < deadline, "no worker came up"
        await runner.run("pass")  # in-process meanwhile
        await asyncio.sleep(0.1)


@pytest.fixture
async def runner(tmp_path):
    with Runner(tmp_path, isolation="in-process", concurrency=2, one_shot_workers=1) as r:
        await _workers_up(r)
        yield r


async def test_one_shot_runs_go_to_a_worker_process_with_files_and_limits(runner, monkeypatch):
    def in_process(self, job):
        raise AssertionError("ran in the calling process")

    monkeypatch.setattr(WasmProvider, "execute", in_process)
    result = await runner.run("open('a.txt', 'w').write('x')\nprint(6 * 7)")
    assert (result.stdout, result.files.created) == ("42\n", ["a.txt"])
    result = await runner.run(ExecRequest(code="while True: pass", limits=Limits(timeout_s=0.3)))
    assert result.limit == "timeout"
    assert (await runner.run("print('next')")).stdout == "next\n"


async def test_a_cancelled_run_stops_its_guest_in_the_worker(runner):
    task = asyncio.create_task(runner.run(ExecRequest(code="while True: pass", limits=Limits(timeout_s=60))))
    await asyncio.sleep(0.5)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    started = time.monotonic()
    assert (await runner.run("print(1)")).stdout == "1\n"  # the one worker is free again
    assert time.monotonic() - started < 5


async def test_a_run_that_streams_its_output_stays_in_the_calling_process(runner, monkeypatch):
    calls = []
    execute = WasmProvider.execute
    monkeypatch.setattr(WasmProvider, "execute", lambda self, job: calls.append(job) or execute(self, job))
    chunks = []
    result = await runner.run("print('streamed')", listener=lambda stream, data: chunks.append(data))
    assert result.stdout == "streamed\n" and b"".join(chunks) == b"streamed\n" and len(calls) == 1


async def test_without_worker_processes_one_shot_runs_stay_in_process(tmp_path, monkeypatch):
    monkeypatch.setattr("sys.executable", "/bin/false")
    with Runner(tmp_path, isolation="in-process", concurrency=2, one_shot_workers=1) as runner:
        for i in range(5):
            assert (await runner.run(f"print({i})")).stdout == f"{i}\n"
            await asyncio.sleep(0.1)
        assert runner.worker_pool.broken and not runner.one_shot_workers.workers
