"""The session venv the host makes for native installs: its files, and links it never follows."""

import os
import sys

import pytest

from wasm_runner.packages import PackageSettings
from wasm_runner.providers.native.package_env import PIP_SHIM, ensure_venv, package_tools, registry_env
from wasm_runner.providers.native.toolchain import PythonData

VERSION = "{}.{}.{}".format(*sys.version_info[:3])
TAG = "python{}.{}".format(*sys.version_info[:2])


@pytest.fixture
def data(tmp_path):
    """A stand-in python-data: a bin/python link to this interpreter."""
    (tmp_path / "python-data" / "bin").mkdir(parents=True)
    os.symlink(sys.executable, tmp_path / "python-data" / "bin" / "python")
    return PythonData(tmp_path / "python-data", VERSION, sys.base_prefix)


def test_the_venv_names_the_base_interpreter_and_layers_python_data(tmp_path, data):
    files = tmp_path / "files"
    files.mkdir()
    assert ensure_venv(files, data)
    venv = files / ".venv"
    base = os.path.realpath(sys.executable)
    assert f"home = {os.path.dirname(base)}\n" in (venv / "pyvenv.cfg").read_text()
    assert os.readlink(venv / "bin" / "python") == base
    assert (venv / "bin" / "pip").read_text() == PIP_SHIM and os.access(venv / "bin" / "pip", os.X_OK)
    [pth] = (venv / "lib" / TAG / "site-packages").glob("*.pth")
    assert f"/opt/python-data/lib/{TAG}/site-packages" in pth.read_text()
    assert sorted(p.name for p in files.iterdir()) == [".venv"]  # no staging left behind


def test_whatever_the_session_has_at_venv_is_left_alone_and_links_are_not_followed(tmp_path, data):
    outside = tmp_path / "outside"
    outside.mkdir()
    files = tmp_path / "files"
    files.mkdir()
    os.symlink(outside, files / ".venv")
    assert not ensure_venv(files, data)  # not made, and not used
    assert list(outside.iterdir()) == [] and os.readlink(files / ".venv") == str(outside)
    other = tmp_path / "other"
    other.mkdir()
    (other / ".venv").write_text("mine")
    assert not ensure_venv(other, data)
    assert (other / ".venv").read_text() == "mine"
    own = tmp_path / "own"
    (own / ".venv").mkdir(parents=True)
    (own / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    assert ensure_venv(own, data)  # the session's own venv: used as it is
    assert sorted(p.name for p in (own / ".venv").iterdir()) == ["pyvenv.cfg"]


def test_a_workspace_that_is_a_link_gets_no_venv(tmp_path, data):
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, tmp_path / "files")
    assert not ensure_venv(tmp_path / "files", data)
    assert list(real.iterdir()) == []


def test_the_tools_name_the_operators_registries_only_when_the_run_may_connect(tmp_path, data):
    settings = PackageSettings(python_index="http://pypi.internal/simple/", extra_indexes=("https://extra.example/simple/",),
                               npm_registry="https://npm.internal/")
    env = registry_env(settings)
    assert env["PIP_INDEX_URL"] == env["UV_DEFAULT_INDEX"] == "http://pypi.internal/simple/"
    assert env["PIP_EXTRA_INDEX_URL"] == "https://extra.example/simple/"
    assert env["PIP_TRUSTED_HOST"] == "pypi.internal"  # plain HTTP by the operator's choice; the https one is not
    assert env["npm_config_registry"] == env["BUN_CONFIG_REGISTRY"] == "https://npm.internal/"
    files = tmp_path / "files"
    files.mkdir()
    offline = package_tools(settings, network=False, session_files=files, python_data=data, js_toolchain=None)
    assert "PIP_INDEX_URL" not in offline.env and offline.env["VIRTUAL_ENV"] == "/workspace/.venv"
    assert offline.path[:2] == ("/workspace/.venv/bin", "/workspace/node_modules/.bin")
    one_shot = package_tools(settings, network=True, session_files=None, python_data=data, js_toolchain=None)
    assert one_shot.env == env and one_shot.path == () and not one_shot.venv
