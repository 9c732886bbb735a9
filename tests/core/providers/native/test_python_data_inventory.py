"""The import names python-data offers are read from its built environment, not a hand list."""

from __future__ import annotations

from pathlib import Path

import pytest

from wasm_runner.hints import data_module_hint, with_hint
from wasm_runner.providers.native import find_python_data
from wasm_runner.providers.native.inventory import import_names, python_data_modules
from wasm_runner_protocol.execution import GuestError


def _dist(site: Path, name: str, version: str, files: list[str], top_level: str | None = None) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    record = [*files, f"{info.name}/METADATA,,", f"{info.name}/RECORD,,"]
    if top_level is not None:
        (info / "top_level.txt").write_text(top_level)
        record.append(f"{info.name}/top_level.txt,,")
    (info / "RECORD").write_text("".join(f"{line.split(',')[0]},,\n" for line in record))


def test_import_names_come_from_each_distributions_own_records(tmp_path):
    _dist(tmp_path, "scikit-learn", "1.0", ["sklearn/__init__.py", "scikit_learn.libs/libgomp.so"])
    _dist(tmp_path, "python-dateutil", "2.0", ["dateutil/__init__.py"], top_level="dateutil\n")
    _dist(tmp_path, "threadpoolctl", "3.0", ["threadpoolctl.py", "__pycache__/threadpoolctl.cpython-311.pyc"])
    _dist(tmp_path, "kiwisolver", "1.0", ["kiwisolver/_cext.cpython-311-x86_64-linux-gnu.so"])
    _dist(tmp_path, "pip", "23.0", ["pip/__init__.py"])  # the venv's own, not pinned: not offered
    names = import_names(tmp_path, ["scikit_learn", "Python-Dateutil", "threadpoolctl", "kiwisolver"])
    assert names == {"sklearn", "dateutil", "threadpoolctl", "kiwisolver"}


needs_python_data = pytest.mark.skipif(
    find_python_data() is None,
    reason="the python-data environment is not built (wasm-runner prepare)")


@needs_python_data
def test_the_built_environment_offers_its_whole_pinned_stack():
    names = python_data_modules()
    assert names is not None
    assert {"pandas", "numpy", "matplotlib", "scipy", "sklearn", "seaborn", "PIL", "kiwisolver", "fontTools",
            "dateutil"} <= names
    assert not {"pip", "setuptools", "_distutils_hack", "pkg_resources"} & names


@needs_python_data
@pytest.mark.parametrize("code, module", [("import kiwisolver", "kiwisolver"),
                                          ("from fontTools.ttLib import TTFont", "fontTools"),
                                          ("from fastapi import FastAPI", "fastapi"), ("import flask", "flask"),
                                          ("import uvicorn", "uvicorn"), ("import weasyprint", "weasyprint")])
def test_a_webassembly_import_of_a_module_only_python_data_has_names_the_profile(runner, code, module):
    result = runner.run_sync(code)
    assert result.error is not None and result.error.type == "ModuleNotFoundError"
    assert result.error.hint == data_module_hint(module)


def test_a_module_name_python_data_lacks_gets_no_hint_whatever_the_guest_writes():
    for message in ("No module named 'torch'", "No module named 'pandas; rm -rf /'", "No module named pandas"):
        error = GuestError(type="ModuleNotFoundError", message=message)
        assert with_hint(error).hint is None, message


def test_the_hint_says_how_to_reach_python_data_from_each_interface():
    hint = data_module_hint("pandas")
    assert '"profile": "python-data"' in hint and "--profile python-data" in hint
    assert 'provider="native"' in hint
