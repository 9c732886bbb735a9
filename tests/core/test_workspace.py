"""Workspace accounting while a guest changes files under it."""

from __future__ import annotations

import os

from wasm_runner import workspace as workspace_module
from wasm_runner.workspace import Workspace


def test_usage_and_scan_skip_files_deleted_while_they_are_counted(tmp_path, monkeypatch):
    ws = Workspace(tmp_path / "session").ensure()
    (ws.files / "kept.txt").write_text("12345")
    (ws.files / "gone.txt").write_text("x" * 100)
    real_walk = workspace_module._walk

    def walk_then_delete(top):
        for entry in real_walk(top):
            if entry.name == "gone.txt":
                os.unlink(entry.path)  # a guest deletes it between the listing and the stat
            yield entry

    monkeypatch.setattr(workspace_module, "_walk", walk_then_delete)
    assert ws.usage() == (5, 1)
    (ws.files / "gone.txt").write_text("x" * 100)
    files, used, entries = ws.scan()
    assert set(files) == {"kept.txt"} and used == 5 and entries == 1
