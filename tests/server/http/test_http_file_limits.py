"""File routes cannot be made slow: globs match in linear time, invalid patterns are 4xx
before anything runs, edits answer at once, every file route has a time budget, and a
client that goes away stops the work it asked for. Archives are safe to extract."""

from __future__ import annotations

import asyncio
import io
import os
import tarfile
import time
import zipfile
from pathlib import Path

import aiohttp
import pytest
from server_helpers import assert_error_shape, call, new_session

from wasm_runner.workspace import files as wf
from wasm_runner.workspace.budget import Budget
from wasm_runner.workspace.file_errors import BudgetExceededError, OperationCancelledError

pytestmark = pytest.mark.asyncio


def workspace(tmp_path: Path, sid: str) -> Path:
    return tmp_path / "data" / "sessions" / sid / "files"


async def seeded(client, tmp_path: Path) -> tuple[str, wf.WorkspaceFiles]:
    sid = await new_session(client)
    status, _ = await call(client, "PUT", f"/v1/sessions/{sid}/files/seed.txt", data=b"seed")
    assert status == 201
    return sid, wf.WorkspaceFiles(workspace(tmp_path, sid))


async def test_a_pathological_glob_answers_at_once(client, tmp_path):
    # `*a*a*a*a*a*a*b` on a 60-character name took 2.9 s when globs were backtracking regexes.
    sid, files = await seeded(client, tmp_path)
    for i in range(20):
        files.write_text(f"names/{'a' * 60}{i}", "")
    pattern = "*a" * 12 + "*b"
    started = time.monotonic()
    status, found = await call(client, "GET", f"/v1/sessions/{sid}/glob", params={"pattern": "names/" + pattern})
    assert status == 200 and found["matches"] == []
    status, found = await call(client, "GET", f"/v1/sessions/{sid}/grep", params={"pattern": "x", "glob": pattern})
    assert status == 200 and found["files_searched"] == 0
    assert time.monotonic() - started < 2.0


@pytest.mark.parametrize("route, params", [
    ("glob", {"pattern": "[z-a]"}), ("glob", {"pattern": "src/[9-0].txt"}),
    ("grep", {"pattern": "x", "glob": "*.[z-a]"}),
])
async def test_an_invalid_range_is_a_clear_4xx(client, tmp_path, route, params):
    sid, _ = await seeded(client, tmp_path)
    status, data = await call(client, "GET", f"/v1/sessions/{sid}/{route}", params=params)
    assert status == 422
    assert_error_shape(data, "invalid_pattern")
    assert "reversed" in data["error"]["message"] and data["error"]["hint"]


async def test_one_shot_outputs_are_checked_before_the_code_runs(client):
    started = time.monotonic()
    status, data = await call(client, "POST", "/v1/exec", json={
        "code": "while True: pass", "output_files": ["out/*.txt", "[z-a]"], "limits": {"timeout_s": 20}})
    assert status == 422
    assert_error_shape(data, "invalid_pattern")
    assert time.monotonic() - started < 5.0  # the endless loop never started


async def test_an_edit_matching_millions_of_times_answers_at_once(client, tmp_path):
    sid, files = await seeded(client, tmp_path)
    files.write_text("big.txt", "a\n" * 2_000_000)
    started = time.monotonic()
    status, data = await call(client, "PATCH", f"/v1/sessions/{sid}/files/big.txt",
                              json={"old_text": "a", "new_text": "b"})
    assert status == 409
    assert_error_shape(data, "edit_not_unique")
    assert "2000000 times" in data["error"]["message"]
    assert time.monotonic() - started < 3.0


async def test_file_work_past_its_budget_is_422_budget_exceeded(serve, tmp_path):
    client = await serve(server={"file_op_timeout_s": 1e-6})
    sid, files = await seeded(client, tmp_path)
    for i in range(50):
        files.write_text(f"d{i}/f.txt", "x\n" * 10)
    checks = [
        ("GET", "glob", {"params": {"pattern": "**/*.py"}}),
        ("PATCH", "files/d1/f.txt", {"json": {"edits": [{"old_text": "y", "new_text": "z"}] * 5}}),
        ("PATCH", "files/d1/f.txt", {"json": {"patch": "@@ -1,2 +1,2 @@\n x\n-y\n+z\n"}}),
    ]
    for method, route, kwargs in checks:
        status, data = await call(client, method, f"/v1/sessions/{sid}/{route}", **kwargs)
        assert status == 422, (route, data)
        assert_error_shape(data, "budget_exceeded")
        assert data["error"]["hint"]
    for fmt in ("zip", "tar.gz"):
        status, data = await call(client, "GET", f"/v1/sessions/{sid}/archive", params={"format": fmt})
        assert status == 422, data
        assert_error_shape(data, "budget_exceeded")
    status, found = await call(client, "GET", f"/v1/sessions/{sid}/grep", params={"pattern": "x"})
    assert status == 200 and found["timed_out"] and found["truncated"]  # grep answers what it found


