"""The code interpreter, driven by the real `e2b-code-interpreter` SDK: run_code in the sandbox's kernels."""

from __future__ import annotations

import base64

import pytest
from e2b_code_interpreter import Sandbox

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def sandbox(e2b_service):
    sandbox = Sandbox.create()
    yield sandbox
    sandbox.kill()


def test_run_code_keeps_state_streams_output_and_returns_the_last_expression(sandbox):
    out = []
    first = sandbox.run_code("x = 20\nprint('hello')", on_stdout=lambda m: out.append(m.line))
    assert first.logs.stdout == ["hello\n"] and out == ["hello\n"] and first.error is None
    second = sandbox.run_code("x * 2 + 2")
    assert second.text == "42"
    assert [r.is_main_result for r in second.results] == [True]


def test_run_code_reports_the_guests_exception(sandbox):
    execution = sandbox.run_code("print('before')\n1 / 0")
    assert execution.logs.stdout == ["before\n"]
    assert execution.error is not None and execution.error.name == "ZeroDivisionError"
    assert "division by zero" in execution.error.value and "ZeroDivisionError" in execution.error.traceback


def test_a_matplotlib_chart_comes_back_as_png(sandbox):
    execution = sandbox.run_code(
        "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title('squares')\nplt.show()")
    assert execution.error is None, execution.error
    pngs = [r.png for r in execution.results if r.png]
    assert len(pngs) == 1 and base64.b64decode(pngs[0]).startswith(PNG_MAGIC)


def test_code_sees_the_files_and_the_commands(sandbox):
    sandbox.files.write("/home/user/table.csv", "a,b\n1,2\n3,4\n")
    execution = sandbox.run_code("import pandas as pd\ndf = pd.read_csv('table.csv')\nint(df['b'].sum())")
    assert execution.error is None, execution.error
    assert execution.text == "6"
    sandbox.run_code("open('from-python.txt', 'w').write('written by run_code')")
    assert sandbox.commands.run("cat from-python.txt").stdout == "written by run_code"


def test_contexts_and_other_languages(sandbox):
    context = sandbox.create_code_context(language="python")
    assert context.language == "python" and context.cwd == "/workspace"
    assert [c.id for c in sandbox.list_code_contexts()] == [context.id]
    sandbox.run_code("y = 5", context=context)
    assert sandbox.run_code("y + 1", context=context).text == "6"
    assert sandbox.run_code("console.log(1 + 2)", language="javascript").logs.stdout == ["3\n"]
    assert sandbox.run_code("echo from-bash", language="bash").logs.stdout == ["from-bash\n"]
    with pytest.raises(Exception, match="not supported here"):
        sandbox.run_code("1", language="cobol")


def test_pause_hibernates_and_connect_resumes(sandbox):
    """Pause is a hibernation: the files and a WebAssembly kernel's variables come back with the next
    call; python-data's kernel (native: its memory cannot be saved) starts anew and says so."""
    from e2b import SandboxQuery, SandboxState

    assert sandbox.run_code("var x = 41;", language="javascript").error is None
    assert sandbox.run_code("y = 1").error is None
    sandbox.files.write("/workspace/note.txt", "kept")
    assert Sandbox.pause(sandbox.sandbox_id) is True
    assert Sandbox.pause(sandbox.sandbox_id) is False  # already paused: E2B's 409
    assert sandbox.get_info().state == SandboxState.PAUSED
    paused = Sandbox.list(query=SandboxQuery(state=[SandboxState.PAUSED])).next_items()
    assert sandbox.sandbox_id in [s.sandbox_id for s in paused]
    running = Sandbox.list(query=SandboxQuery(state=[SandboxState.RUNNING])).next_items()
    assert sandbox.sandbox_id not in [s.sandbox_id for s in running]
    resumed = Sandbox.connect(sandbox.sandbox_id)
    assert resumed.run_code("console.log(x + 1)", language="javascript").logs.stdout == ["42\n"]
    assert resumed.files.read("/workspace/note.txt") == "kept"
    assert resumed.run_code("'y' in globals()").text == "False"
    assert resumed.get_info().state == SandboxState.RUNNING
