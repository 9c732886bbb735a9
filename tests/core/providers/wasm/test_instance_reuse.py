"""One-shot Python instances are reset to new and reused: nothing of a run reaches the next."""

import asyncio
import ctypes
import os
import platform
import threading
import time

import pytest

from wasm_runner import ExecRequest, Limits, Runner
from wasm_runner.engine import StopReason
from wasm_runner.lowlevel import pages, write_tracking
from wasm_runner.providers.wasm import memory_reset
from wasm_runner.providers.wasm import python as python_runtime
from wasm_runner.providers.wasm.kernel import Kernel
from wasm_runner.providers.wasm.memory_reset import PAGE
from wasm_runner.providers.wasm.python import PythonKernel
from wasm_runner.providers.wasm.sandbox import Call, View
from wasm_runner.providers.wasm.warm_pool import WarmPool

pytestmark = pytest.mark.skipif(not python_runtime.PythonRuntime.reuses_instances, reason="no reuse")


def write_tracking_available() -> bool:
    return tuple(int(part) for part in platform.release().split(".")[:2] if part.isdigit()) >= (6, 7)


@pytest.fixture(params=["compiled", "numpy"])
def page_copy(request, monkeypatch):
    """Resets copy pages with the compiled copy, then with numpy's (used where none was built)."""
    if request.param == "numpy":
        monkeypatch.setattr(pages, "compiled_copy_pages", None)
    return request.param


@pytest.fixture(params=["kernel", "page map"])
def written_pages(request, monkeypatch):
    """Pages written by a run are told by the kernel's write tracking, then read from the page
    map (where the system has no tracking)."""
    if request.param == "page map":
        monkeypatch.setattr(memory_reset, "start_tracking", lambda address, length: None)
    return request.param


@pytest.fixture
def kernel(runtime, view):
    """A reusable instance, closed after the test."""
    kernel = PythonKernel(runtime, view, Limits(), reusable=True)
    yield kernel
    kernel.close()


def run(kernel: PythonKernel, code: str, **limits) -> tuple[str, object]:
    call = Call(code=code, limits=Limits(**limits))
    outcome = kernel.run(call)
    return call.stdout.text(), outcome


def test_reset_restores_memory_byte_for_byte(kernel, page_copy):
    assert kernel._memory is not None, "the instance's memory was not located"
    out, outcome = run(kernel, "import json, random\nrandom.seed(7)\nx = [str(i) * 50 for i in range(2000)]\n"
                               "json.dumps(x)[:10]\nprint('ran')")
    assert out == "ran\n" and outcome.error is None
    assert kernel.reset()
    memory = kernel._memory
    image = memory._image
    actual = ctypes.string_at(memory.base, memory.size)
    first, end = memory._image_first * PAGE, memory._image_end * PAGE
    expected = bytes(first) + ctypes.string_at(image.address, end - first) + bytes(memory.size - end)
    assert actual == expected


def test_reset_restores_the_warmed_up_state_byte_for_byte(kernel, page_copy, written_pages):
    kernel.warm()
    memory = kernel._memory
    assert (memory._tracked is not None) == (written_pages == "kernel" and write_tracking_available())
    warmed_up = ctypes.string_at(memory.base, memory.size)
    out, outcome = run(kernel, "import os, random\nx = [bytearray(300) for _ in range(3000)]\nos.chdir('/tmp')\n"
                               "print(random.random() < 1)")
    assert out == "True\n" and outcome.error is None
    assert ctypes.string_at(memory.base, memory.size) != warmed_up
    assert kernel.reset()
    assert ctypes.string_at(memory.base, memory.size) == warmed_up


@pytest.mark.parametrize("fd", [0, 1, 2, 3, 4])
def test_a_run_that_closes_a_stream_or_preopen_of_the_warm_up_is_not_reused(kernel, fd):
    """The warmed-up state holds the handles of the standard streams and preopens: restored
    after such a run, it would name a handle the host has dropped."""
    kernel.warm()
    _, outcome = run(kernel, f"import os\nos.close({fd})")
    assert outcome.error is None, outcome.error
    assert not kernel.reset()


def test_a_run_that_closes_a_preopen_and_opens_another_directory_in_its_place_is_not_reused(kernel):
    kernel.warm()
    _, outcome = run(kernel, "import os\nos.close(3)\nassert os.open('/tmp', os.O_RDONLY) == 3")
    assert outcome.error is None, outcome.error
    assert not kernel.reset()


