"""A Python runtime shared by a module's tests, and the two directories a kernel's view preopens."""

import pytest

from wasm_runner.providers.wasm.python import PythonRuntime
from wasm_runner.providers.wasm.sandbox import View


@pytest.fixture(scope="module")
def runtime():
    return PythonRuntime()


@pytest.fixture
def view(tmp_path):
    (tmp_path / "ws").mkdir()
    (tmp_path / "tmp").mkdir()
    return View(workspace=tmp_path / "ws", tmp=tmp_path / "tmp")