@pytest.mark.parametrize("fmt", ["zip", "tar.gz"])
async def test_an_archive_stopped_mid_stream_ends_broken_not_truncated(client, tmp_path, monkeypatch, fmt):
    sid, files = await seeded(client, tmp_path)
    for i in range(20):
        files.write_bytes(f"out/f{i:02}.bin", os.urandom(300_000))
    checks = 0
    check = Budget.check

    def failing_later(self, *args, **kwargs):
        nonlocal checks
        checks += 1
        if checks > 30:
            raise BudgetExceededError("out", "the archive took longer than its budget")
        return check(self, *args, **kwargs)

    monkeypatch.setattr(Budget, "check", failing_later)
    async with client.get(f"/v1/sessions/{sid}/archive", params={"path": "out", "format": fmt}) as response:
        assert response.status == 200  # the headers went before the budget ran out
        with pytest.raises(aiohttp.ClientPayloadError):
            await response.read()


async def test_a_client_that_goes_away_stops_its_grep(client, tmp_path, monkeypatch):
    sid, files = await seeded(client, tmp_path)
    for i in range(40):
        files.write_text(f"logs/f{i}.txt", "nothing to see here\n" * 100_000)
    ended: list[tuple[float, BaseException | None]] = []
    grep = wf.WorkspaceFiles.grep

    def recording_grep(self, *args, **kwargs):
        try:
            result = grep(self, *args, **kwargs)
        except BaseException as exc:
            ended.append((time.monotonic(), exc))
            raise
        ended.append((time.monotonic(), None))
        return result

    monkeypatch.setattr(wf.WorkspaceFiles, "grep", recording_grep)
    with pytest.raises(asyncio.TimeoutError):
        await call(client, "GET", f"/v1/sessions/{sid}/grep", params={"pattern": "needle"},
                   timeout=aiohttp.ClientTimeout(total=0.5))
    gone = time.monotonic()
    for _ in range(100):
        if ended:
            break
        await asyncio.sleep(0.05)
    assert ended, "the search went on after its client left"
    at, error = ended[0]
    assert isinstance(error, OperationCancelledError) and at - gone < 2.0


@pytest.mark.parametrize("fmt", ["zip", "tar.gz"])
async def test_archives_carry_no_special_bits_and_no_unsafe_names(client, tmp_path, fmt):
    sid, files = await seeded(client, tmp_path)
    root = workspace(tmp_path, sid)
    files.write_text("out/tool", "#!/bin/sh\n")
    os.chmod(root / "out" / "tool", 0o6755)
    files.mkdir("out/drop")
    os.chmod(root / "out" / "drop", 0o3777)
    (root / "out" / "..\\..\\x").write_text("escape")
    (root / "out" / "C:").write_text("drive")
    async with client.get(f"/v1/sessions/{sid}/archive", params={"path": "out", "format": fmt}) as response:
        assert response.status == 200
        data = await response.read()
    if fmt == "zip":
        archive = zipfile.ZipFile(io.BytesIO(data))
        entries = {i.filename.rstrip("/"): i.external_attr >> 16 for i in archive.infolist()}
    else:
        tar = tarfile.open(fileobj=io.BytesIO(data), mode="r:gz")
        entries = {m.name: m.mode for m in tar.getmembers()}
    assert sorted(entries) == [".._.._x", "C_", "drop", "tool"]
    assert all(mode & 0o7000 == 0 for mode in entries.values()), {k: oct(v) for k, v in entries.items()}
    assert entries["tool"] & 0o777 == 0o755  # the permission bits stay
    assert entries["drop"] & 0o777 == (0o755 if fmt == "zip" else 0o777)  # zip folders are always 0755
