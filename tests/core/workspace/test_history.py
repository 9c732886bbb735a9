"""File history: versions kept from API writes and changes found before them, bounded, diffable."""

from __future__ import annotations

from pathlib import Path

import pytest

from wasm_runner.workspace.files import WorkspaceFiles
from wasm_runner.workspace.history import FileHistory, VersionNotFoundError


@pytest.fixture
def files(tmp_path: Path) -> WorkspaceFiles:
    (tmp_path / "files").mkdir()
    return WorkspaceFiles(tmp_path / "files")


def write(files: WorkspaceFiles, history: FileHistory, path: str, text: str, method: str = "put") -> None:
    history.observe(files, path)
    files.write_text(path, text)
    history.record(files, path, method)


def test_each_write_keeps_a_version_and_the_same_content_is_kept_once(files, tmp_path):
    history = FileHistory(tmp_path / "history")
    write(files, history, "a.py", "x = 1\n")
    write(files, history, "a.py", "x = 2\n", "edit")
    write(files, history, "a.py", "x = 2\n")  # unchanged: no new version
    versions = history.versions("a.py")
    assert [(v.version, v.source, v.method) for v in versions] == [(1, "api", "put"), (2, "api", "edit")]
    assert history.read("a.py", 1) == b"x = 1\n"
    assert len(list((tmp_path / "history" / "blobs").iterdir())) == 2


def test_a_change_made_outside_the_api_is_kept_before_the_next_write(files, tmp_path):
    history = FileHistory(tmp_path / "history")
    write(files, history, "notes.txt", "one\n")
    (tmp_path / "files" / "notes.txt").write_text("one\nguest\n")  # what a guest does
    write(files, history, "notes.txt", "three\n")
    assert [v.source for v in history.versions("notes.txt")] == ["api", "outside", "api"]
    assert history.read("notes.txt", 2) == b"one\nguest\n"


def test_diff_against_the_file_now_marks_added_and_removed_lines(files, tmp_path):
    history = FileHistory(tmp_path / "history")
    write(files, history, "m.py", "def f():\n    return 1\n")
    write(files, history, "m.py", "def f():\n    return 2\n")
    old, new, diff, binary = history.diff(files, "m.py", None, None)
    assert (old, new, binary) == (1, None, False)
    assert "-    return 1\n" in diff and "+    return 2\n" in diff and diff.startswith("diff --git a/m.py b/m.py\n")
    _, _, same, _ = history.diff(files, "m.py", 2, None)
    assert same == ""


def test_binary_versions_get_no_line_diff(files, tmp_path):
    history = FileHistory(tmp_path / "history")
    history.observe(files, "b.bin")
    files.write_bytes("b.bin", b"\xff\x00\x01")
    history.record(files, "b.bin", "put")
    files.write_bytes("b.bin", b"\xfe\x00\x02")
    assert history.diff(files, "b.bin", 1, None)[2:] == ("", True)


def test_the_oldest_versions_go_first_past_the_count_and_byte_bounds(files, tmp_path):
    history = FileHistory(tmp_path / "history", max_versions=3, max_bytes=1000)
    for i in range(5):
        write(files, history, "a.txt", f"v{i}\n")
    assert [v.version for v in history.versions("a.txt")] == [3, 4, 5]
    with pytest.raises(VersionNotFoundError):
        history.read("a.txt", 1)
    assert len(list((tmp_path / "history" / "blobs").iterdir())) == 3
    small = FileHistory(tmp_path / "h2", max_bytes=250)
    for i in range(4):
        write(files, small, "big.txt", str(i) * 100)
    assert [v.version for v in small.versions("big.txt")] == [3, 4]


def test_files_past_the_size_bound_and_links_get_no_version(files, tmp_path):
    history = FileHistory(tmp_path / "history", max_file_bytes=10)
    write(files, history, "large.txt", "x" * 11)
    assert history.versions("large.txt") == []
    (tmp_path / "files" / "link").symlink_to("/etc/passwd")
    assert history.observe(files, "link") is None


def test_versions_survive_a_new_history_object_on_the_same_directory(files, tmp_path):
    write(files, FileHistory(tmp_path / "history"), "a.txt", "one")
    again = FileHistory(tmp_path / "history")
    write(files, again, "a.txt", "two")
    assert [v.version for v in again.versions("a.txt")] == [1, 2]
