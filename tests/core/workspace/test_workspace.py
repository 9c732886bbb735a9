"""Workspace accounting while a guest changes files under it, at any depth and path length."""

from __future__ import annotations

import os
import shutil
import threading
import time

import pytest
from deep_tree import DEPTH, NAME, build_deep_tree

from wasm_runner.guest import Mount
from wasm_runner.workspace import layout as workspace_module
from wasm_runner.workspace.file_errors import FileTooLargeError
from wasm_runner.workspace.files import TextEdit, WorkspaceFiles
from wasm_runner.workspace.layout import Workspace, remove_tree, tree_usage
from wasm_runner.workspace.quota import DiskLedger, QuotaExceeded, QuotaWatcher, RunDisk, over_quota
from wasm_runner_protocol.execution import Limits


def test_usage_and_scan_skip_files_deleted_while_they_are_counted(tmp_path, monkeypatch):
    ws = Workspace(tmp_path / "session").ensure()
    (ws.files / "kept.txt").write_text("12345")
    (ws.files / "gone.txt").write_text("x" * 100)
    real_lstat = workspace_module._lstat_at

    def delete_then_lstat(dir_fd, name):
        if name == "gone.txt":
            os.unlink(name, dir_fd=dir_fd)  # a guest deletes it between the listing and the stat
        return real_lstat(dir_fd, name)

    monkeypatch.setattr(workspace_module, "_lstat_at", delete_then_lstat)
    assert ws.usage() == (5, 1)
    (ws.files / "gone.txt").write_text("x" * 100)
    files, used, entries = ws.scan()
    assert set(files) == {"kept.txt"} and used == 5 and entries == 1


def test_a_tree_deeper_and_longer_than_path_max_is_measured_and_removed(tmp_path):
    ws = Workspace(tmp_path / "session").ensure()
    build_deep_tree(ws.files)
    assert DEPTH * (NAME + 1) > os.pathconf("/", "PC_PATH_MAX")
    assert ws.usage() == (DEPTH * 10, DEPTH * 2)
    snapshot, used, entries = ws.scan()
    assert (used, entries) == (DEPTH * 10, DEPTH * 2)
    assert max(len(p) for p in snapshot) <= workspace_module.NAMED_PATH_CHARS + NAME
    assert over_quota(ws, Limits(disk_bytes=DEPTH * 10 - 1))
    assert not over_quota(ws, Limits(disk_bytes=DEPTH * 10, disk_files=DEPTH * 2))
    ws.remove()
    assert not ws.root.exists()


def test_remove_tree_goes_deeper_than_the_recursion_limit(tmp_path):
    top = tmp_path / "deep"
    top.mkdir()
    build_deep_tree(top, depth=1500, name_len=20, file_bytes=1)
    with pytest.raises(RecursionError):  # why the library's rmtree is not used: it recurses per level
        shutil.rmtree(top)
    remove_tree(top)
    assert not top.exists()
    assert tree_usage([top]) == (0, 0)  # a missing tree is empty


def test_walks_hold_few_descriptors_and_never_follow_links(tmp_path):
    top = tmp_path / "t"
    top.mkdir()
    build_deep_tree(top, depth=2 * workspace_module.HELD_DESCRIPTORS + 5, name_len=8, file_bytes=3)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "big").write_bytes(b"x" * 1000)
    os.symlink(outside, top / "link")
    before = len(os.listdir("/proc/self/fd"))
    assert tree_usage([top]) == (3 * 133, 2 * 133 + 1)
    assert len(os.listdir("/proc/self/fd")) == before
    remove_tree(top)
    assert (outside / "big").exists()


