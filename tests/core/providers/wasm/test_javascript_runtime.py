"""The JavaScript runtime (QuickJS-NG in WebAssembly): fresh runs, kernels, limits, isolation."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from wasm_runner.engine import StopReason
from wasm_runner.providers.wasm.javascript import JavaScriptRuntime
from wasm_runner.providers.wasm.sandbox import BASE_ENV, Call, View
from wasm_runner_protocol.execution import Limits, MiB


@pytest.fixture(scope="module")
def runtime() -> JavaScriptRuntime:
    return JavaScriptRuntime()


@pytest.fixture
def view(tmp_path) -> View:
    (tmp_path / "ws").mkdir()
    (tmp_path / "tmp").mkdir()
    return View(workspace=tmp_path / "ws", tmp=tmp_path / "tmp")


def run(runtime, view, code, stdin="", env=None, **limits):
    call = Call(code=code, limits=Limits(**limits), stdin=stdin, env=env or {})
    outcome = runtime.fresh(view, call)
    return outcome, call


# -- fresh execution ------------------------------------------------------------


def test_console_log(runtime, view):
    outcome, call = run(runtime, view, "console.log(1+1)")
    assert call.stdout.text() == "2\n"
    assert outcome.exit_code == 0 and outcome.error is None and outcome.limit is None


def test_console_error_goes_to_stderr_and_objects_are_inspected(runtime, view):
    outcome, call = run(runtime, view, "console.error('oops', {a: [1, 'x']}); console.log(new Map([[1, 2]]))")
    assert call.stderr.text() == "oops { a: [ 1, 'x' ] }\n"
    assert call.stdout.text() == "Map(1) { 1 => 2 }\n"


def test_modules_import_std_and_os(runtime, view):
    code = (
        "import * as std from 'std';\n"
        "import * as os from 'os';\n"
        "console.log(typeof std.open, typeof os.readdir, os.getcwd()[0]);\n"
    )
    outcome, call = run(runtime, view, code)
    assert outcome.error is None, call.stderr.text()
    assert call.stdout.text() == "function function /workspace\n"


def test_module_imports_a_workspace_file(runtime, view):
    (view.workspace / "helper.js").write_text("export const double = (x) => x * 2;\n")
    outcome, call = run(runtime, view, "import { double } from './helper.js';\nconsole.log(double(21));")
    assert outcome.error is None, call.stderr.text()
    assert call.stdout.text() == "42\n"


def test_async_await_promises_and_timers_run_to_completion_in_order(runtime, view):
    code = """
const log = [];
os.setTimeout(() => log.push('timeout 10'), 10);
setTimeout(() => log.push('timeout 0'), 0);
Promise.resolve().then(() => log.push('micro 1')).then(() => log.push('micro 2'));
log.push('sync');
for (let i = 0; i < 3; i++) await null;
log.push('after await');
await new Promise((resolve) => os.setTimeout(resolve, 20));
log.push('after sleep');
os.setTimeout(() => console.log(log.join(',')), 5);
"""
    outcome, call = run(runtime, view, code)
    assert outcome.error is None, call.stderr.text()
    assert call.stdout.text() == "sync,micro 1,micro 2,after await,timeout 0,timeout 10,after sleep\n"


def test_all_promise_jobs_run_before_a_due_timer(runtime, view):
    code = """
