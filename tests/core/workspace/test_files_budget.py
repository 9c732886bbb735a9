"""Edits, patches, grep and archives in bounded time: linear where the work allows it, and
stopped by their budget (a deadline, or cancellation when the client went away) otherwise."""

from __future__ import annotations

import io
import os
import stat
import tarfile
import threading
import time
import zipfile
from pathlib import PurePosixPath, PureWindowsPath

import pytest

from wasm_runner.workspace import files as wf
from wasm_runner.workspace.budget import Budget
from wasm_runner.workspace.file_errors import (
    BudgetExceededError,
    EditNotFoundError,
    EditNotUniqueError,
    FileOpError,
    OperationCancelledError,
    PatchError,
)
from wasm_runner.workspace.text_patches import SHOWN_OCCURRENCES


@pytest.fixture
def files(tmp_path) -> wf.WorkspaceFiles:
    return wf.WorkspaceFiles(tmp_path)


# -- edits --------------------------------------------------------------------------------


def test_a_text_occurring_millions_of_times_is_reported_not_unique_at_once(files):
    # Numbering each occurrence from the start of the file took 6 s for 80,000 of them.
    files.write_text("big.txt", "a\n" * 2_000_000)
    started = time.monotonic()
    with pytest.raises(EditNotUniqueError) as raised:
        files.edit("big.txt", [wf.TextEdit("a", "b")])
    assert time.monotonic() - started < 2.0
    assert raised.value.count == 2_000_000
    assert raised.value.lines == list(range(1, SHOWN_OCCURRENCES + 1))
    assert "occurs 2000000 times" in raised.value.message and "10…" in raised.value.message


def test_occurrences_are_counted_and_numbered_as_replace_sees_them(files):
    files.write_text("t.txt", "aaaa\nx\naa\n")
    with pytest.raises(EditNotUniqueError) as raised:
        files.edit("t.txt", [wf.TextEdit("aa", "b")])
    assert raised.value.count == 3 and raised.value.lines == [1, 1, 3]  # not overlapping, like str.replace
    assert files.edit("t.txt", [wf.TextEdit("aa", "b", replace_all=True)]).replacements == 3
    assert files.read_text("t.txt") == "bb\nx\nb\n"


def test_a_text_not_found_gets_its_hint_quickly(files):
    files.write_text("big.txt", "a\n" * 2_000_000)
    started = time.monotonic()
    with pytest.raises(EditNotFoundError) as raised:
        files.edit("big.txt", [wf.TextEdit("a\nc", "b")])
    assert time.monotonic() - started < 3.0
    assert "first line occurs at line 1" in raised.value.hint
    with pytest.raises(EditNotFoundError) as raised:
        files.edit("big.txt", [wf.TextEdit("a   \n  a\nc", "b")])
    assert "first line occurs" in raised.value.hint


def test_many_edits_stop_at_the_budget(files):
    files.write_text("t.txt", "x" * 1_000_000)
    edits = [wf.TextEdit("y" * 10, "z") for _ in range(100)]
    with pytest.raises(BudgetExceededError) as raised:
        files.edit("t.txt", edits, budget=Budget(0))
    assert raised.value.code == "budget_exceeded" and raised.value.hint
    assert files.read_text("t.txt") == "x" * 1_000_000  # all or nothing


# -- patches ------------------------------------------------------------------------------


def test_a_hunk_that_moved_far_is_found_in_linear_time(files):
    lines = ["x"] * 200_000 + ["y"]
    files.write_text("t.txt", "\n".join(lines) + "\n")
    diff = "@@ -1,3 +1,3 @@\n x\n x\n-y\n+z\n"
    started = time.monotonic()
    files.apply_patch("t.txt", diff)
    assert time.monotonic() - started < 5.0
    assert files.read_text("t.txt").endswith("x\nx\nz\n")


def test_a_long_hunk_that_is_nowhere_fails_in_linear_time(files):
    # Comparing the hunk at each position costs its length per position: 200,000 x 20,000 here.
    files.write_text("t.txt", "x\n" * 200_000)
    diff = "@@ -1,20000 +1,20000 @@\n" + " x\n" * 19_999 + "-y\n+z\n"
    started = time.monotonic()
    with pytest.raises(PatchError):
        files.apply_patch("t.txt", diff)
    assert time.monotonic() - started < 5.0


def test_the_nearest_place_wins_earlier_first(files):
    files.write_text("t.txt", "a\nb\nm\nm\na\nb\n")
    files.apply_patch("t.txt", "@@ -3,2 +3,2 @@\n a\n-b\n+B\n")  # a,b at 0 and 4: both 2 away from 2
    assert files.read_text("t.txt") == "a\nB\nm\nm\na\nb\n"
    files.apply_patch("t.txt", "@@ -4,2 +4,2 @@\n a\n-b\n+C\n")
    assert files.read_text("t.txt") == "a\nB\nm\nm\na\nC\n"


def test_a_patch_past_its_budget_stops_with_a_clear_error(files):
    files.write_text("t.txt", "x\n" * 100_000)
    with pytest.raises(BudgetExceededError) as raised:
        files.apply_patch("t.txt", "@@ -1,2 +1,2 @@\n x\n-y\n+z\n", budget=Budget(0))
    assert "regenerate" in raised.value.hint


