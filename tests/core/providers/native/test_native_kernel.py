"""Native Python kernels: state across calls, rich outputs, limits, restarts, kernels made ahead."""

from __future__ import annotations

import base64
import time
from pathlib import Path

import pytest

from wasm_runner import Limits, Runner
from wasm_runner.providers.native import NativeProvider
from wasm_runner.providers.native.identity import SandboxIdentity, sandbox_identity
from wasm_runner.providers.native.kernel import KERNEL_KEY
from wasm_runner.providers.native.kernel_pool import MountHolder, Slot
from wasm_runner.providers.native.toolchain import find_python_data

needs_python_data = pytest.mark.skipif(
    find_python_data() is None,
    reason="the python-data environment is not built (wasm-runner prepare / python -m wasm_runner.providers.native prepare)")

pytestmark = needs_python_data

LIMITS = Limits(timeout_s=60)


@pytest.fixture(scope="module")
def provider():
    return NativeProvider(ready_kernels=1)


@pytest.fixture(scope="module")
def runner(tmp_path_factory, provider):
    with Runner(tmp_path_factory.mktemp("native-kernels"), isolation="in-process", providers=[provider]) as runner:
        provider.prepare()
        yield runner


def run(session, code, **fields):
    fields.setdefault("limits", LIMITS)
    return session.run_sync(code, language="python", provider="native", **fields)


def new_session(runner):
    session = runner.session()
    session.workspace.ensure()
    return session


def test_a_dataframe_persists_across_three_calls(runner):
    session = new_session(runner)
    first = run(session, "import pandas as pd\ndf = pd.DataFrame({'x': [1, 2, 3]})")
    second = run(session, "df['y'] = df.x * 10")
    third = run(session, "int(df.y.sum())")
    assert (first.error, second.error, third.error) == (None, None, None), third.stderr
    assert third.value == "60"
    assert not any(r.kernel_restarted for r in (first, second, third))
    assert third.isolation == "bubblewrap"


def test_the_last_expression_comes_back_as_value_and_plain_output(runner):
    session = new_session(runner)
    result = run(session, "x = 6\nx * 7")
    assert result.value == "42"
    assert [(o.type, o.data) for o in result.outputs] == [("text/plain", "42")]
    assert run(session, "x = 1").outputs == []


def test_a_matplotlib_plot_comes_back_as_a_png_output_without_a_file(runner):
    session = new_session(runner)
    result = run(session, "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('t')\nNone")
    assert result.error is None, result.stderr
    assert [o.type for o in result.outputs] == ["image/png"]
    assert base64.b64decode(result.outputs[0].data).startswith(b"\x89PNG\r\n\x1a\n")
    assert result.files.created == [] and result.files.modified == []
    assert run(session, "plt.get_fignums()").value == "[]"  # a figure is shown once, then closed


def test_a_figure_comes_back_once_whether_it_is_the_last_expression_or_saved_to_a_file(runner):
    session = new_session(runner)
    shown = run(session, "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot([1, 2])\nfig")
    assert shown.error is None, shown.stderr
    assert [o.type for o in shown.outputs] == ["image/png"]
    saved = run(session, "fig, ax = plt.subplots()\nax.plot([1, 2])\nfig.savefig('chart.png')")
    assert saved.files.created == ["chart.png"]
    assert saved.outputs == []  # the file is the figure's one copy
    assert run(session, "plt.plot([3, 1]); plt.savefig('other.png')").outputs == []


def test_jupyter_shell_and_pip_habits_work_in_a_data_kernel(runner):
    session = new_session(runner)
    (session.path / "notes.txt").write_text("x")
    lines = run(session, "!ls\nfor i in range(2):\n    !echo line $HOME\nprint('python again')")
    assert lines.error is None, lines.stderr
    assert lines.stdout == "notes.txt\nline /workspace\nline /workspace\npython again\n"
    cell = run(session, "%%bash\nfor n in 1 2; do printf 'n%s ' $n; done; [[ -f notes.txt ]] && echo bash")
    assert cell.stdout == "n1 n2 bash\n"
    pip = run(session, "%pip --version")
    assert pip.error is None and pip.stdout.startswith("pip "), pip.stderr
    failing = run(session, "!exit 3")
    assert failing.stderr.endswith("[exit status 3]\n")
    unknown = run(session, "%timeit 1")
    assert unknown.error is not None and "%timeit is not supported here" in unknown.error.message
    # Valid Python that merely looks like a magic keeps its meaning.
    assert run(session, "s = '!ls'\ns").value == "'!ls'"


