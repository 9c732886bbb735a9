"""Instances made ahead of need (`spare_instances`): bound to their view only when taken, and for
restores with the pages the last restore laid written ahead."""

import time

import pytest

from wasm_runner.engine import EngineSettings
from wasm_runner.providers.wasm.python import PythonRuntime
from wasm_runner.providers.wasm.sandbox import Call, View
from wasm_runner_protocol.execution import Limits

SETTINGS = EngineSettings(fuel=False)


@pytest.fixture
def runtime():
    runtime = PythonRuntime()
    yield runtime
    runtime.close()


def make_view(root, name):
    (root / name / "ws").mkdir(parents=True)
    (root / name / "tmp").mkdir()
    return View(workspace=root / name / "ws", tmp=root / name / "tmp")


def wait_for_spare(runtime, restoring=False):
    deadline = time.monotonic() + 30
    while not runtime.spare_ready(SETTINGS, restoring):
        assert time.monotonic() < deadline, "no instance was made ahead"
        time.sleep(0.01)


def run(kernel, code):
    call = Call(code=code, limits=Limits())
    outcome = kernel.run(call)
    return call.stdout.text(), outcome


def test_an_instance_made_ahead_sees_only_the_view_it_is_given_when_taken(runtime, tmp_path, monkeypatch):
    first, second = make_view(tmp_path, "a"), make_view(tmp_path, "b")
    (first.workspace / "which").write_text("a")
    (second.workspace / "which").write_text("b")
    runtime.new_kernel(first, Limits()).close()  # the first kernel is made inline; taking asks for a spare
    wait_for_spare(runtime)
    made_inline = []
    monkeypatch.setattr(runtime, "new_instance", lambda settings: made_inline.append(settings))
    kernel = runtime.new_kernel(second, Limits())
    try:
        kernel.warm()
        out, outcome = run(kernel, "import os\nprint(open('/workspace/which').read(), sorted(os.listdir('/workspace')))")
        assert outcome.error is None, outcome.error
        assert out == "b ['which']\n"
        assert made_inline == []  # it was the spare
    finally:
        kernel.close()


def test_a_restore_onto_an_instance_made_ahead_for_it_is_the_kernel_it_was_taken_of(runtime, tmp_path, monkeypatch):
    view = make_view(tmp_path, "s")
    original = runtime.new_kernel(view, Limits())
    original.warm()
    out, outcome = run(original, "import os\ndata = os.urandom(1 << 16)\nopen('/workspace/f', 'w').write('kept')\n"
                                 "print(len(data))")
    assert outcome.error is None and out == "65536\n", (out, outcome.error)
    image = original.capture()
    expected, _ = run(original, "print(hash(data), open('/workspace/f').read())")
    original.close()
    runtime.restored_kernel(view, Limits(), image).close()  # tells the spares which pages restores lay
    wait_for_spare(runtime, restoring=True)
    populated = []
    take = runtime._spares.take

    def watched_take(settings, restoring=False):
        spare = take(settings, restoring)
        populated.append(spare is not None and spare.populated)
        return spare

    monkeypatch.setattr(runtime._spares, "take", watched_take)
    restored = runtime.restored_kernel(view, Limits(), image)
    try:
        assert populated == [True]
        out, outcome = run(restored, "print(hash(data), open('/workspace/f').read())")
        assert outcome.error is None, outcome.error
        assert out == expected  # the same data (its hash), and the file
    finally:
        restored.close()


def test_closing_the_runtime_drops_its_spares_and_makes_no_more(runtime, tmp_path):
    view = make_view(tmp_path, "c")
    runtime.new_kernel(view, Limits()).close()
    wait_for_spare(runtime)
    runtime.close()
    assert not runtime.spare_ready(SETTINGS)
    kernel = runtime.new_kernel(view, Limits())  # still works: made inline
    kernel.close()
    time.sleep(0.1)
    assert not runtime.spare_ready(SETTINGS)
