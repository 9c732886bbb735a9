"""run_many and the check harness: one correct verdict per item, streamed, cancellable."""

import asyncio
import threading
import time

from batch_items import ADD_BAD, ADD_OK, TESTS, expected_verdict, mixed_items

from wasm_runner import ExecRequest, ExecResult, Limits, Runner
from wasm_runner.providers.base import Provider


async def test_check_reports_the_failing_assertion_and_its_line(runner):
    result = await runner.run(ExecRequest(code=ADD_BAD, harness="check", tests=TESTS))
    assert result.verdict == "failed"
    assert result.error.type == "AssertionError"
    assert result.error.line == 1 and result.error.source == "assert add(1, 2) == 3"


async def test_check_passes_and_keeps_output_of_both_phases(runner):
    result = await runner.run(ExecRequest(code=ADD_OK + "\nprint('program')", harness="check", tests="print('tests')\n" + TESTS))
    assert result.verdict == "passed" and result.error is None
    assert result.stdout == "program\ntests\n"


async def test_a_thousand_mixed_items_get_exactly_one_correct_verdict_each(runner):
    weights = {"pass": 550, "fail": 300, "error": 60, "timeout": 10, "crash": 10, "memory": 10, "flood": 10,
               "overflow": 10, "io-pass": 20, "io-fail": 20}
    verdicts = {}
    async for result in runner.run_many(mixed_items(weights), concurrency=4):
        assert result.id not in verdicts
        verdicts[result.id] = result.verdict
    assert len(verdicts) == 1000
    wrong = {item: v for item, v in verdicts.items() if v != expected_verdict(item)}
    assert wrong == {}


async def test_closing_the_batch_stops_running_guests_within_a_second(runner):
    def forever():
        i = 0
        while True:
            i += 1
            yield ExecRequest(code="while True: pass", limits=Limits(timeout_s=60), id=str(i))

    batch = runner.run_many(forever(), concurrency=2)
    consumer = asyncio.create_task(anext(batch))
    await asyncio.sleep(0.5)
    started = time.monotonic()
    consumer.cancel()
    await asyncio.gather(consumer, return_exceptions=True)
    await batch.aclose()
    assert time.monotonic() - started < 1.0
    assert (await asyncio.wait_for(runner.run("print('free')"), 5)).stdout == "free\n"  # workers were freed


async def test_items_never_see_files_an_earlier_item_left(runner):
    write = "open('left.txt', 'w').write('x')\nimport os\nprint(sorted(os.listdir('.')), sorted(os.listdir('/tmp')))"
    requests = [ExecRequest(code=write + ("\nopen('/tmp/t', 'w').write('y')" if i % 3 else ""), id=str(i))
                for i in range(40)]
    outputs = [result.stdout async for result in runner.run_many(requests, concurrency=2)]
    assert outputs == ["['left.txt'] []\n"] * 40


async def test_an_item_no_provider_runs_gets_its_own_result_and_the_batch_goes_on(runner):
    requests = [ExecRequest(code="print(1)", id="a"), ExecRequest(code="echo", provider="wasm", language="bash", id="b"),
                ExecRequest(code="print(2)", id="c")]
    results = {result.id: result async for result in runner.run_many(requests)}
    assert results["a"].stdout == "1\n" and results["c"].stdout == "2\n"
    assert results["b"].error.type == "InvalidRequest" and "bash" in results["b"].error.message


async def test_a_session_call_is_not_held_until_a_long_batch_ends(runner):
    session = runner.session()
    requests = (ExecRequest(code="sum(range(20000))", id=str(i)) for i in range(3000))
    batch = runner.run_many(requests)
    done = 0
    call = None
    async for _ in batch:
        done += 1
        if done == 10:
            call = asyncio.create_task(session.run("print('turn')"))
        if call is not None and call.done():
            break
    await batch.aclose()
    assert call.done() and call.result().stdout == "turn\n"
    assert done < 1000  # the session's call ran between the batch's items


class _StuckProvider(Provider):
    """Blocks on item "stuck" as a guest blocked in a host call would; runs the others at once."""

    name = "wasm"
    languages = frozenset({"python"})

    def __init__(self):
        self.release = threading.Event()

    def execute(self, job):
        job.started_at = time.monotonic()
        if job.request.id == "stuck":
            self.release.wait(30)
        job.left_entries = 0
        return ExecResult(stdout=job.request.code, id=job.request.id)


async def test_a_worker_stuck_past_its_deadline_is_answered_for_and_the_batch_goes_on(tmp_path):
    provider = _StuckProvider()
    with Runner(tmp_path, concurrency=2, isolation="in-process", providers=[provider]) as runner:
        requests = [ExecRequest(code="x", id="stuck", limits=Limits(timeout_s=0.2))]
        requests += [ExecRequest(code=str(i), id=str(i)) for i in range(200)]
        started = time.monotonic()
        results = {result.id: result async for result in runner.run_many(requests, concurrency=2)}
        provider.release.set()
    assert len(results) == 201 and all(results[str(i)].stdout == str(i) for i in range(200))
    assert results["stuck"].limit == "timeout" and runner.abandoned_workers == 1
    assert time.monotonic() - started < 10


def _worker_pids(runner):
    pool = runner.worker_pool
    return {w.proc.pid for w in pool.idle}


async def test_batch_lanes_run_in_worker_processes_kept_for_the_next_batch(runner):
    code = "import os\nprint(os.getpid() if hasattr(os, 'getpid') else 0)"
    first = [r async for r in runner.run_many([ExecRequest(code=code, id=str(i)) for i in range(20)], concurrency=2)]
    workers = _worker_pids(runner)
    assert len(workers) == 2 and all(r.exit_code == 0 for r in first)
    again = [r async for r in runner.run_many([ExecRequest(code="print(1)")] * 20, concurrency=2)]
    assert all(r.stdout == "1\n" for r in again) and _worker_pids(runner) == workers


async def test_a_worker_that_dies_loses_only_its_item_and_is_replaced(runner):
    [r async for r in runner.run_many([ExecRequest(code="pass")] * 4, concurrency=2)]  # workers started
    requests = [ExecRequest(code="import time\ntime.sleep(1)", id="slow")]
    requests += [ExecRequest(code=f"print({i})", id=str(i)) for i in range(40)]
    results = {}
    async for result in runner.run_many(requests, concurrency=2):
        results[result.id] = result
        if len(results) == 1:  # "slow" still runs: kill the worker that has it
            busy = [w for w in runner.worker_pool.lent if any(r.id == "slow" for r in w.in_flight.values())]
            busy[0].kill()
    assert len(results) == 41 and all(results[str(i)].stdout == f"{i}\n" for i in range(40))
    assert results["slow"].error.type == "HostError" and "run it again" in results["slow"].error.message
    assert len(_worker_pids(runner)) == 2


async def test_a_worker_that_cannot_start_leaves_the_batch_to_threads(tmp_path, monkeypatch):
    monkeypatch.setattr("sys.executable", "/bin/false")
    with Runner(tmp_path, isolation="in-process", concurrency=2) as runner:
        results = [r async for r in runner.run_many([ExecRequest(code=f"print({i})", id=str(i)) for i in range(10)])]
        assert sorted(r.stdout for r in results) == sorted(f"{i}\n" for i in range(10))
        assert runner.worker_pool.broken