def test_a_dataframe_comes_back_as_an_html_table_with_a_plain_text_fallback(runner):
    session = new_session(runner)
    result = run(session, "import pandas as pd\npd.DataFrame({'city': ['Paris', 'Oslo'], 'n': [3, 4]})")
    [output] = result.outputs
    assert output.type == "text/html" and "<table" in output.data and "Paris" in output.data
    assert output.plain is not None and "Oslo" in output.plain and "<" not in output.plain


def test_display_and_show_keep_their_order_before_the_last_expression(runner):
    session = new_session(runner)
    code = ("import matplotlib.pyplot as plt\n"
            "display('first')\n"
            "plt.plot([1, 2]); plt.show()\n"
            "display(2)\n"
            "'last'")
    result = run(session, code)
    assert [(o.type, o.data if o.type != "image/png" else "png") for o in result.outputs] == [
        ("text/plain", "'first'"), ("image/png", "png"), ("text/plain", "2"), ("text/plain", "'last'")]


def test_fresh_runs_in_a_new_process_that_sees_the_files_but_no_state(runner):
    session = new_session(runner)
    run(session, "kept = 1\nopen('f.txt', 'w').write('on disk')")
    fresh = run(session, "print(open('f.txt').read())\nprint('kept' in globals())", fresh=True)
    assert fresh.stdout == "on disk\nFalse\n", fresh.stderr
    assert run(session, "kept").value == "1"  # the kernel is untouched by the fresh run


def test_a_deadline_interrupts_the_kernel_which_keeps_its_state(runner):
    session = new_session(runner)
    run(session, "state = 'kept'")
    hit = run(session, "while True:\n    pass", limits=Limits(timeout_s=0.5))
    assert hit.limit == "timeout" and hit.exit_code == 137
    after = run(session, "state")
    assert after.value == "'kept'" and not after.kernel_restarted


def test_a_deadline_that_lands_while_the_call_is_set_up_still_answers_and_keeps_the_state(runner):
    session = new_session(runner)
    # a finder whose cache reset is slow stretches the driver's setup of every later call (it resets
    # the import caches before the cell runs): the deadline's interrupt lands there, not in the cell
    run(session, "import sys, time\nclass Slow:\n    @staticmethod\n    def find_spec(*a):\n        return None\n"
                 "    @staticmethod\n    def invalidate_caches():\n        time.sleep(0.5)\n"
                 "sys.meta_path.append(Slow)\nstate = 'kept'")
    hit = run(session, "print('the cell ran')", limits=Limits(timeout_s=0.1))
    assert hit.limit == "timeout" and "the cell ran" not in hit.stdout
    after = run(session, "import sys\nsys.meta_path.pop()\nstate")
    assert after.value == "'kept'" and not after.kernel_restarted


def test_a_kernel_that_ignores_the_interrupt_is_killed_and_the_next_call_restarts_it(runner):
    session = new_session(runner)
    run(session, "state = 1\nopen('kept.txt', 'w').write('x')")
    hit = run(session, "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass",
              limits=Limits(timeout_s=0.5))
    assert hit.limit == "timeout"
    assert "restarted" in hit.error.message
    after = run(session, "import os\n('state' in globals(), os.path.exists('kept.txt'))")
    assert after.kernel_restarted and after.value == "(False, True)"


def test_memory_is_bounded_for_the_kernels_whole_life(runner):
    session = new_session(runner)
    limits = Limits(timeout_s=60, memory_bytes=512 * 1024 * 1024)
    run(session, "chunks = []", limits=limits)
    result = None
    for _ in range(8):  # each call keeps what it allocated: the sum passes the limit
        result = run(session, "chunks.append(b'\\x01' * (100 * 1024 * 1024)); len(chunks)", limits=limits)
        if result.limit is not None or result.error is not None:
            break
    assert result is not None and result.limit == "memory", (result.error, result.stderr[-500:])
    assert run(session, "'chunks' in globals()", limits=limits).kernel_restarted


def test_printing_past_the_output_cap_stops_the_call_and_restarts_the_kernel(runner):
    session = new_session(runner)
    hit = run(session, "print('x' * 100_000)", limits=Limits(timeout_s=60, output_bytes=10_000))
    assert hit.limit == "output" and "stdout" in hit.truncated
    assert run(session, "1").kernel_restarted


def test_a_crashed_kernel_is_reported_and_rebuilt(runner):
    session = new_session(runner)
    crash = run(session, "import os\nos._exit(3)")
    assert crash.error is not None and crash.error.type == "KernelDied"
    again = run(session, "2 + 2")
    assert again.value == "4" and again.kernel_restarted