def test_a_directory_moved_under_a_deep_walk_fails_closed(tmp_path, monkeypatch):
    """Past the held descriptors, ancestors are reopened through `..`; if that is no longer the
    directory walked, the walk raises instead of counting a different tree."""
    monkeypatch.setattr(workspace_module, "HELD_DESCRIPTORS", 2)
    top = tmp_path / "t"
    top.mkdir()
    build_deep_tree(top, depth=6, name_len=4, file_bytes=1)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    walk = workspace_module.walk_tree(top)
    with pytest.raises(workspace_module.TreeChanged):
        for _, name, rel, _ in walk:
            if rel.count("/") == 4 and name == "f":  # deep inside: move its ancestor away
                os.rename(top / "0000" / "0001", elsewhere / "moved")


def test_a_usage_that_cannot_be_measured_stops_the_guest(tmp_path, monkeypatch):
    ws = Workspace(tmp_path / "session").ensure()
    stopped = threading.Event()
    watcher = QuotaWatcher()

    def broken(*args, **kwargs):
        raise OSError(36, "File name too long")

    run = RunDisk(ws, Limits())  # measured at its start
    monkeypatch.setattr(workspace_module, "walk_tree", broken)
    watcher.watch(run, stopped.set)
    watcher.check_due(time.monotonic() + 10.0)
    assert stopped.is_set() and not watcher._watched


def test_writable_mounts_count_against_the_session_unless_they_have_a_budget(tmp_path):
    ws = Workspace(tmp_path / "session").ensure()
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "big").write_bytes(b"x" * 5000)
    limits = Limits(disk_bytes=4096)
    assert over_quota(ws, limits, (Mount(shared, "/workspace/shared", writable=True),))
    assert not over_quota(ws, limits, (Mount(shared, "/data"),))  # read-only: the guest cannot grow it

    class Budget:
        over = False

        def exceeded(self) -> bool:
            return self.over

    budget = Budget()
    mount = Mount(shared, "/workspace/shared", writable=True, budget=budget)
    assert not over_quota(ws, limits, (mount,))
    budget.over = True
    assert over_quota(ws, limits, (mount,))


def test_concurrent_reservations_cannot_pass_the_limit():
    ledger = DiskLedger()
    granted: list[int] = []
    lock = threading.Lock()

    def writer() -> None:
        reservation = ledger.reserve("w", limit=1000, used=100, measured_at=0.0)
        try:
            for _ in range(10):
                reservation.take(30)
        except QuotaExceeded:
            reservation.release()
            return
        with lock:
            granted.append(reservation.bytes)
        reservation.commit()

    threads = [threading.Thread(target=writer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(granted) <= 900 and len(granted) == 3
    # committed bytes keep counting for a measurement taken before the commit ...
    with pytest.raises(QuotaExceeded):
        ledger.reserve("w", limit=1000, used=100, measured_at=0.0, initial=1)
    # ... and not for one taken after it (which sees the files themselves)
    ledger.reserve("w", limit=1000, used=1000 - 1, measured_at=ledger.clock() + 1, initial=1).release()


def test_an_edit_that_would_outgrow_the_limit_is_refused_before_it_is_built(tmp_path):
    files = WorkspaceFiles(tmp_path)
    files.write_text("a.txt", "a")

    edits = [TextEdit("a", "aa", True)] * 24  # 1 byte doubled 24 times: 16 MiB
    with pytest.raises(FileTooLargeError, match="edit 21: .* 2097152 bytes, over the 1048576-byte limit"):
        files.edit("a.txt", edits, max_result_bytes=1 << 20)
    assert files.read_text("a.txt") == "a"
    assert files.edit("a.txt", edits[:10], max_result_bytes=1 << 20).info.size == 1024


def test_a_workspace_the_host_names_through_a_link_is_still_measured(tmp_path):
    """The CLI's --workspace may be a link the user chose; links inside it are never followed."""
    real = tmp_path / "real"
    real.mkdir()
    (real / "a").write_bytes(b"x" * 7)
    link = tmp_path / "link"
    link.symlink_to(real)
    ws = Workspace(tmp_path / "session", files_dir=link).ensure()
    assert ws.usage() == (7, 1)
