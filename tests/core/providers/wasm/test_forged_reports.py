"""A guest can rewrite its driver (`sys.modules['app']`, its functions and state): what it
reports after a run (descriptors opened or closed, the held output's fill counts) must not
let anything of its run reach the next run on the instance, nor more output than the cap."""

import os

import pytest

from wasm_runner import Limits, Runner
from wasm_runner.lowlevel import host_descriptors
from wasm_runner.providers.wasm import python as python_runtime
from wasm_runner.providers.wasm.python import PythonKernel
from wasm_runner.providers.wasm.sandbox import Call

pytestmark = pytest.mark.skipif(not python_runtime.PythonRuntime.reuses_instances, reason="no reuse")

FORGE_REPORT = """
import sys
app = sys.modules["app"]
app._descriptors_changed = lambda fd_base: False
app._opened[0] = 0
"""
"""Makes the driver report that the run changed no descriptor."""

PROBE_DESCRIPTORS = """
import os
seen = []
for fd in range(3, 65):
    try:
        st = os.fstat(fd)
    except OSError:
        continue
    data = b""
    try:
        os.lseek(fd, 0, 0)
        data = os.read(fd, 100)
    except OSError:
        pass
    seen.append((fd, st.st_size, data))
print([s for s in seen if s[0] >= 5 or s[2]])
"""
"""Lists what a run finds behind the descriptors beyond the preopens (3: /workspace, 4: /tmp)."""


@pytest.fixture(params=[False, True], ids=["cold", "warmed"])
def kernel(request, runtime, view):
    kernel = PythonKernel(runtime, view, Limits(), reusable=True)
    if request.param:
        kernel.warm()
    yield kernel
    kernel.close()


def run(kernel: PythonKernel, code: str, **limits) -> tuple[str, object]:
    call = Call(code=code, limits=Limits(**limits))
    outcome = kernel.run(call)
    return call.stdout.text(), outcome


@pytest.mark.parametrize("directory", ["/workspace", "/tmp"])
def test_a_deleted_file_held_open_under_a_forged_report_is_not_reused(kernel, directory):
    _, outcome = run(kernel, FORGE_REPORT + f"""
import os
fd = os.open("{directory}/secret", os.O_CREAT | os.O_RDWR)
os.write(fd, b"the secret of run A")
os.remove("{directory}/secret")
kept = open("{directory}/also", "w")
kept.write("more secret")
kept.flush()
os.remove("{directory}/also")
""")
    assert outcome.error is None, outcome.error
    assert not kernel.reset()


def test_a_directory_held_open_under_a_forged_report_is_not_reused(kernel):
    _, outcome = run(kernel, FORGE_REPORT + "import os\nos.mkdir('/tmp/d')\nfd = os.open('/tmp/d', os.O_RDONLY)\n"
                                            "os.rmdir('/tmp/d')")
    assert outcome.error is None, outcome.error
    assert not kernel.reset()


def test_a_later_run_sees_nothing_of_a_forging_run_on_the_same_instance(tmp_path, monkeypatch):
    served: list[int] = []
    run_kernel = PythonKernel.run

    def recording_run(self, call):
        served.append(id(self))
        return run_kernel(self, call)

    monkeypatch.setattr(PythonKernel, "run", recording_run)
    with Runner(tmp_path, isolation="in-process", concurrency=1) as runner:
        probes = []
        for _ in range(3):
            a = runner.run_sync(FORGE_REPORT + """
import os
for directory in ("/workspace", "/tmp"):
    fd = os.open(directory + "/secret", os.O_CREAT | os.O_RDWR)
    os.write(fd, b"the secret of run A")
    os.remove(directory + "/secret")
print("A")
""")
            assert a.stdout == "A\n", a
            probes.append(runner.run_sync(PROBE_DESCRIPTORS))
            runner.run_sync("print(1)")
    for probe in probes:
        assert probe.exit_code == 0 and probe.stdout == "[]\n", probe
        assert "secret" not in probe.stdout
    assert len(served) == 9


