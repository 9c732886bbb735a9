"""Hostile Python programs: each ends as a result naming its limit, and the next run works."""

import time

import pytest

from wasm_runner import Limits

MiB = 1024 * 1024


def assert_next_run_works(runner):
    assert runner.run_sync("print('next')").stdout == "next\n"


def test_infinite_loop_stops_at_the_deadline(runner):
    started = time.monotonic()
    result = runner.run_sync("while True: pass", limits=Limits(timeout_s=0.5))
    assert result.limit == "timeout" and result.exit_code != 0
    assert "timeout_s" in result.error.message
    assert time.monotonic() - started < 3
    assert_next_run_works(runner)


@pytest.mark.parametrize(
    "code",
    [
        "import time; time.sleep(10**6)",
        "import select; select.select([], [], [], 10**6)",
        "import asyncio; asyncio.run(asyncio.sleep(10**6))",
        "import time\nwhile True: time.sleep(0.05)",
    ],
    ids=["sleep", "select", "asyncio", "sleep-loop"],
)
def test_blocking_calls_end_at_the_deadline(runner, code):
    started = time.monotonic()
    result = runner.run_sync(code, limits=Limits(timeout_s=0.5))
    assert result.limit == "timeout"
    assert time.monotonic() - started < 2
    assert runner.abandoned_workers == 0  # ended by the guest-side bound, not the watchdog
    assert_next_run_works(runner)


def test_short_sleeps_and_asyncio_still_work(runner):
    code = (
        "import asyncio, time\n"
        "async def job(i):\n    await asyncio.sleep(0.02 * i)\n    return i\n"
        "async def main():\n    return await asyncio.gather(*(job(i) for i in range(3)))\n"
        "t = time.monotonic(); time.sleep(0.05)\n"
        "(asyncio.run(main()), time.monotonic() - t >= 0.05)"
    )
    assert runner.run_sync(code).value == "([0, 1, 2], True)"


def test_fuel_limit_stops_a_cpu_bound_loop_and_reports_fuel_used(runner):
    result = runner.run_sync("x = 0\nwhile True: x += 1", limits=Limits(fuel=50_000_000, timeout_s=60))
    assert result.limit == "fuel"
    assert result.fuel_used == 50_000_000
    metered = runner.run_sync("sum(range(1000))", limits=Limits(fuel=10**9))
    assert metered.value == "499500" and 0 < metered.fuel_used < 10**9
    assert_next_run_works(runner)


def test_allocating_4_gib_hits_the_memory_limit(runner):
    code = "chunks = []\nfor _ in range(64):\n    chunks.append(bytearray(64 * 1024 * 1024))"
    result = runner.run_sync(code, limits=Limits(memory_bytes=256 * MiB))
    assert result.limit == "memory"
    assert result.error.type == "MemoryError"
    assert_next_run_works(runner)


def test_printing_100_mb_is_capped_and_reported(runner):
    result = runner.run_sync("while True: print('x' * 1000)", limits=Limits(output_bytes=100_000))
    assert result.limit == "output"
    assert result.truncated == ["stdout"]
    assert len(result.stdout) == 100_000
    single = runner.run_sync("print('y' * 100_000_000)")
    assert single.limit == "output" and len(single.stdout) == Limits().output_bytes
    assert_next_run_works(runner)


def test_stderr_flood_is_capped_separately(runner):
    result = runner.run_sync("import sys\nprint('ok')\nwhile True: sys.stderr.write('e' * 1000)",
                             limits=Limits(output_bytes=50_000))
    assert result.limit == "output" and result.truncated == ["stderr"] and result.stdout == "ok\n"


def test_writing_2_gb_into_the_workspace_stops_at_the_quota(runner):
    code = "with open('big.bin', 'wb') as f:\n    for _ in range(2048):\n        f.write(b'\\0' * (1 << 20))"
    result = runner.run_sync(code, limits=Limits(disk_bytes=64 * MiB, timeout_s=30))
    assert result.limit == "disk"
    assert "quota" in result.error.message
    assert_next_run_works(runner)


def test_a_million_files_stop_at_the_file_count_quota(runner):
    code = "import os\nos.mkdir('many')\nfor i in range(10**6):\n    open(f'many/{i}', 'w').close()"
    result = runner.run_sync(code, limits=Limits(disk_files=2_000, timeout_s=60))
    assert result.limit == "disk"
    assert_next_run_works(runner)


def test_deep_recursion_is_a_result(runner):
    default = runner.run_sync("def f(n): return f(n + 1)\nf(0)")
    assert default.error.type == "RecursionError" and default.limit is None
    raised = runner.run_sync("import sys\nsys.setrecursionlimit(10**7)\ndef f(n): return f(n + 1)\nf(0)",
                             limits=Limits(timeout_s=20))
    assert raised.limit in ("stack", "memory")
    assert_next_run_works(runner)


def test_os_exit_is_a_crash_result_not_a_host_crash(runner):
    result = runner.run_sync("import os; os._exit(5)")
    assert result.exit_code != 0 and result.error is not None
    assert_next_run_works(runner)


def test_limits_are_validated():
    with pytest.raises(ValueError):
        Limits(timeout_s=0)
    with pytest.raises(ValueError):
        Limits(memory_bytes=1024)
