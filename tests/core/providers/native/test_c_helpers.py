"""The compiled helpers run with the service's privileges: one is used only while no other user can
replace it (the helper, its directory and the cache's root are the service user's or root's, writable
by no one else); otherwise native runs take the fallback, and say why."""

import os
import shutil
import stat

import pytest

from wasm_runner.providers.native import c_helpers

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (Debian: apt install gcc)")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    root.mkdir(mode=0o755)
    monkeypatch.setenv("WASM_RUNNER_CACHE", str(root))
    return root


def a_source(tmp_path, name: str):
    """The launcher's source at a path of its own: looked up afresh (each source once per process)."""
    (tmp_path / name).mkdir()
    return shutil.copy(c_helpers.LAUNCH_SOURCE, tmp_path / name / "launch.c")


def test_a_helper_built_in_a_private_cache_is_used(cache, tmp_path):
    built = c_helpers.ensure_compiled(a_source(tmp_path, "first"))
    assert built is not None and built.parent == cache / "launch"
    assert stat.S_IMODE(built.parent.stat().st_mode) == 0o755


@pytest.mark.parametrize("where", ["directory", "helper", "cache root"])
def test_a_helper_another_user_could_replace_is_not_used(cache, tmp_path, where, caplog):
    built = c_helpers.ensure_compiled(a_source(tmp_path, "first"))
    assert built is not None
    target = {"directory": built.parent, "helper": built, "cache root": cache}[where]
    os.chmod(target, stat.S_IMODE(target.stat().st_mode) | 0o022)
    assert c_helpers.ensure_compiled(a_source(tmp_path, "second")) is None
    assert "can be changed by another user" in caplog.text


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_helper_owned_by_another_user_is_not_used(cache, tmp_path):
    built = c_helpers.ensure_compiled(a_source(tmp_path, "first"))
    assert built is not None
    os.chown(built, 65534, 65534)  # nobody
    assert c_helpers.ensure_compiled(a_source(tmp_path, "second")) is None
