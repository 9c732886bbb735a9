"""The session venv the host makes for native installs: its files, and links it never follows."""

import os
import sys

import pytest

from wasm_runner.packages import PackageSettings
from wasm_runner.providers.native.package_env import ensure_venv, package_tools, pip_shim, registry_env
from wasm_runner.providers.native.toolchain import PythonData
from wasm_runner.workspace.layout import Workspace

VERSION = "{}.{}.{}".format(*sys.version_info[:3])
TAG = "python{}.{}".format(*sys.version_info[:2])


@pytest.fixture
def data(tmp_path):
    """A stand-in python-data: a bin/python link to this interpreter."""
    (tmp_path / "python-data" / "bin").mkdir(parents=True)
    os.symlink(sys.executable, tmp_path / "python-data" / "bin" / "python")
    return PythonData(tmp_path / "python-data", VERSION, sys.base_prefix)


def test_the_venv_names_the_base_interpreter_and_layers_python_data(tmp_path, data):
    internal = tmp_path / "internal"
    assert ensure_venv(internal, data)
    venv = internal / "venv"
    base = os.path.realpath(sys.executable)
    assert f"home = {os.path.dirname(base)}\n" in (venv / "pyvenv.cfg").read_text()
    assert os.readlink(venv / "bin" / "python") == base
    assert (venv / "bin" / "pip").read_text() == pip_shim("/opt/venv") and os.access(venv / "bin" / "pip", os.X_OK)
    [pth] = (venv / "lib" / TAG / "site-packages").glob("*.pth")
    assert f"/opt/python-data/lib/{TAG}/site-packages" in pth.read_text()
    assert sorted(p.name for p in internal.iterdir()) == ["venv"]  # no staging left behind


def test_whatever_the_session_has_at_venv_is_left_alone_and_links_are_not_followed(tmp_path, data):
    outside = tmp_path / "outside"
    outside.mkdir()
    internal = tmp_path / "internal"
    internal.mkdir()
    os.symlink(outside, internal / "venv")
    assert not ensure_venv(internal, data)  # not made, and not used
    assert list(outside.iterdir()) == [] and os.readlink(internal / "venv") == str(outside)
    other = tmp_path / "other"
    other.mkdir()
    (other / "venv").write_text("mine")
    assert not ensure_venv(other, data)
    assert (other / "venv").read_text() == "mine"
    own = tmp_path / "own"
    (own / "venv").mkdir(parents=True)
    (own / "venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    assert ensure_venv(own, data)  # the session's own venv: used as it is
    assert sorted(p.name for p in (own / "venv").iterdir()) == ["pyvenv.cfg"]


def test_an_internal_directory_that_is_a_link_gets_no_venv(tmp_path, data):
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, tmp_path / "internal")
    assert not ensure_venv(tmp_path / "internal", data)
    assert list(real.iterdir()) == []


def test_the_tools_name_the_operators_registries_only_when_the_run_may_connect(tmp_path, data):
    settings = PackageSettings(python_index="http://pypi.internal/simple/", extra_indexes=("https://extra.example/simple/",),
                               npm_registry="https://npm.internal/")
    env = registry_env(settings)
    assert env["PIP_INDEX_URL"] == env["UV_DEFAULT_INDEX"] == "http://pypi.internal/simple/"
    assert env["PIP_EXTRA_INDEX_URL"] == "https://extra.example/simple/"
    assert env["PIP_TRUSTED_HOST"] == "pypi.internal"  # plain HTTP by the operator's choice; the https one is not
    assert env["npm_config_registry"] == env["BUN_CONFIG_REGISTRY"] == "https://npm.internal/"
    session = Workspace(tmp_path / "session").ensure()
    offline = package_tools(settings, network=False, session=session, python_data=data, js_toolchain=None)
    assert "PIP_INDEX_URL" not in offline.env and offline.env["VIRTUAL_ENV"] == "/opt/venv"
    assert offline.path[:2] == ("/opt/venv/bin", "/workspace/node_modules/.bin")
    [bind] = offline.binds
    assert (bind.host, bind.guest, bind.writable) == (session.internal / "venv", "/opt/venv", True)
    assert list(session.files.iterdir()) == []  # nothing of the service's among the user's files
    one_shot = package_tools(settings, network=True, session=None, python_data=data, js_toolchain=None)
    assert one_shot.env == env and one_shot.path == () and one_shot.venv is None and one_shot.binds == ()


def test_a_session_with_a_venv_among_its_files_keeps_using_it(tmp_path, data):
    session = Workspace(tmp_path / "session").ensure()
    (session.files / ".venv").mkdir()
    (session.files / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    tools = package_tools(None, network=False, session=session, python_data=data, js_toolchain=None)
    assert tools.venv == "/workspace/.venv" and tools.env["VIRTUAL_ENV"] == "/workspace/.venv"
    assert tools.binds == () and not session.internal.exists()  # no second venv made
