"""Guests on worker processes run on engines without epoch checks: a stop (deadline, output,
disk) ends the worker, which answers for its item first, and the Runner starts another."""

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wasm_runner import ExecRequest, Limits, Runner
from wasm_runner_protocol.execution import IoCase

LOOP = "print('before the loop')\nwhile True: pass"


def _mapped_engine_keys(pid: int) -> set[str]:
    """The engine settings of the compiled runtimes a process has mapped (their file names say)."""
    names = {Path(line.split()[-1]).name for line in Path(f"/proc/{pid}/maps").read_text().splitlines()
             if line.rstrip().endswith(".cwasm")}
    return {key for name in names for key in ("noepoch-fuel", "-epoch-fuel") if key in name}


def _one_shot_pids(runner: Runner) -> set[int]:
    assert runner.one_shot_workers is not None
    return {w.proc.pid for w in runner.one_shot_workers.workers if w.proc.poll() is None}


@pytest.fixture
def runner(tmp_path):
    with Runner(tmp_path, concurrency=1) as r:  # isolation="process", one one-shot worker
        assert r.run_sync("print(1)").stdout == "1\n"
        yield r


def test_the_worker_engine_has_no_epoch_checks(runner):
    [worker] = runner.one_shot_workers.workers
    assert worker.epoch_free
    assert _mapped_engine_keys(worker.proc.pid) == {"noepoch-fuel"}


def test_an_endless_loop_on_a_worker_times_out_and_the_next_run_gets_a_fresh_worker(runner):
    before = _one_shot_pids(runner)
    started = time.monotonic()
    result = runner.run_sync(LOOP, limits=Limits(timeout_s=0.5))
    assert time.monotonic() - started < 20
    assert (result.limit, result.exit_code, result.error.type) == ("timeout", 137, "LimitExceeded")
    assert "limits.timeout_s" in result.error.message and result.stdout == "before the loop\n"
    assert result.duration_ms >= 500 and result.language == "python"
    assert runner.run_sync("print('next')").stdout == "next\n"
    assert _one_shot_pids(runner).isdisjoint(before)  # the looping worker was ended


def test_a_loop_with_a_short_deadline_is_stopped_by_epoch_checks_and_keeps_its_worker(runner):
    before = _one_shot_pids(runner)
    result = runner.run_sync(LOOP, limits=Limits(timeout_s=0.1))  # a restart would cost more
    assert (result.limit, result.stdout) == ("timeout", "before the loop\n")
    assert runner.run_sync("print('next')").stdout == "next\n" and _one_shot_pids(runner) == before


def test_output_and_disk_limits_stop_a_worker_guest_as_exactly_as_before(runner):
    out = runner.run_sync("while True: print('x' * 999)", limits=Limits(timeout_s=30, output_bytes=10_000))
    assert (out.limit, out.truncated, len(out.stdout)) == ("output", ["stdout"], 10_000)
    disk = runner.run_sync("i = 0\nwhile True:\n    open(f'f{i}', 'w').write('x' * 10_000)\n    i += 1",
                           limits=Limits(timeout_s=30, disk_bytes=200_000))
    assert disk.limit == "disk" and disk.error.type == "LimitExceeded" and "quota" in disk.error.message
    js = runner.run_sync("console.log('js'); while (true) {}", language="javascript", limits=Limits(timeout_s=0.5))
    assert (js.limit, js.stdout) == ("timeout", "js\n")
    assert runner.run_sync("print(2)").stdout == "2\n"


def test_fuel_still_stops_a_worker_guest_by_itself(runner):
    before = _one_shot_pids(runner)
    result = runner.run_sync(LOOP, limits=Limits(timeout_s=60, fuel=50_000_000))
    assert (result.limit, result.stdout) == ("fuel", "before the loop\n")
    assert _one_shot_pids(runner) == before  # a trap: no worker was ended for it


def test_a_cancelled_endless_loop_on_a_worker_ends_and_the_runner_goes_on(runner):
    async def cancel_one() -> str:
        task = asyncio.create_task(runner.run(ExecRequest(code=LOOP, limits=Limits(timeout_s=60))))
        await asyncio.sleep(0.5)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return (await runner.run("print('after')")).stdout

    assert asyncio.run(cancel_one()) == "after\n"


async def test_an_endless_loop_in_a_batch_times_out_alone(tmp_path):
    with Runner(tmp_path, concurrency=2) as runner:
        requests = [ExecRequest(code=LOOP, id="loop", limits=Limits(timeout_s=0.5)),
                    ExecRequest(code="def f():\n    while True: pass", tests="f()", harness="check", id="check-loop",
                                limits=Limits(timeout_s=0.5))]
        requests += [ExecRequest(code=f"print({i})", id=str(i)) for i in range(30)]
        results = {r.id: r async for r in runner.run_many(requests, concurrency=2)}
    assert len(results) == 32 and all(results[str(i)].stdout == f"{i}\n" for i in range(30))
    assert all(results[str(i)].error is None for i in range(30))  # none lost with the ended workers
    assert (results["loop"].limit, results["loop"].stdout) == ("timeout", "before the loop\n")
    assert (results["check-loop"].limit, results["check-loop"].verdict) == ("timeout", "timeout")


def test_an_io_item_keeps_its_other_cases_when_one_loops(runner):
    code = "n = int(input())\nwhile n < 0: pass\nprint(n)"
    cases = [IoCase(stdin="1", expected="1\n"), IoCase(stdin="-1", expected="-1\n"), IoCase(stdin="3", expected="3\n")]
    result = runner.run_sync(ExecRequest(code=code, harness="io", cases=cases, limits=Limits(timeout_s=0.5)))
    assert [c.verdict for c in result.cases] == ["passed", "timeout", "passed"]
    assert result.failed_case == 1


def test_a_process_chooses_epoch_free_engines_and_a_thread_may_keep_checks():
    probe = ("from wasm_runner.engine import EngineSettings, epoch_checks, get_engine, use_epoch_free_engines\n"
             "print(EngineSettings().epoch, EngineSettings().cache_key().split('-')[0])\n"
             "use_epoch_free_engines()\n"
             "print(EngineSettings().epoch, EngineSettings(fuel=True).cache_key().split('-')[0])\n"
             "with epoch_checks():\n    print(EngineSettings().epoch)\n"
             "print(get_engine() is not get_engine(EngineSettings(epoch=True)))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True).stdout
    assert out.split("\n") == ["True epoch", "False noepoch", "True", "True", ""]


def test_a_worker_that_cannot_answer_for_its_looping_guest_is_ended_by_the_runner(runner):
    [worker] = runner.one_shot_workers.workers
    pending = runner.one_shot_workers.submit(ExecRequest(code=LOOP, limits=Limits(timeout_s=0.5)), wait=True)
    assert pending is not None and len(worker.in_flight) == 1
    os.kill(worker.proc.pid, signal.SIGSTOP)  # its own supervisor cannot answer now
    result = pending[2].result(timeout=60)
    assert (result.limit, result.exit_code) == ("timeout", 137) and "was ended" in result.error.message
    assert worker.proc.returncode == -signal.SIGKILL
    assert runner.run_sync("print('next')").stdout == "next\n"