def test_one_shot_runs_after_one_that_closed_its_streams_work(tmp_path):
    with Runner(tmp_path, isolation="in-process", concurrency=1) as runner:
        for _ in range(3):
            assert runner.run_sync("import os\nfor fd in range(5):\n    os.close(fd)").exit_code == 0
            result = runner.run_sync("open('a.txt', 'w').write('x')\nprint(open('a.txt').read())\n"
                                     "import os\nos.remove('a.txt')")
            assert (result.exit_code, result.stdout) == (0, "x\n"), result


def test_written_pages_are_told_from_the_pagemap_flags():
    flags = memory_reset._written_flags()  # indexed by the last byte of a pagemap entry
    assert flags[0x80]  # present, anonymous: a copy the instance wrote
    assert flags[0x40]  # swapped out: only anonymous pages are, so written too
    assert not flags[0xA0]  # present, still the file's page
    assert not flags[0x00]  # never touched


def test_the_compiled_page_copy_is_built():
    assert pages.compiled_copy_pages is not None, (
        "wasm_runner/lowlevel/_page_copy.c was not built (no C compiler at install?): "
        "install gcc and run scripts/install again")


@pytest.mark.parametrize("page_copy", ["compiled", "numpy"], indirect=True)
def test_page_copy_copies_each_listed_page_and_checks_its_numbers(page_copy):
    import numpy as np

    src = np.arange(6 * PAGE, dtype=np.uint64).astype(np.uint8).reshape(6, PAGE)
    src[:, 0] = np.arange(6)
    dst = np.zeros((8, PAGE), np.uint8)
    pages.copy_pages(dst, np.array([1, 2, 3, 7]), src, np.array([0, 1, 2, 5]))
    assert (dst[[1, 2, 3, 7]] == src[[0, 1, 2, 5]]).all()
    assert not dst[[0, 4, 5, 6]].any()
    pages.copy_pages(dst, np.array([], dtype=np.int64), src, np.array([], dtype=np.int64))
    if page_copy == "compiled":
        for to, frm in (([8], [0]), ([0], [6]), ([-1], [0])):
            with pytest.raises(IndexError, match="out of range"):
                pages.copy_pages(dst, np.array(to), src, np.array(frm))
        with pytest.raises(ValueError, match="differ in length"):
            pages.copy_pages(dst, np.array([0, 1]), src, np.array([0]))
        with pytest.raises(TypeError):
            pages.copy_pages(src.tobytes(), np.array([0]), src, np.array([0]))  # not writable


def test_page_numbers_group_into_runs():
    import numpy as np

    assert memory_reset._runs(np.array([], dtype=np.int64)) == []
    assert memory_reset._runs(np.array([3, 4, 5, 9, 11, 12])) == [(3, 6), (9, 10), (11, 13)]


@pytest.mark.skipif(not write_tracking_available(), reason="asynchronous write protection needs Linux 6.7")
def test_every_page_a_run_changes_is_tracked_also_those_the_kernel_writes(kernel):
    """Pages the host's system calls fill (a file read into the guest's memory) are written
    in kernel mode: they must be told apart as well as the guest's own writes."""
    import numpy as np

    kernel.warm()
    memory = kernel._memory
    assert memory._tracked is not None
    warmed_up = np.frombuffer(ctypes.string_at(memory.base, memory.size), np.uint8).reshape(-1, PAGE)
    out, outcome = run(kernel, "import os\nopen('blob', 'wb').write(os.urandom(300_000))\n"
                               "buffer = bytearray(300_000)\nview, n = memoryview(buffer), 0\n"
                               "with open('blob', 'rb', buffering=0) as f:\n"
                               "    while n < len(buffer):\n        n += f.readinto(view[n:])\n"
                               "print(sum(buffer) > 0)")
    assert out == "True\n" and outcome.error is None
    now = np.frombuffer(ctypes.string_at(memory.base, memory.size), np.uint8).reshape(-1, PAGE)
    changed = np.flatnonzero((now != warmed_up).any(axis=1))
    assert len(changed) > 300_000 // PAGE
    assert np.isin(changed, memory._written()).all()
    assert kernel.reset()
    assert ctypes.string_at(memory.base, memory.size) == warmed_up.tobytes()