NEXT_RUN = ("import os, sys\nprint('out')\nprint('err', file=sys.stderr)\nprint(sys.stdin.read())\n"
            "print(sorted(os.listdir('/workspace')), sorted(os.listdir('/tmp')))")


@pytest.mark.parametrize("fds", [(0,), (1,), (2,), (1, 2), (3,), (4,), (0, 1, 2, 3, 4)])
def test_a_run_that_closes_streams_or_preopens_under_a_forged_report_leaves_no_broken_instance(runtime, view, fds):
    """The restored driver touches every stream and preopen after the reset: one the run dropped
    refuses the reuse; one whose loss does not reach the host (the next run works in full) may stay."""
    kernel = PythonKernel(runtime, view, Limits(), reusable=True)
    try:
        kernel.warm()
        _, outcome = run(kernel, FORGE_REPORT + f"import os, sys\nsys.stdout.flush()\nsys.stderr.flush()\n"
                                                f"for fd in {fds!r}:\n    os.close(fd)")
        assert outcome.error is None, outcome.error
        if kernel.reset():
            call = Call(code=NEXT_RUN, limits=Limits(), stdin="in")
            outcome = kernel.run(call)
            assert (outcome.exit_code, outcome.error) == (0, None), outcome
            assert (call.stdout.text(), call.stderr.text()) == ("out\nin\n[] []\n", "err\n")
    finally:
        kernel.close()


@pytest.mark.parametrize("fds", [(1,), (2,), (1, 2), (3,), (4,)])
def test_a_run_that_replaces_streams_or_preopens_under_a_forged_report_is_not_reused(runtime, view, fds):
    """A removed file that takes a closed descriptor's place is open on the host: the host sees it."""
    kernel = PythonKernel(runtime, view, Limits(), reusable=True)
    try:
        kernel.warm()
        _, outcome = run(kernel, FORGE_REPORT + f"""
import os, sys
sys.stdout.flush()
sys.stderr.flush()
for fd in {fds!r}:
    os.close(fd)
    assert os.open("/workspace/x" if fd != 3 else "/tmp", os.O_CREAT | os.O_RDWR if fd != 3 else os.O_RDONLY) == fd
if os.path.exists("/workspace/x"):
    os.remove("/workspace/x")
""")
        assert outcome.error is None, outcome.error
        assert not kernel.reset()
    finally:
        kernel.close()


B_RUN = ("import os\nopen('a.txt', 'w').write('x')\nprint(open('a.txt').read())\nos.remove('a.txt')\n"
         "print('y' * 100000)\nimport sys\nprint('z', file=sys.stderr)")


def test_a_run_after_one_that_replaced_its_streams_under_a_forged_report_gets_all_its_output(tmp_path):
    with Runner(tmp_path, isolation="in-process", concurrency=1) as runner:
        for _ in range(3):
            a = runner.run_sync(FORGE_REPORT + """
import os, sys
sys.stdout.flush()
sys.stderr.flush()
os.close(1)
assert os.open("/tmp/out", os.O_CREAT | os.O_RDWR) == 1
os.close(2)
assert os.open("/tmp/err", os.O_CREAT | os.O_RDWR) == 2
os.remove("/tmp/out")
os.remove("/tmp/err")
""")
            assert a.exit_code == 0, a
            b = runner.run_sync(B_RUN)
            assert (b.exit_code, b.stdout, b.stderr) == (0, "x\n" + "y" * 100000 + "\n", "z\n"), b


FORGE_FILLS = """
import sys
app = sys.modules["app"]
print("real")
sys.stdout.flush()
app._held_fill[0] = {fill}
app._held_fill[1] = {fill}
"""


