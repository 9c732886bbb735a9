"""Kernel state as data: saved at hibernation, restored after a restart, rolled back after a
limit, refused (with the reason in the result) when corrupted, foreign or outdated."""

import json

import pytest

from wasm_runner import Limits, Runner
from wasm_runner.snapshots.image import MAGIC

DEFINE = {
    "python": "import json, collections\nx = 41\ndef f(a):\n    return a + x\nclass C:\n    n = 2\n"
              "counts = collections.Counter('abca')\ngen = (i * i for i in range(5))\nnext(gen)",
    "javascript": "var x = 41; function f(a) { return a + x }\nclass C { static n = 2 }\nvar m = new Map([['a', 2]]);",
    "typescript": "var x: number = 41; function f(a: number): number { return a + x }\n"
                  "var m = new Map<string, number>([['a', 2]]);",
}
CHECK = {
    "python": "print(f(1), C.n, counts['a'], next(gen), json.dumps([1]))",
    "javascript": "console.log(f(1), m.get('a'))",
    "typescript": "console.log(f(1), m.get('a'))",
}
EXPECTED = {"python": "42 2 2 1 [1]\n", "javascript": "42 2\n", "typescript": "42 2\n"}


@pytest.fixture(scope="module", params=["in-process", "process"])
def isolation(request):
    return request.param


@pytest.mark.parametrize("language", ["python", "javascript", "typescript"])
def test_state_survives_hibernation_and_a_restart_of_the_runner(tmp_path, isolation, language):
    with Runner(tmp_path, isolation=isolation, kernel_workers=1) as runner:
        session = runner.session("keeps")
        assert session.run_sync(DEFINE[language], language=language).error is None
        session.hibernate(wait_s=30)
        back = session.run_sync(CHECK[language], language=language)
        assert back.stdout == EXPECTED[language] and back.kernel_restored and not back.kernel_restarted
        session.run_sync("x = 1" if language == "python" else "x = 1", language=language)
    # close() saved the kernels on the worker processes before ending them
    with Runner(tmp_path, isolation=isolation, kernel_workers=1) as runner:
        again = runner.session("keeps").run_sync(CHECK[language].replace("f(1)", "f(2)"), language=language)
        assert again.kernel_restored and again.error is None
        assert again.stdout.split()[0] == "3"  # x = 1 was the last state saved


def test_a_killed_worker_resumes_from_the_last_snapshot(tmp_path):
    """kill -9 of the process holding the kernel: the next call restores the state saved at the
    last hibernation, and says it was restored."""
    import os
    import signal

    with Runner(tmp_path, isolation="process", kernel_workers=1) as runner:
        session = runner.session("killed")
        session.run_sync("x = 'saved'")
        session.hibernate(wait_s=30)
        session.run_sync("x")  # restored into a live kernel again
        workers = runner.kernel_workers
        assert workers is not None
        host = workers.placement[session.id]
        os.kill(host.pid, signal.SIGKILL)
        host.worker.exited.wait(30)
        result = session.run_sync("x")
        assert result.value == "'saved'" and result.kernel_restored


ROLLBACKS = {
    "timeout": ("x = 'after'\nwhile True: pass", Limits(timeout_s=0.3)),
    "memory": ("x = 'after'\nhog = bytearray(1 << 30)", Limits(memory_bytes=128 << 20)),
    "fuel": ("x = 'after'\nwhile True: pass", Limits(fuel=300_000_000)),
    "output": ("x = 'after'\nprint('y' * 100_000)", Limits(output_bytes=1000)),
    "stack": ("x = 'after'\nimport sys\nsys.setrecursionlimit(10**7)\ndef r(n): return r(n + 1)\nr(0)",
              Limits(timeout_s=20)),
}


@pytest.mark.parametrize("kind", sorted(ROLLBACKS))
def test_a_call_that_hits_a_limit_leaves_the_kernel_as_it_was(runner, kind):
    code, limits = ROLLBACKS[kind]
    session = runner.session()
    session.run_sync("x = 'before'\nkept = list(range(1000))", limits=limits if kind == "fuel" else Limits())
    hit = session.run_sync(code, limits=limits)
    # deep recursion exhausts the WebAssembly stack, or the memory its frames take first
    assert hit.limit in ((kind, "memory") if kind == "stack" else (kind,)), (hit.limit, hit.error)
    assert hit.kernel_rolled_back
    after = session.run_sync("(x, len(kept))", limits=limits if kind == "fuel" else Limits())
    assert after.value == "('before', 1000)" and not after.kernel_restarted
    session.destroy()


def test_a_javascript_kernel_rolls_back_after_a_timeout(runner):
    session = runner.session()
    session.run_sync("var x = 'before';", language="javascript")
    hit = session.run_sync("x = 'after'; while (true) {}", language="javascript", limits=Limits(timeout_s=0.3))
    assert hit.limit == "timeout" and hit.kernel_rolled_back
    assert session.run_sync("x", language="javascript").value == '"before"'
    session.destroy()


