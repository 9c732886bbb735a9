"""run_many and the check harness: one correct verdict per item, streamed, cancellable."""

import asyncio
import time

from wasm_runner import ExecRequest, Limits

ADD_OK = "def add(a, b):\n    return a + b"
ADD_BAD = "def add(a, b):\n    return a - b"
TESTS = "assert add(1, 2) == 3\nassert add(-1, 1) == 0"

MIXED = {
    "pass": (ExecRequest(code=ADD_OK, harness="check", tests=TESTS), "passed"),
    "fail": (ExecRequest(code=ADD_BAD, harness="check", tests=TESTS), "failed"),
    "error": (ExecRequest(code="def add(a, b):\n    return a + b\nimport nonexistent_mod", harness="check", tests=TESTS), "error"),
    "timeout": (ExecRequest(code="while True: pass", harness="check", tests=TESTS, limits=Limits(timeout_s=0.3)), "timeout"),
    "crash": (ExecRequest(code="import os\nos._exit(3)", harness="check", tests=TESTS), "error"),
    "memory": (ExecRequest(code="x = [bytearray(64 << 20) for _ in range(64)]", harness="check", tests=TESTS), "limit"),
    "flood": (ExecRequest(code="while True: print('x' * 1000)", harness="check", tests=TESTS,
                          limits=Limits(output_bytes=10_000)), "limit"),
}


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
    kinds = list(MIXED)
    weights = {"pass": 600, "fail": 300, "error": 60, "timeout": 10, "crash": 10, "memory": 10, "flood": 10}
    items = [kind for kind in kinds for _ in range(weights[kind])]
    assert len(items) == 1000

    def requests():
        for i, kind in enumerate(items):
            template, _ = MIXED[kind]
            yield ExecRequest(code=template.code, harness="check", tests=template.tests, limits=template.limits,
                              id=f"{i}:{kind}")

    verdicts = {}
    async for result in runner.run_many(requests(), concurrency=4):
        assert result.id not in verdicts
        verdicts[result.id] = result.verdict
    assert len(verdicts) == 1000
    wrong = {item: v for item, v in verdicts.items() if v != MIXED[item.split(":")[1]][1]}
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