def test_a_hunk_header_with_a_huge_number_is_a_patch_error(files):
    files.write_text("t.txt", "x\n")
    with pytest.raises(PatchError):
        files.apply_patch("t.txt", "@@ -" + "9" * 5000 + ",1 +1,1 @@\n-x\n+y\n")


# -- grep -----------------------------------------------------------------------------------


def test_a_cancelled_grep_stops_soon_after(files):
    for i in range(40):
        files.write_text(f"f{i}.txt", "nothing to see here\n" * 100_000)
    budget = Budget(120)
    outcome: dict[str, object] = {}

    def search() -> None:
        try:
            outcome["result"] = files.grep("needle", budget=budget, max_files=1000)
        except FileOpError as exc:
            outcome["error"] = exc
        outcome["ended"] = time.monotonic()

    worker = threading.Thread(target=search)
    started = time.monotonic()
    worker.start()
    time.sleep(0.3)
    assert worker.is_alive(), "the search must still be running when it is cancelled"
    budget.cancel()
    cancelled = time.monotonic()
    worker.join(10)
    assert not worker.is_alive()
    assert isinstance(outcome.get("error"), OperationCancelledError), outcome
    assert outcome["ended"] - cancelled < 2.0
    # the whole search takes much longer than it ran
    full = time.monotonic()
    files.grep("needle", path="f0.txt")
    assert (time.monotonic() - full) * 40 > outcome["ended"] - started


def test_a_grep_without_a_deadline_searches_to_the_end(files):
    files.write_text("a.txt", "abc\n")
    assert [m.line for m in files.grep("b", budget=Budget()).matches] == [1]


def test_a_grep_past_its_budget_answers_what_it_found(files):
    for i in range(20):
        files.write_text(f"f{i}.txt", "line\n" * 10_000)
    result = files.grep("line", budget=Budget(0))
    assert result.timed_out and result.truncated


# -- archives -----------------------------------------------------------------------------


def awkward_tree(root) -> None:
    files = wf.WorkspaceFiles(root)
    files.write_text("out/plain.txt", "plain")
    files.write_text("out/suid", "#!/bin/sh\n")
    os.chmod(root / "out" / "suid", 0o6755)
    files.mkdir("out/sticky")
    os.chmod(root / "out" / "sticky", 0o1777)
    files.mkdir("out/sgid")
    os.chmod(root / "out" / "sgid", 0o2775)
    for name in ("..\\..\\evil.txt", "C:", "a\\b", ".. ", "...", "x:y"):
        (root / "out" / name).write_text(name)
    (root / "out" / "sgid" / "inner.txt").write_text("inner")


def safe(name: str) -> bool:
    if "\\" in name or ":" in name or name.startswith("/"):
        return False
    for path in (PurePosixPath(name), PureWindowsPath(name)):
        if path.is_absolute() or path.drive or any(p.rstrip(". ") in ("", "..", ".") for p in path.parts):
            return False
    return True


def archive_bytes(files: wf.WorkspaceFiles, fmt: wf.ArchiveFormat) -> bytes:
    return b"".join(files.archive("out", fmt))


def test_zip_entries_have_no_special_bits_and_safe_names(files, tmp_path):
    awkward_tree(tmp_path)
    archive = zipfile.ZipFile(io.BytesIO(archive_bytes(files, "zip")))
    names = archive.namelist()
    assert len(names) == 11
    for info in archive.infolist():
        mode = info.external_attr >> 16
        assert mode & 0o7000 == 0, (info.filename, oct(mode))
        assert safe(info.filename.rstrip("/")), info.filename
    assert archive.getinfo("suid").external_attr >> 16 & 0o777 == 0o755
    assert archive.read(".._.._evil.txt") == b"..\\..\\evil.txt"
    assert archive.read("C_") == b"C:" and archive.read("_.. ") == b".. " and archive.read("_...") == b"..."
    target = tmp_path / "unzipped"
    archive.extractall(target)
    for path in target.rglob("*"):
        assert path.resolve().is_relative_to(target)
        assert path.lstat().st_mode & 0o7000 == 0


def test_targz_entries_have_no_special_bits_and_safe_names(files, tmp_path):
    awkward_tree(tmp_path)
    archive = tarfile.open(fileobj=io.BytesIO(archive_bytes(files, "tar.gz")), mode="r:gz")
    members = archive.getmembers()
    assert len(members) == 11
    for member in members:
        assert member.mode & 0o7000 == 0, (member.name, oct(member.mode))
        assert safe(member.name), member.name
    assert archive.getmember("suid").mode == 0o755 and archive.getmember("sticky").mode == 0o777
    assert archive.getmember("sgid").mode == 0o775
    assert archive.extractfile(".._.._evil.txt").read() == b"..\\..\\evil.txt"
    target = tmp_path / "untarred"
    archive.extractall(target, filter="fully_trusted")  # as a naive extractor would: no check, modes kept
    for path in target.rglob("*"):
        assert path.resolve().is_relative_to(target)
        assert stat.S_IMODE(path.lstat().st_mode) & 0o7000 == 0


@pytest.mark.parametrize("fmt", ["zip", "tar.gz"])
def test_a_cancelled_archive_stops(files, tmp_path, fmt):
    for i in range(20):
        files.write_bytes(f"out/f{i}.bin", os.urandom(300_000))
    budget = Budget(60)
    chunks = files.archive("out", fmt, budget=budget)
    next(chunks)
    budget.cancel()
    with pytest.raises(OperationCancelledError):
        for _ in chunks:
            pass