def test_two_sessions_kernels_see_only_their_own_files_and_variables(runner):
    first, second = new_session(runner), new_session(runner)
    (first.path / "a.txt").write_text("first")
    (second.path / "b.txt").write_text("second")
    run(first, "mine = 'first'\nopen('/tmp/t1', 'w').write('1')")
    time.sleep(0.1)
    seen = run(second, "import os\n(sorted(os.listdir('.')), 't1' in os.listdir('/tmp'), 'mine' in globals())")
    assert seen.value == "(['b.txt'], False, False)", seen.stderr  # the session's venv is not among its files
    own = run(first, "import os\n(sorted(os.listdir('.')), 't1' in os.listdir('/tmp'), mine)")
    assert own.value == "(['a.txt'], True, 'first')"


def test_hibernation_drops_the_kernel_and_the_next_call_rebuilds_it_with_files_intact(runner):
    session = new_session(runner)
    run(session, "x = 1\nopen('data.csv', 'w').write('a\\n1\\n')")
    assert session.kernels == [KERNEL_KEY]
    session.hibernate()
    assert session.kernels == []
    result = run(session, "import pandas as pd\n(pd.read_csv('data.csv').a.sum(), 'x' in globals())")
    assert result.kernel_restarted and result.value == "(np.int64(1), False)"


def test_a_slot_is_mounted_in_the_pool_namespace_only_never_in_the_service_own(tmp_path):
    identity = sandbox_identity()
    if not isinstance(identity, SandboxIdentity) or not identity.dropped:
        pytest.skip("kernels are made ahead only by a root service with a usable sandbox")
    holder = MountHolder()
    try:
        slot = Slot(holder, tmp_path, identity)  # at once: the holder's namespace must exist by now
        assert str(slot.workspace.files) in Path(f"/proc/{holder.proc.pid}/mountinfo").read_text()
        assert str(tmp_path) not in Path("/proc/self/mountinfo").read_text()
        slot.remove()
        assert not slot.workspace.root.exists()
    finally:
        holder.close()


def test_a_kernel_made_ahead_that_does_not_show_the_session_is_not_used(runner, provider, monkeypatch):
    pool = provider.kernel_pool()
    if pool is None:
        pytest.skip("kernels are made ahead only by a root service with a usable sandbox")
    new_session(runner)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not pool.ready_count():
        time.sleep(0.2)
    assert pool.ready_count() == 1, pool.broken
    monkeypatch.setattr(Slot, "bind", lambda self, workspace, packages=None, venv=None: None)  # a bind that reached nothing
    session = new_session(runner)
    (session.path / "own.txt").write_text("mine")
    result = run(session, "import os\nsorted(os.listdir('.'))", limits=Limits())
    assert result.value == "['own.txt']", result  # a kernel started for the session, not the empty slot's


def test_a_kernel_made_ahead_serves_a_new_session_with_the_data_stack_imported(runner, provider):
    pool = provider.kernel_pool()
    if pool is None:
        pytest.skip("kernels are made ahead only by a root service with a usable sandbox")
    new_session(runner)  # the pool is filled for the default limits
    seen = []
    for name in ("first", "second"):  # the second from the kernel made ahead after the first was taken
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not pool.ready_count():
            time.sleep(0.2)
        assert pool.ready_count() == 1, pool.broken
        session = new_session(runner)
        (session.path / "own.txt").write_text("mine")
        (session.packages.ensure() / f"{name}_module.py").write_text(f"NAME = {name!r}\n")
        code = ("import sys, os\n"
                "try:\n    open('/packages/written', 'w')\nexcept OSError as exc:\n    refused = exc.strerror\n"
                "('pandas' in sys.modules, sorted(os.listdir('.')), os.listdir('/packages'), refused, "
                "os.path.isfile('/opt/venv/pyvenv.cfg'))")  # the session's venv, bound where the slot's was
        result = run(session, code, limits=Limits())
        assert pool.ready_count() == 0  # the ready kernel served it (a new one takes seconds to make)
        seen.append(result.value)
        assert not list(session.packages.directory.glob("written"))
    # each session's own files and packages, read-only, never the other's
    assert seen == [f"(True, ['own.txt'], ['{name}_module.py'], 'Read-only file system', True)"
                    for name in ("first", "second")]
    # (a kernel serves one session only: the pool refills with a new one in the background, so its
    # count says nothing here; the isolation test shows two sessions never share a kernel)
