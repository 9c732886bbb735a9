"""A session's working directory under /workspace (a disk layout's `<agent>/<session>`): checked names
only, made without following a link the guest put in its way."""

from __future__ import annotations

import os

import pytest

from wasm_runner import Runner
from wasm_runner.errors import InvalidRequestError
from wasm_runner.workspace.layout import Workspace, check_workdir


@pytest.mark.parametrize("bad", ["..", "../x", "a/../b", "/a", "a//b", "a/", ".", "a/./b", "a b", "x" * 65, "a\0b"])
def test_a_working_directory_is_checked_names_only(tmp_path, bad):
    with pytest.raises(ValueError, match="working directory"):
        check_workdir(bad)
    with pytest.raises(ValueError):
        Workspace(tmp_path, workdir=bad)


def test_the_working_directory_is_made_under_files_and_named_for_the_guest(tmp_path):
    workspace = Workspace(tmp_path / "s", tmp_path / "disk", "analyst/s1").ensure()
    assert (tmp_path / "disk" / "analyst" / "s1").is_dir()
    assert workspace.guest_cwd == "/workspace/analyst/s1"
    assert Workspace(tmp_path / "t").guest_cwd == "/workspace"


def test_a_link_in_the_way_is_never_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    disk = tmp_path / "disk"
    disk.mkdir()
    os.symlink(outside, disk / "analyst")  # what a guest could leave on a shared disk
    with pytest.raises(OSError):
        Workspace(tmp_path / "s", disk, "analyst/s1").ensure()
    assert list(outside.iterdir()) == []


def test_a_runner_session_refuses_a_bad_working_directory(tmp_path):
    runner = Runner(data_dir=tmp_path, isolation="in-process")
    try:
        with pytest.raises(InvalidRequestError, match="working directory"):
            runner.session("s1", workspace_dir=tmp_path / "disk", workdir="../escape")
        assert runner.session("s2", workspace_dir=tmp_path / "disk", workdir="a/s2").workspace.guest_cwd \
            == "/workspace/a/s2"
    finally:
        runner.close()