const log = [];
setTimeout(() => log.push('timer'), 0);
const t = Date.now();
while (Date.now() - t < 5) {}  // the timer is due now
Promise.resolve().then(() => log.push('m1')).then(() => log.push('m2')).then(() => log.push('m3'));
setTimeout(() => console.log(log.join(',')), 10);
"""
    outcome, call = run(runtime, view, code)
    assert call.stdout.text() == "m1,m2,m3,timer\n"


def test_microtasks_do_not_wait_behind_a_pending_timer(runtime, view):
    code = "os.setTimeout(() => {}, 2000); const t = Date.now(); for (let i = 0; i < 1000; i++) await null; Date.now() - t"
    start = time.monotonic()
    outcome, call = run(runtime, view, code, timeout_s=10)
    assert outcome.error is None, call.stderr.text()
    assert int(outcome.value) < 500  # the 1000 awaits did not sleep until the timer
    assert time.monotonic() - start >= 1.9  # ...and the timer still ran to completion


def test_file_written_in_one_run_is_read_in_the_next(runtime, view):
    outcome, call = run(runtime, view, "const f = std.open('out.txt', 'w'); f.puts('hello'); f.close();")
    assert outcome.error is None, call.stderr.text()
    assert (view.workspace / "out.txt").read_text() == "hello"
    outcome, call = run(runtime, view, "console.log(std.loadFile('out.txt'), JSON.stringify(os.readdir('.')[0].sort()))")
    assert call.stdout.text() == 'hello [".","..","out.txt"]\n'


def test_uncaught_exception_is_an_error_with_its_stack(runtime, view):
    code = "function inner() {\n  null.foo;\n}\ninner();"
    outcome, call = run(runtime, view, code)
    assert outcome.exit_code == 1
    assert outcome.error.type == "TypeError"
    assert "foo" in outcome.error.message
    assert "at inner (<input>:2" in outcome.error.traceback
    assert (outcome.error.line, outcome.error.source) == (2, "null.foo;")
    assert call.stderr.text().startswith("TypeError: cannot read property 'foo' of null\n    at inner")


def test_syntax_error_and_thrown_values(runtime, view):
    outcome, _ = run(runtime, view, "let = ;")
    assert outcome.exit_code == 1 and outcome.error.type == "SyntaxError"
    outcome, call = run(runtime, view, "throw {code: 7}")
    assert outcome.exit_code == 1 and outcome.error.message == "{ code: 7 }"


def test_unhandled_rejection_and_errors_in_callbacks_are_errors(runtime, view):
    outcome, call = run(runtime, view, "async function main() { throw new Error('async boom') }\nmain();")
    assert outcome.exit_code == 1 and outcome.error.message == "async boom"
    assert call.stderr.text().startswith("Uncaught (in promise) Error: async boom")
    outcome, _ = run(runtime, view, "os.setTimeout(() => { throw new RangeError('in timer') }, 1);")
    assert outcome.exit_code == 1 and outcome.error.type == "RangeError"
    outcome, _ = run(runtime, view, "queueMicrotask(() => { throw new TypeError('in job') })")
    assert outcome.exit_code == 1 and outcome.error.type == "TypeError"
    outcome, _ = run(runtime, view, "const p = Promise.reject(new Error('x')); p.catch(() => {}); 1")
    assert outcome.error is None and outcome.value == "1"


def test_awaiting_forever_ends_without_waiting_for_the_deadline(runtime, view):
    start = time.monotonic()
    outcome, _ = run(runtime, view, "await new Promise(() => {})", timeout_s=5)
    assert time.monotonic() - start < 2
    assert outcome.exit_code == 13 and outcome.error.type == "UnsettledTopLevelAwait"


def test_exit_code(runtime, view):
    outcome, _ = run(runtime, view, "std.exit(3)")
    assert outcome.exit_code == 3 and outcome.error is None


def test_stdin(runtime, view):
    outcome, _ = run(runtime, view, "JSON.stringify([std.in.getline(), std.in.readAsString()])", stdin="a\nbc\n")
    assert json.loads(json.loads(outcome.value)) == ["a", "bc\n"]


def test_math_random_differs_between_runs(runtime, view):
    values = {run(runtime, view, "Math.random()")[0].value for _ in range(3)}
    assert len(values) == 3


# -- kernel ------------------------------------------------------------------------


def test_kernel_keeps_state_and_returns_the_last_value(runtime, view):
    kernel = runtime.new_kernel(view, Limits())
    try:
        def turn(code, **kw):
            return kernel.run(Call(code=code, limits=Limits(), **kw))

        assert turn("let a = 1; const b = 2; var c = 3; function f() { return a + b + c }").value is None
        assert turn("a = 10; f()").value == "15"
        assert turn("const s = await Promise.resolve('text'); s").value == '"text"'
        assert turn("[s.length, {k: 'v'}]").value == "[ 4, { k: 'v' } ]"
        assert turn("1 + 1").value == "2"
        failed = turn("let a = 2")  # a redeclaration is an error; the kernel lives on
        assert failed.error.type == "SyntaxError" and not failed.instance_lost
        assert turn("a").value == "10"
        assert turn("std.in.getline()", stdin="line\n").value == '"line"'
        assert turn("std.in.getline()").value == "null"  # stdin belongs to one call
        assert turn("std.getenv('K')", env={"K": "v"}).value == '"v"'
        assert turn("std.getenv('K')").value is None
        assert kernel.usable
    finally:
        kernel.close()


def test_kernel_that_hits_a_limit_is_replaced(runtime, view):
    kernel = runtime.new_kernel(view, Limits(timeout_s=0.5))
    try:
        kernel.run(Call(code="globalThis.kept = 1", limits=Limits(timeout_s=0.5)))
        outcome = kernel.run(Call(code="while (true) {}", limits=Limits(timeout_s=0.5)))
        assert outcome.limit == "timeout" and outcome.instance_lost
        assert not kernel.usable
    finally:
        kernel.close()
    kernel = runtime.new_kernel(view, Limits())
    try:
        assert kernel.run(Call(code="typeof kept", limits=Limits())).value == '"undefined"'
    finally:
        kernel.close()


def test_kernel_accepts_same_engine_settings_only(runtime, view):
    kernel = runtime.new_kernel(view, Limits())
    try:
        assert kernel.accepts(Limits(timeout_s=3, memory_bytes=64 * MiB))
        assert not kernel.accepts(Limits(fuel=10**9))
    finally:
        kernel.close()
    assert not kernel.accepts(Limits())


# -- limits ------------------------------------------------------------------------


def test_infinite_loop_times_out(runtime, view):
    start = time.monotonic()
    outcome, _ = run(runtime, view, "while (true) {}", timeout_s=0.5)
    assert outcome.limit == "timeout" and outcome.exit_code != 0
    assert time.monotonic() - start < 2


@pytest.mark.parametrize("code", [
    "os.sleep(1e9)",
    "os.setTimeout(() => {}, 1e9)",
    "await os.sleepAsync(1e9)",
    "await new Promise((r) => setTimeout(r, 1e9))",
])
def test_blocked_guest_ends_at_its_deadline(runtime, view, code):
    start = time.monotonic()
    outcome, _ = run(runtime, view, code, timeout_s=0.5)
    elapsed = time.monotonic() - start
    assert outcome.limit == "timeout"
    assert 0.45 < elapsed < 1.5


def test_cancel_wakes_a_sleeping_guest(runtime, view):
    call = Call(code="os.sleep(1e9)", limits=Limits(timeout_s=30))
    threading.Timer(0.3, call.stop, args=(StopReason.cancelled,)).start()
    start = time.monotonic()
    outcome = runtime.fresh(view, call)
    assert outcome.limit == "cancelled"
    assert time.monotonic() - start < 2


def test_memory_hog_hits_the_memory_limit(runtime, view):
    code = "const a = []; while (true) a.push(new Array(1e6).fill(1));"
    outcome, call = run(runtime, view, code, memory_bytes=64 * MiB)
    assert outcome.limit == "memory"
    assert outcome.error.message == "out of memory"
    assert outcome.memory_peak_bytes <= 64 * MiB


def test_output_flood_hits_the_output_limit(runtime, view):
    code = "const s = 'x'.repeat(1e6); for (let i = 0; i < 100; i++) console.log(s);"
    outcome, call = run(runtime, view, code, output_bytes=1 * MiB)
    assert outcome.limit == "output"
    assert call.stdout.truncated
    assert len(call.stdout.text()) <= 1 * MiB


def test_fuel(runtime, view):
    outcome, _ = run(runtime, view, "let i = 0; while (true) i++;", fuel=20_000_000)
    assert outcome.limit == "fuel"
    assert outcome.fuel_used == 20_000_000
    outcome, _ = run(runtime, view, "let s = 0; for (let i = 0; i < 1000; i++) s += i; s", fuel=10**9)
    assert outcome.value == "499500" and 0 < outcome.fuel_used < 10**9


def test_deep_recursion_is_a_result(runtime, view):
    outcome, _ = run(runtime, view, "function f(n) { return n === 0 ? 0 : 1 + f(n - 1) } f(1e6)")
    assert outcome.limit == "stack" or outcome.error is not None
    outcome, _ = run(runtime, view, "function f(n) { return n === 0 ? 0 : 1 + f(n - 1) } f(500)")
    assert outcome.value == "500"


def test_memory_peak_is_reported(runtime, view):
    small, _ = run(runtime, view, "1")
    big, _ = run(runtime, view, "const a = new Uint8Array(32 * 1024 * 1024); a.length")
    assert 0 < small.memory_peak_bytes < big.memory_peak_bytes
    assert big.memory_peak_bytes >= 32 * MiB


LIMIT_PROGRAMS = {
    "timeout": ("while (true) {}", dict(timeout_s=0.3)),
    "sleep": ("os.sleep(1e9)", dict(timeout_s=0.3)),
    "memory": ("const a = []; while (true) a.push(new Array(1e6).fill(1));", dict(memory_bytes=48 * MiB)),
    "output": ("for (;;) console.log('x'.repeat(1e5));", dict(output_bytes=64 * 1024)),
    "fuel": ("for (;;) {}", dict(fuel=5_000_000)),
    "stack": ("function f() { return f() + 1 } f()", dict()),
    "exit": ("std.exit(1)", dict()),
}


@pytest.mark.parametrize("name", LIMIT_PROGRAMS)
def test_next_execution_works_after_a_limit(runtime, view, name):
    code, limits = LIMIT_PROGRAMS[name]
    outcome, _ = run(runtime, view, code, **limits)
    assert outcome.exit_code != 0
    outcome, call = run(runtime, view, "console.log('still fine')", **limits)
    assert call.stdout.text() == "still fine\n" and outcome.exit_code == 0


# -- isolation ---------------------------------------------------------------------


def test_host_files_and_escapes_are_not_reachable(runtime, view):
    code = """JSON.stringify([
  std.loadFile('/etc/passwd'),
  std.loadFile('../../../../etc/passwd'),
  std.open('/etc/hostname', 'r'),
  os.readdir('/etc')[1] !== 0,
  os.readdir('..')[0].length,
])"""
    outcome, call = run(runtime, view, code)
    assert outcome.error is None, call.stderr.text()
    assert json.loads(json.loads(outcome.value)) == [None, None, None, True, 0]


def test_environment_is_only_the_allowlist(runtime, view):
    os.environ["WASM_RUNNER_TEST_SECRET"] = "leak"
    try:
        outcome, _ = run(runtime, view, "JSON.stringify(std.getenviron())", env={"EXTRA": "1"})
    finally:
        del os.environ["WASM_RUNNER_TEST_SECRET"]
    assert json.loads(json.loads(outcome.value)) == {**BASE_ENV, "EXTRA": "1"}


def test_parallel_fresh_runs(runtime, view):
    results: list = [None] * 6

    def work(i):
        results[i] = run(runtime, view, f"await new Promise((r) => setTimeout(r, 50)); console.log({i} * 2)")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [call.stdout.text() for _, call in results] == [f"{i * 2}\n" for i in range(6)]
