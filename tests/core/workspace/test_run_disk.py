"""A run is charged for what it adds, from its own start: its limit, its room and shared mounts."""

from __future__ import annotations

from wasm_runner.guest import Mount
from wasm_runner.workspace.layout import Workspace
from wasm_runner.workspace.quota import RunDisk, largest_files
from wasm_runner_protocol.execution import Limits


def test_a_run_may_add_at_most_the_room_it_was_given(tmp_path):
    ws = Workspace(tmp_path / "s").ensure()
    run = RunDisk(ws, Limits(disk_bytes=10_000), room=3000)
    (ws.files / "a").write_bytes(b"x" * 3000)
    assert not run.over()
    (ws.files / "b").write_bytes(b"x" * 1)
    assert run.over()  # far below disk_bytes, past the room


def test_a_session_over_its_limit_may_delete_and_rewrite_but_not_grow(tmp_path):
    ws = Workspace(tmp_path / "s").ensure()
    (ws.files / "big").write_bytes(b"x" * 5000)
    run = RunDisk(ws, Limits(disk_bytes=4000))
    assert not run.over()  # writing nothing is never over
    (ws.files / "big").unlink()
    assert not run.over()
    (ws.files / "small").write_bytes(b"x" * 100)
    assert not run.over()

    grows = RunDisk(Workspace(tmp_path / "t").ensure(), Limits(disk_bytes=4000))
    (grows.workspace.files / "big").write_bytes(b"x" * 5000)
    later = RunDisk(grows.workspace, Limits(disk_bytes=4000))
    (grows.workspace.tmp / "more").write_bytes(b"x")
    assert later.over()


def test_what_a_run_adds_to_a_shared_mount_counts_against_it(tmp_path):
    ws = Workspace(tmp_path / "s").ensure()
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "others").write_bytes(b"x" * 50_000)  # other members' files: not this session's
    mount = Mount(shared, "/workspace/shared", writable=True, shared=True)
    run = RunDisk(ws, Limits(disk_bytes=4000), (mount,))
    assert not run.over()
    (shared / "mine").write_bytes(b"x" * 4001)
    assert run.over()
    assert Mount.from_config(mount.to_config()).shared  # as a worker process gets it


def test_a_start_that_cannot_be_measured_is_over(tmp_path, monkeypatch):
    from wasm_runner.workspace import layout

    ws = Workspace(tmp_path / "s").ensure()

    def broken(*args, **kwargs):
        raise OSError(36, "File name too long")

    monkeypatch.setattr(layout, "walk_tree", broken)
    run = RunDisk(ws, Limits())
    assert run.start is None and run.over_or_unmeasurable()


def test_the_message_names_the_largest_files_and_how_to_remove_them(tmp_path):
    ws = Workspace(tmp_path / "s").ensure()
    (ws.files / "data").mkdir()
    (ws.files / "data" / "huge.csv").write_bytes(b"x" * 9000)
    (ws.tmp / "cache.bin").write_bytes(b"x" * 5000)
    (ws.files / "small.txt").write_bytes(b"x")
    assert largest_files([(ws.files, "/workspace"), (ws.tmp, "/tmp")], 2) == [
        ("/workspace/data/huge.csv", 9000), ("/tmp/cache.bin", 5000)]
    message = RunDisk(ws, Limits(disk_bytes=1000)).message()
    assert "/workspace/data/huge.csv (9000 bytes)" in message
    assert "rm /workspace/data/huge.csv" in message and "os.remove('/workspace/data/huge.csv')" in message
    assert "DELETE /v1/sessions/{id}/files/data/huge.csv" in message


def test_a_session_past_its_file_limit_cannot_hide_bytes_beyond_the_walk(tmp_path):
    ws = Workspace(tmp_path / "s").ensure()
    for i in range(10):  # more entries than disk_files: a walk capped at disk_files stops early
        (ws.files / f"f{i}").write_bytes(b"")
    (ws.files / "z").mkdir()
    run = RunDisk(ws, Limits(disk_bytes=1000, disk_files=5))
    assert not run.over()
    (ws.files / "z" / "big").write_bytes(b"x" * 2000)  # listed after every top-level entry
    assert run.over()
