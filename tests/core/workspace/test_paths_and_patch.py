"""Path confinement and unified-diff patching of the workspace's file operations, as properties:
whatever path a caller names, what it reaches stays inside the workspace; whatever two texts,
the diff between them applied to the first gives the second."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from wasm_runner.workspace.file_errors import FileOpError, InvalidPathError, PatchError, PathEscapeError
from wasm_runner.workspace.files import WorkspaceFiles
from wasm_runner.workspace.relpaths import MAX_NAME_BYTES, join, split_path

COMPONENT = st.sampled_from(["a", "b", ".", "..", "", "x y", "é", "\x00", "a" * 300, "workspace", "~"])
PATHS = st.one_of(st.lists(COMPONENT, max_size=6).map("/".join), st.text(max_size=80))


@given(PATHS, st.booleans())
def test_a_split_path_is_refused_or_made_of_plain_names(path, absolute):
    path = ("/workspace/" + path) if absolute else path
    try:
        parts = split_path(path)
    except (PathEscapeError, InvalidPathError):
        return
    for part in parts:
        assert part not in ("", ".", "..") and "/" not in part and "\x00" not in part
        assert len(part.encode("utf-8")) <= MAX_NAME_BYTES


@given(PATHS)
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=60)
def test_whatever_is_written_lands_inside_the_workspace(tmp_path_factory, path):
    root = tmp_path_factory.mktemp("ws")
    outside = root.parent / f"{root.name}-outside"
    outside.mkdir()
    (root / "out").symlink_to(outside)  # a guest may leave a link pointing anywhere
    files = WorkspaceFiles(root)
    try:
        files.write_bytes(path, b"x")
    except FileOpError:
        pass
    assert list(outside.iterdir()) == []
    for dirpath, _, names in os.walk(root):
        for name in names:
            assert os.path.realpath(Path(dirpath) / name).startswith(str(root) + os.sep)


def test_a_link_inside_the_workspace_is_never_followed(tmp_path):
    root, outside = tmp_path / "ws", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret").write_text("no")
    (root / "out").symlink_to(outside)
    files = WorkspaceFiles(root)
    for path in ("out/secret", "out/new", "/workspace/out/secret"):
        with pytest.raises(FileOpError):
            files.read_bytes(path)
        with pytest.raises(FileOpError):
            files.write_bytes(path, b"x")
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]


def test_join_is_the_inverse_of_split(tmp_path):
    assert split_path(join(("a", "b c", "é"))) == ("a", "b c", "é")


LINES = st.lists(st.sampled_from(["alpha\n", "beta\n", "gamma\n", "\n", "delta delta\n", "    indented\n", "é\n"]),
                 max_size=30)


@given(LINES, LINES)
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=80)
def test_a_unified_diff_applied_to_its_source_gives_its_target(tmp_path_factory, before, after):
    assume(before != after)
    files = WorkspaceFiles(tmp_path_factory.mktemp("patch"))
    files.write_text("f.txt", "".join(before))
    diff = "".join(difflib.unified_diff(before, after, "a/f.txt", "b/f.txt"))
    files.apply_patch("f.txt", diff)
    assert files.read_text("f.txt") == "".join(after)


def test_a_hunk_whose_lines_are_not_there_is_refused_and_changes_nothing(tmp_path):
    files = WorkspaceFiles(tmp_path)
    files.write_text("f.txt", "one\ntwo\nthree\n")
    stale = "".join(difflib.unified_diff(["uno\n", "dos\n"], ["uno\n", "DOS\n"], "a/f.txt", "b/f.txt"))
    with pytest.raises(PatchError):
        files.apply_patch("f.txt", stale)
    assert files.read_text("f.txt") == "one\ntwo\nthree\n"