def test_a_system_without_write_tracking_gets_resets_from_the_page_map(kernel, monkeypatch, caplog):
    """Where userfaultfd is refused (a container's seccomp policy, an old kernel), the process
    says so once and resets read /proc/self/pagemap."""
    monkeypatch.setattr(write_tracking, "_opened", False)
    monkeypatch.setattr(write_tracking, "_uffd", None)
    monkeypatch.setattr(write_tracking, "_libc", _RefusingLibc(write_tracking._libc))
    with caplog.at_level("INFO", logger="wasm_runner"):
        kernel.warm()
    assert kernel._memory._tracked is None
    assert "read from the page map: userfaultfd" in caplog.text
    warmed_up = ctypes.string_at(kernel._memory.base, kernel._memory.size)
    out, outcome = run(kernel, "x = [bytearray(300) for _ in range(3000)]\nprint(len(x))")
    assert out == "3000\n" and outcome.error is None
    assert kernel.reset()
    assert ctypes.string_at(kernel._memory.base, kernel._memory.size) == warmed_up


class _RefusingLibc:
    """libc whose userfaultfd system call fails as a seccomp filter makes it fail."""

    def __init__(self, libc) -> None:
        self._libc = libc

    def syscall(self, *args) -> int:
        ctypes.set_errno(1)  # EPERM
        return -1

    def __getattr__(self, name):
        return getattr(self._libc, name)


@pytest.mark.parametrize("warmed", [False, True])
def test_nothing_of_a_run_reaches_the_next_on_the_same_instance(kernel, warmed, written_pages):
    if warmed:
        kernel.warm()
    out, _ = run(kernel, """
import builtins, sys, os, json, random
builtins.LEAK = 1
sys.modules["leaky"] = object()
json.dumps = None
os.environ["LEAK"] = "1"
sys.setrecursionlimit(50)
random.seed(1)
kept = [bytearray(100) for _ in range(1000)]
with open("/tmp/gone.txt", "w") as f:
    f.write("x")
os.remove("/tmp/gone.txt")
os.chdir("/tmp")
print("dirty")
""")
    assert out == "dirty\n"
    assert kernel.reset()
    out, outcome = run(kernel, """
import builtins, sys, os, json, random
print(hasattr(builtins, "LEAK"), "leaky" in sys.modules, json.dumps is None, "LEAK" in os.environ,
      sys.getrecursionlimit() > 50, "kept" in globals(), os.getcwd())
""")
    assert outcome.error is None, outcome.error
    assert out == "False False False False True False /workspace\n"


@pytest.mark.parametrize("warmed", [False, True])
def test_each_reused_run_draws_fresh_randomness(kernel, warmed):
    if warmed:
        kernel.warm()
    draws, uuids = set(), set()
    for _ in range(3):
        out, _ = run(kernel, "import random\nprint(random.random())")
        draws.add(out)
        assert kernel.reset()
        out, _ = run(kernel, "import uuid\nprint(uuid.uuid4())")
        uuids.add(out)
        assert kernel.reset()
    assert len(draws) == 3 and len(uuids) == 3


@pytest.mark.parametrize("code, why", [
    ("x = bytearray(64 * 1024 * 1024)", "memory grew"),
    ("f = open('/tmp/held.txt', 'w')", "a file is left open"),
    ("import os\nfs = [os.open(f'/tmp/f{i}', os.O_CREAT | os.O_WRONLY) for i in range(5)]\n"
     "[os.close(fd) for fd in fs[:-2]]", "descriptors are left open"),
])
def test_instance_is_not_reused_after(kernel, code, why):
    _, outcome = run(kernel, code)
    assert outcome.error is None, outcome.error
    assert not kernel.reset(), why


def test_files_opened_and_closed_allow_reuse(kernel):
    _, outcome = run(kernel, "import os\nfor i in range(5):\n    open(f'/tmp/f{i}', 'w').close()\n"
                             "with os.scandir('/tmp') as it:\n    names = sorted(e.name for e in it)")
    assert outcome.error is None
    assert kernel.reset()


def test_a_trapped_instance_is_not_reused(kernel):
    _, outcome = run(kernel, "while True: pass", timeout_s=0.2)
    assert outcome.limit == "timeout"
    assert not kernel.reset()


def test_a_late_stop_does_not_reach_the_next_call(kernel):
    first = Call(code="print(1)", limits=Limits())
    kernel.run(first)
    assert kernel.reset()
    second = Call(code="import time\ntime.sleep(0.3)\nprint('done')", limits=Limits())
    threading.Timer(0.1, first.stop, (StopReason.cancelled,)).start()  # the first call is long over
    outcome = kernel.run(second)
    assert outcome.limit is None and second.stdout.text() == "done\n"