@pytest.mark.parametrize("fill", [2**32 - 1, 64 * 1024 + 1, 5000])
def test_forged_fill_counts_give_no_more_than_was_printed_and_the_cap(kernel, fill):
    call = Call(code=FORGE_FILLS.format(fill=fill), limits=Limits(output_bytes=1000))
    outcome = kernel.run(call)
    assert outcome.error is None, outcome.error
    stdout, stderr = call.stdout.text(), call.stderr.text()
    assert len(stdout.encode()) <= 1000 and len(stderr.encode()) <= 1000
    assert stdout.startswith("real\n")
    # what the buffers held beyond the real output is the buffer's own bytes: never outside them
    assert set(stdout[5:]) <= {"\0"} and set(stderr) <= {"\0"}, (stdout[:50], stderr[:50])


def test_forged_fill_counts_show_nothing_of_the_run_before_on_the_instance(kernel):
    out, outcome = run(kernel, "print('SECRET-A ' * 1000)")
    assert outcome.error is None and "SECRET-A" in out
    assert kernel.reset()
    call = Call(code=FORGE_FILLS.format(fill=2**32 - 1), limits=Limits())
    outcome = kernel.run(call)
    assert outcome.error is None, outcome.error
    assert call.stdout.text().startswith("real\n")
    assert "SECRET" not in call.stdout.text() and "SECRET" not in call.stderr.text()


def test_forged_fill_counts_stay_within_the_cap_over_a_runner(tmp_path):
    with Runner(tmp_path, isolation="in-process", concurrency=1) as runner:
        result = runner.run_sync(FORGE_FILLS.format(fill=2**32 - 1), limits=Limits(output_bytes=2000))
    assert len(result.stdout.encode()) <= 2000 and len(result.stderr.encode()) <= 2000, result
    assert result.stdout.startswith("real\n")


def test_a_patched_driver_does_not_reach_the_next_run(kernel):
    _, outcome = run(kernel, """
import builtins, sys
app = sys.modules["app"]
builtins.print = lambda *a, **k: None
app._run_source = lambda code, filename=None, want_value=True: {"exit_code": 0, "value": "'forged'"}
app._exec_cell = None
app.WitWorld.run = lambda self, request: '{"exit_code": 0, "value": "forged"}'
app._hold_left[:] = [10**9, 10**9]
app._deadline[0] = float("inf")
app._loads = lambda s: {"code": "print('forged')"}
sys.modules["json"].loads = None
""")
    assert outcome.error is None, outcome.error
    assert kernel.reset()
    out, outcome = run(kernel, "import builtins, sys\nprint(sys.modules['app']._exec_cell is not None)\n6 * 7")
    assert outcome.error is None, outcome.error
    assert (out, outcome.value) == ("True\n", "42")


def test_the_compiled_descriptor_scan_is_built():
    assert host_descriptors.compiled_held_removed is not None, (
        "wasm_runner/lowlevel/_held_descriptors.c was not built (no C compiler at install?)")


@pytest.mark.parametrize("scan", ["compiled", "python"])
def test_the_scan_tells_removed_entries_below_the_directories_only(tmp_path, monkeypatch, scan):
    if scan == "python":
        monkeypatch.setattr(host_descriptors, "compiled_held_removed", None)
    (tmp_path / "ws").mkdir()
    (tmp_path / "other").mkdir()
    held = host_descriptors.HostDescriptors((tmp_path / "ws",))
    assert not held.hold_removed()
    with open(tmp_path / "other" / "f", "w"), open(tmp_path / "ws" / "present", "w"):
        (tmp_path / "other" / "f").unlink()
        assert not held.hold_removed()  # removed, but elsewhere; present, but not removed
        with open(tmp_path / "ws" / "f", "w"):
            (tmp_path / "ws" / "f").unlink()
            assert held.hold_removed()
        (tmp_path / "ws" / "d").mkdir()
        fd = os.open(tmp_path / "ws" / "d", os.O_RDONLY)
        try:
            (tmp_path / "ws" / "d").rmdir()
            assert held.hold_removed()
        finally:
            os.close(fd)
        assert not held.hold_removed()