def _saved(session, language="python"):
    session.run_sync("x = 'state'", language=language)
    session.hibernate(wait_s=30)
    return session.images.path(language)


def test_a_corrupted_snapshot_is_refused_and_a_new_kernel_says_why(runner):
    session = runner.session()
    path = _saved(session)
    blob = bytearray(path.read_bytes())
    blob[-100] ^= 0x55
    path.write_bytes(bytes(blob))
    result = session.run_sync("'x' in globals()")
    assert result.value == "False" and result.kernel_restarted and not result.kernel_restored
    assert "corrupted" in result.restart_reason
    session.destroy()


def test_a_snapshot_of_another_workspace_is_refused(runner):
    theirs = runner.session(owner="team-b")
    stolen = _saved(theirs).read_bytes()
    mine = runner.session(owner="team-a")
    mine.images.directory.mkdir(parents=True, exist_ok=True)
    mine.images.path("python").write_bytes(stolen)
    result = mine.run_sync("'x' in globals()")
    assert result.value == "False" and "another workspace" in result.restart_reason
    theirs.destroy()
    mine.destroy()


def test_a_snapshot_of_another_runtime_version_is_refused(runner):
    session = runner.session()
    path = _saved(session)
    blob = path.read_bytes()
    start = len(MAGIC) + 4
    size = int.from_bytes(blob[len(MAGIC):start], "little")
    header = json.loads(blob[start:start + size])
    header["key"]["wasmtime"] = "0.0.1"  # as an upgrade of the runtime would leave it
    new = json.dumps(header, sort_keys=True).encode()
    path.write_bytes(MAGIC + len(new).to_bytes(4, "little") + new + blob[start + size:])
    result = session.run_sync("'x' in globals()")
    assert result.value == "False" and result.kernel_restarted
    assert "another runtime" in result.restart_reason and "wasmtime" in result.restart_reason
    session.destroy()


def test_a_restored_kernel_behaves_as_its_original(runner):
    """The proof that the interpreter keeps nothing outside its memory that matters: after a
    restore, a battery of work (deep recursion, exceptions, generators, large allocations that
    grow the memory, imports) gives the original's answers."""
    battery = ("import sys, re, decimal\n"
               "def depth(n): return 0 if n == 0 else 1 + depth(n - 1)\n"
               "try:\n    1 / 0\nexcept ZeroDivisionError as e:\n    err = repr(e)\n"
               "big = bytearray(64 << 20)\nbig[-1] = 3\n"
               "print(depth(500), err, next(gen), sum(big), re.sub('a', 'b', 'aa'), decimal.Decimal('1.1') * 2,"
               " len(sys.modules) > 10)")
    original = runner.session()
    original.run_sync("def g():\n    yield from range(3)\ngen = g()\nnext(gen)\nwarm = [str(i) for i in range(10000)]")
    original.hibernate(wait_s=30)
    expected = "500 ZeroDivisionError('division by zero') 1 3 bb 2.2 True\n"
    first = original.run_sync(battery)
    assert first.kernel_restored and first.stdout == expected, first.stderr
    again = original.run_sync("print(next(gen), len(warm), depth(50))")
    assert again.stdout == "2 10000 50\n"
    original.destroy()


def test_a_kernel_restored_in_another_directory_can_be_saved_after_using_a_file(tmp_path, isolation):
    """A session moved (copied to another data directory: another node, a fork): its restored kernel
    opens and closes a file, and its state can still be saved and restored again."""
    import shutil

    with Runner(tmp_path / "a", isolation=isolation, kernel_workers=1) as runner:
        session = runner.session("moves")
        assert session.run_sync("x = 42\nwith open('d.txt', 'w') as f:\n    f.write('data')").error is None
        assert session.save_kernels() == {}
    shutil.copytree(tmp_path / "a" / "sessions" / "moves", tmp_path / "b" / "sessions" / "moves")
    with Runner(tmp_path / "b", isolation=isolation, kernel_workers=1) as runner:
        session = runner.session("moves")
        used = session.run_sync("with open('d.txt') as f:\n    y = f.read()\nprint(x, y)")
        assert used.stdout == "42 data\n" and used.kernel_restored
        assert session.save_kernels() == {}  # no descriptor is held: the capture is not refused
    shutil.copytree(tmp_path / "b" / "sessions" / "moves", tmp_path / "c" / "sessions" / "moves")
    with Runner(tmp_path / "c", isolation=isolation, kernel_workers=1) as runner:
        again = runner.session("moves").run_sync("print(x, y)")
        assert again.stdout == "42 data\n" and again.kernel_restored, again