def test_one_shot_runs_reuse_instances_and_stay_isolated(tmp_path, monkeypatch):
    served: list[tuple[int, int]] = []
    run_kernel = PythonKernel.run

    def recording_run(self, call):
        served.append((id(self), self.reuses))
        return run_kernel(self, call)

    monkeypatch.setattr(PythonKernel, "run", recording_run)
    with Runner(tmp_path, isolation="in-process") as runner:
        for i in range(30):
            result = runner.run_sync(f"import sys\nprint(getattr(sys, 'mark', None))\nsys.mark = {i}")
            assert result.stdout == "None\n", result
        result = runner.run_sync("open('left.txt', 'w').write('x')")  # leaves a file: not reused
        assert result.exit_code == 0
        result = runner.run_sync("import os\nprint(os.listdir('.'))")
        assert result.stdout == "[]\n"
    assert max(reuses for _, reuses in served) >= 10, served
    assert len(served) == 32


def test_reused_fuel_instances_meter_each_run(tmp_path):
    with Runner(tmp_path, isolation="in-process") as runner:
        used = [runner.run_sync("sum(range(10000))", limits=Limits(fuel=50_000_000)).fuel_used for _ in range(6)]
    assert all(u and u > 0 for u in used)
    assert max(used) < 3 * min(used), used  # a reused instance does not inherit a run's fuel


def test_a_session_kernel_is_never_reset(runtime, view):
    kernel = PythonKernel(runtime, view, Limits())
    try:
        run(kernel, "x = 1")
        assert not kernel.reset()
    finally:
        kernel.close()


async def test_cancelling_a_two_call_check_stops_its_tests(tmp_path):
    """JavaScript checks run program and tests as two calls: a cancellation during the
    tests reaches the tests call (calls are numbered, and the program's forwards to them)."""
    with Runner(tmp_path, isolation="in-process", concurrency=1) as runner:
        check = asyncio.create_task(runner.run(ExecRequest(
            code="let x = 1", tests="while (true) {}", harness="check", language="javascript",
            limits=Limits(timeout_s=30))))
        await asyncio.sleep(0.5)
        check.cancel()
        started = time.monotonic()
        result = await runner.run("print(1)")  # the only worker must be free again
        assert result.stdout == "1\n"
        assert time.monotonic() - started < 3


def test_no_reuse_while_the_process_holds_many_descriptors(kernel, monkeypatch):
    run(kernel, "x = 1")
    monkeypatch.setattr(memory_reset, "FD_VALVE_SHARE", 10**9)  # any descriptor count is "too many"
    assert not kernel.reset()


def test_a_system_that_refuses_the_reset_gets_new_instances(kernel, monkeypatch):
    run(kernel, "x = 1")

    def refuse(address):
        raise OSError(1, "not permitted")

    monkeypatch.setattr(memory_reset, "accessible", refuse)  # lowlevel.libc.accessible, as memory_reset calls it
    assert not kernel.reset()
    assert kernel._memory is None  # not tried again


def test_runs_work_when_the_memory_layout_is_not_recognised(tmp_path, monkeypatch):
    monkeypatch.setattr(memory_reset, "_locate", lambda maps, path, before: None)
    made = []
    init = PythonKernel.__init__

    def counting_init(self, *args, **kwargs):
        made.append(1)
        init(self, *args, **kwargs)

    monkeypatch.setattr(PythonKernel, "__init__", counting_init)
    with Runner(tmp_path, isolation="in-process") as runner:
        for i in range(5):
            assert runner.run_sync(f"print({i})").stdout == f"{i}\n"
    assert len(made) >= 5  # every run had a new instance


def test_a_run_that_closes_its_streams_and_directories_leaves_the_next_intact(runtime, view):
    kernel = PythonKernel(runtime, view, Limits(), reusable=True)
    probe = ("import os\nopen('/workspace/f', 'w').write('x')\nopen('/tmp/g', 'w').write('y')\n"
             "print(os.listdir('/workspace'), os.listdir('/tmp'))\nos.remove('/workspace/f')\nos.remove('/tmp/g')")
    try:
        out, _ = run(kernel, "import os, sys\nsys.stdout.flush()\nfor fd in (1, 2, 3, 4):\n    os.close(fd)")
        assert kernel.reset()
        out, outcome = run(kernel, probe)
        assert outcome.error is None, outcome.error
        assert out == "['f'] ['g']\n"
    finally:
        kernel.close()


async def test_under_load_a_result_is_delivered_before_its_worker_resets_the_instance(tmp_path, monkeypatch):
    received = threading.Event()
    waited: list[bool] = []
    settle = WarmPool.settle

    def watched_settle(self, language, view):
        waited.append(received.wait(10))  # times out if the result waited for the reset
        settle(self, language, view)

    monkeypatch.setattr(WarmPool, "settle", watched_settle)
    with Runner(tmp_path, isolation="in-process", concurrency=1) as runner:
        first = asyncio.create_task(runner.run("print(1)"))
        second = asyncio.create_task(runner.run("print(2)"))  # waits behind the first and its reset
        first.add_done_callback(lambda _: received.set())
        results = await asyncio.gather(first, second)
    assert [r.stdout for r in results] == ["1\n", "2\n"]
    assert waited[:1] == [True]


async def test_a_failing_reset_after_delivery_is_logged_and_the_worker_goes_on(tmp_path, monkeypatch, caplog):
    def failing_settle(self, language, view):
        raise RuntimeError("reset failed")

    monkeypatch.setattr(WarmPool, "settle", failing_settle)
    with Runner(tmp_path, isolation="in-process", concurrency=1) as runner:
        results = await asyncio.gather(*(runner.run(f"print({i})") for i in range(3)))
    assert [r.stdout for r in results] == ["0\n", "1\n", "2\n"]
    assert "follow-up work of an execution failed" in caplog.text


class _Instance(Kernel):
    """What the warm pool needs of an instance."""

    def run(self, call):
        raise AssertionError("the pool never runs an instance")

    def accepts(self, limits) -> bool:
        return True

    def reset(self) -> bool:
        return True

    def close(self) -> None:
        pass


def _wait_for(condition, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_the_pool_tells_a_view_whose_instance_is_being_made_from_a_ready_one(tmp_path):
    views = {}
    for name in ("quick", "slow"):
        (tmp_path / name).mkdir()
        views[name] = View(workspace=tmp_path / name, tmp=tmp_path)
    release = threading.Event()

    def make(language, view, limits):
        if view is views["slow"]:
            release.wait(10)
        return _Instance()

    pool = WarmPool(make, Limits())
    try:
        assert not pool.ready("python", views["quick"])  # nothing made yet
        pool.request("python", views["quick"])
        assert _wait_for(lambda: pool.ready("python", views["quick"]))
        pool.request("python", views["slow"])
        assert _wait_for(lambda: ("python", views["slow"]) in pool._making)
        assert not pool.ready("python", views["slow"])
        release.set()
        assert _wait_for(lambda: pool.ready("python", views["slow"]))
    finally:
        release.set()
        pool.close()


def test_a_closed_pool_ends_its_thread_also_one_waiting_for_a_free_core(tmp_path):
    (tmp_path / "w").mkdir()
    view = View(workspace=tmp_path / "w", tmp=tmp_path)

    def pool_threads():
        return [t for t in threading.enumerate() if t.name == "wasm-warm-pool"]

    before = set(pool_threads())
    idle, waiting = WarmPool(lambda *_: _Instance(), Limits()), WarmPool(lambda *_: _Instance(), Limits())
    for _ in range(os.cpu_count() or 1):
        waiting.busy()  # every core busy: its request waits for one
    waiting.request("python", view)
    threads = set(pool_threads()) - before
    assert len(threads) == 2
    idle.close()
    waiting.close()
    for thread in threads:
        thread.join(5)
    assert not any(t.is_alive() for t in threads)


def test_a_one_shot_run_takes_the_first_scratch_workspace_whose_instance_is_ready(tmp_path, monkeypatch):
    with Runner(tmp_path, isolation="in-process", concurrency=1) as runner:
        assert runner.run_sync("print(1)").stdout == "1\n"
        idle = list(runner.scratch.idle)
        assert len(idle) >= 2
        request = runner.request("print(2)")
        provider = runner.provider_for(request)
        monkeypatch.setattr(type(provider), "ready", lambda self, workspace, language: workspace is not idle[0])
        assert runner.scratch.take(provider, request.language) is idle[1]  # the first in line is waiting for its instance
        monkeypatch.setattr(type(provider), "ready", lambda self, workspace, language: False)
        assert runner.scratch.take(provider, request.language) is idle[0]  # none ready: the first in line
        runner.scratch.idle.extend([idle[0], idle[1]])
        assert runner.run_sync("print(3)").stdout == "3\n"
