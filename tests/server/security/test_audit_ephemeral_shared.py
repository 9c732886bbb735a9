"""The audit log, ephemeral sessions, the shared/ directory, and secrets staying out of guests."""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import threading

import pytest

from wasm_runner_server.cli.commands import add_audit_command
from wasm_runner_server.metadata.sql import SqliteSql
from wasm_runner_server.security import audit as audit_module
from wasm_runner_server.security.audit import AuditLog


async def _new(secure, key: str = "a_member", **fields) -> str:
    status, data, _ = await secure.call("POST", "/v1/sessions", key, json=fields)
    assert status == 201, data
    return data["id"]


async def test_every_execution_has_an_audit_row_with_the_right_outcome(secure):
    sid = await _new(secure)
    runs = [("print('ok')", "ok", None, 0), ("raise ValueError('boom')", "error", None, 1),
            ("while True: pass", "limit", "timeout", None)]
    for code, *_ in runs:
        body = {"code": code, "limits": {"timeout_s": 1}}
        assert (await secure.call("POST", f"/v1/sessions/{sid}/exec", "a_member", json=body))[0] == 200
    assert (await secure.call("POST", "/v1/exec", "a_member", json={"code": "print(2)"}))[0] == 200
    status, page, _ = await secure.call("GET", "/v1/audit?kind=exec", "a_member")
    assert status == 200
    rows = page["entries"]
    assert len(rows) == 4
    for row, (code, outcome, limit, exit_code) in zip(rows, runs, strict=False):
        assert row["session"] == sid and row["outcome"] == outcome and row["limit_hit"] == limit
        assert row["code"] == code and row["code_sha256"] and row["workspace"] == "alpha"
        assert row["key_id"] == secure.keys["a_member"][3:15] and row["language"] == "python"
        assert row["duration_ms"] > 0 and row["provider"] == "wasm" and row["profile"] == "python"
        if exit_code is not None:
            assert row["exit_code"] == exit_code
    assert rows[0]["stdout"] == "ok\n" and "ValueError" in rows[1]["stderr"]
    assert rows[3]["mode"] == "oneshot" and rows[3]["session"] is None and rows[3]["outcome"] == "ok"
    # filters and cursor pagination
    _, first, _ = await secure.call("GET", "/v1/audit?kind=exec&limit=3", "a_member")
    _, rest, _ = await secure.call("GET", f"/v1/audit?kind=exec&cursor={first['next_cursor']}", "a_member")
    assert [r["id"] for r in first["entries"] + rest["entries"]] == [r["id"] for r in rows]
    _, errors, _ = await secure.call("GET", "/v1/audit?outcome=error", "a_member")
    assert [r["code"] for r in errors["entries"]] == ["raise ValueError('boom')"]


async def test_file_changes_are_audited_and_the_log_has_no_edit_api(secure):
    sid = await _new(secure)
    await secure.call("PUT", f"/v1/sessions/{sid}/files/a.txt", "a_member", data=b"one")
    await secure.call("PATCH", f"/v1/sessions/{sid}/files/a.txt", "a_member", json={"old_text": "one", "new_text": "two"})
    await secure.call("DELETE", f"/v1/sessions/{sid}/files/a.txt", "a_member")
    _, page, _ = await secure.call("GET", "/v1/audit?kind=file", "a_member")
    assert [(r["mode"], r["path"]) for r in page["entries"]] == [("put", "a.txt"), ("edit", "a.txt"), ("delete", "a.txt")]
    entry = page["entries"][0]["id"]
    for method in ("PUT", "PATCH", "DELETE", "POST"):
        assert (await secure.call(method, f"/v1/audit/{entry}", "admin", json={}))[0] in (404, 405)
    db = sqlite3.connect(secure.data_dir / "audit.sqlite3")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        db.execute("UPDATE audit SET code = 'x'")
    db.close()


def test_retention_prunes_old_rows_and_export_writes_jsonl(tmp_path, capsys):
    log = AuditLog.in_data_dir(tmp_path)
    log.record_file_change(workspace="w", key_id="k", session="s", ephemeral=False, mode="put", path="p", status=201)
    log.flush()  # the writer's id first: the row inserted by hand below takes the next one
    log._db.run("INSERT INTO audit (ts, kind, workspace, key_id) VALUES (1, 'exec', 'w', 'k')")
    assert log.count() == 2 and log.prune(30) == 1 and log.count() == 1
    log.close()
    parser = argparse.ArgumentParser()
    add_audit_command(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["audit", "export", "--jsonl", "--data-dir", str(tmp_path)])
    assert args.handler(args) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["path"] == "p"


def test_audit_rows_are_journaled_at_once_committed_in_groups_and_kept_when_a_write_fails(tmp_path):
    log = AuditLog.in_data_dir(tmp_path)
    other = sqlite3.connect(tmp_path / "audit.sqlite3")
    with log._db_lock:  # as while the writer commits: the rows recorded meanwhile queue up
        ids = [log.record_file_change(workspace="w", key_id="k", session="s", ephemeral=False, mode="put",
                                      path=f"p{n}", status=201) for n in range(3)]
        assert other.execute("SELECT COUNT(*) FROM audit").fetchone()[0] == 0
        journaled = (tmp_path / "audit.journal").read_bytes().splitlines()  # on disk before any commit
        assert [json.loads(line)["id"] for line in journaled] == ids == [1, 2, 3]
    log.flush()  # what a read does first
    assert other.execute("SELECT COUNT(*) FROM audit").fetchone()[0] == 3
    with log._db_lock:
        broken, log._db = log._db, SqliteSql(sqlite3.connect(":memory:", check_same_thread=False))  # no table: fail
        log.record_file_change(workspace="w", key_id="k", session="s", ephemeral=False, mode="put", path="p3",
                               status=201)
    with pytest.raises(sqlite3.Error):
        log.flush()
    with log._db_lock:
        log._db.db.close()
        log._db = broken
    log.close()  # the row that failed is written now (or by the writer's retry before)
    assert [r[0] for r in other.execute("SELECT path FROM audit ORDER BY id")] == ["p0", "p1", "p2", "p3"]
    assert (tmp_path / "audit.journal").stat().st_size == 0  # every row committed: the journal is cleared
    other.close()


def test_journaled_rows_not_committed_are_replayed_once_when_the_log_is_opened(tmp_path):
    log = AuditLog.in_data_dir(tmp_path)
    log.record_file_change(workspace="w", key_id="k", session="s", ephemeral=False, mode="put", path="p0", status=201)
    log.flush()
    with log._db_lock:  # as a process killed before its writer commits: the rows are in the journal only
        for n in (1, 2):
            log.record_file_change(workspace="w", key_id="k", session="s", ephemeral=False, mode="put",
                                   path=f"p{n}", status=201)
        snapshot = (tmp_path / "audit.journal").read_bytes()
    log.close()
    (tmp_path / "audit.journal").write_bytes(snapshot + b'{"id": 9, "ts": 1')  # and a torn last line
    reopened = AuditLog.in_data_dir(tmp_path)
    assert [(r["id"], r["path"]) for r in reopened.iterate()] == [(1, "p0"), (2, "p1"), (3, "p2")]
    assert (tmp_path / "audit.journal").stat().st_size == 0
    assert reopened.record_file_change(workspace="w", key_id="k", session="s", ephemeral=False, mode="put",
                                       path="p3", status=201) == 4
    second = AuditLog.in_data_dir(tmp_path)  # another opener (the CLI) reads, neither replays nor records
    assert second.count() == 3
    with pytest.raises(RuntimeError, match="owns the audit journal"):
        second.record_file_change(workspace="w", key_id="k", session="s", ephemeral=False, mode="put", path="x",
                                  status=201)
    second.close()
    reopened.close()
    assert AuditLog.in_data_dir(tmp_path).count() == 4


def test_a_large_journal_is_rotated_and_the_rotated_file_dropped_once_committed(tmp_path, monkeypatch):
    monkeypatch.setattr(audit_module, "ROTATE_BYTES", 1000)
    log = AuditLog.in_data_dir(tmp_path)
    with log._db_lock:
        for n in range(20):
            log.record_file_change(workspace="w", key_id="k", session="s", ephemeral=False, mode="put",
                                   path=f"p{n}", status=201)
    journal, rotated = tmp_path / "audit.journal", tmp_path / "audit.journal.old"
    assert journal.stat().st_size > 1000
    log.flush()
    assert not rotated.exists() and journal.stat().st_size == 0 and log.count() == 20
    log.close()


def test_rows_recorded_while_another_thread_writes_are_all_kept(tmp_path):
    log = AuditLog.in_data_dir(tmp_path)
    stop = threading.Event()

    def write_until_stopped() -> None:  # as the server's flusher does, off the event loop
        while not stop.is_set():
            log.flush()

    writer = threading.Thread(target=write_until_stopped)
    writer.start()
    for n in range(3000):
        log.record_file_change(workspace="w", key_id="k", session="s", ephemeral=False, mode="put", path=f"p{n}",
                               status=201)
    stop.set()
    writer.join()
    assert log.count() == 3000
    log.close()


async def test_audit_rows_reach_the_database_without_a_read(secure):
    sid = await _new(secure)
    status, _, _ = await secure.call("POST", f"/v1/sessions/{sid}/exec", "a_member", json={"code": "print(1)"})
    assert status == 200
    db = sqlite3.connect(secure.data_dir / "audit.sqlite3")
    for _ in range(100):  # the server writes pending rows every 50 ms
        if db.execute("SELECT COUNT(*) FROM audit WHERE kind = 'exec' AND session = ?", (sid,)).fetchone()[0]:
            break
        await asyncio.sleep(0.02)
    else:
        pytest.fail("the execution's audit row was not written within 2 s")
    db.close()


async def test_ephemeral_session_leaves_no_files_and_no_code_in_the_audit_log(secure):
    sid = await _new(secure, ephemeral=True)
    secret_code = "open('kept.txt', 'w').write('zzz')\nprint('TOPSECRET')"
    status, result, _ = await secure.call("POST", f"/v1/sessions/{sid}/exec", "a_member", json={"code": secret_code})
    assert status == 200 and result["stdout"] == "TOPSECRET\n"
    await secure.call("PUT", f"/v1/sessions/{sid}/files/upload.txt", "a_member", data=b"data")
    session_dir = secure.data_dir / "sessions" / sid
    assert session_dir.is_dir()
    assert (await secure.call("DELETE", f"/v1/sessions/{sid}", "a_member"))[0] == 204
    assert not session_dir.exists()
    _, page, _ = await secure.call("GET", f"/v1/audit?session={sid}", "a_member")
    execs = [r for r in page["entries"] if r["kind"] == "exec"]
    assert len(execs) == 1 and execs[0]["ephemeral"] and execs[0]["outcome"] == "ok"
    assert execs[0]["code_bytes"] == len(secret_code) and execs[0]["stdout_bytes"] == len("TOPSECRET\n")
    for row in page["entries"]:
        assert row["code"] is None and row["stdout"] is None and row["stderr"] is None
        assert row["code_sha256"] is None and row["path"] is None
    raw = b"".join(p.read_bytes() for p in secure.data_dir.glob("audit.sqlite3*"))
    assert b"TOPSECRET" not in raw and b"kept.txt" not in raw and b"upload.txt" not in raw


async def test_ephemeral_sessions_do_not_survive_a_restart(start_secure, tmp_path):
    first = await start_secure(data_dir=tmp_path / "d")
    sid = await _new(first, ephemeral=True)
    kept = await _new(first)
    for s in (sid, kept):
        await first.call("PUT", f"/v1/sessions/{s}/files/x.txt", "a_member", data=b"x")
    await first.client.close()
    assert not (tmp_path / "d" / "sessions" / sid).exists()
    second = await start_secure(data_dir=tmp_path / "d", keys=first.keys)
    assert (await second.call("GET", f"/v1/sessions/{sid}", "a_member"))[0] == 404
    assert (await second.call("GET", f"/v1/sessions/{kept}/files/x.txt", "a_member"))[0] == 200


async def test_member_sessions_share_a_directory_and_app_sessions_do_not(secure):
    one, two = await _new(secure), await _new(secure)
    app_session = await _new(secure, "a_app")
    other = await _new(secure, "b_member")
    write = "open('/workspace/shared/note.txt', 'w').write('from one')"
    assert (await secure.call("POST", f"/v1/sessions/{one}/exec", "a_member", json={"code": write}))[1]["error"] is None
    _, res, _ = await secure.call("POST", f"/v1/sessions/{two}/exec", "a_member",
                                  json={"code": "open('/workspace/shared/note.txt').read()"})
    assert res["value"] == "'from one'"
    check = "import os\nos.path.exists('/workspace/shared/note.txt')"
    for sid, key in ((app_session, "a_app"), (other, "b_member")):
        _, res, _ = await secure.call("POST", f"/v1/sessions/{sid}/exec", key, json={"code": check})
        assert res["value"] == "False"
    assert (await secure.call("GET", "/v1/shared/files/note.txt", "a_member"))[1] == "from one"
    assert (await secure.call("GET", "/v1/shared/files/note.txt", "a_app"))[0] == 404
    assert (await secure.call("GET", "/v1/shared/files/note.txt", "b_member"))[0] == 404


async def test_concurrent_shared_writes_last_wins_and_no_reader_sees_a_torn_file(secure):
    size = 512 * 1024
    bodies = [bytes([65 + i]) * size for i in range(6)]
    torn = []

    async def reader():
        for _ in range(40):
            status, data, _ = await secure.call("GET", "/v1/shared/files/big.txt", "a_member")
            if status == 200 and (len(data) != size or len(set(data)) != 1):
                torn.append(len(data))
            await asyncio.sleep(0)

    writes = [secure.call("PUT", "/v1/shared/files/big.txt", "a_member", data=b) for b in bodies]
    await asyncio.gather(*writes, reader(), reader())
    assert not torn
    final = (await secure.call("GET", "/v1/shared/files/big.txt", "a_member"))[1]
    assert len(final) == size and len(set(final)) == 1
    leftovers = [p.name for p in (secure.data_dir / "workspaces" / "alpha" / "shared").iterdir()]
    assert leftovers == ["big.txt"]


async def test_host_secrets_never_reach_a_guest_and_failures_say_what_to_do(secure, monkeypatch):
    monkeypatch.setenv("WR_TEST_HOST_SECRET", "hunter2")
    sid = await _new(secure)
    _, res, _ = await secure.call("POST", f"/v1/sessions/{sid}/exec", "a_member",
                                  json={"code": "import os\nsorted(os.environ.items())"})
    assert "hunter2" not in json.dumps(res) and secure.keys["a_member"] not in json.dumps(res)
    _, res, _ = await secure.call("POST", f"/v1/sessions/{sid}/exec", "a_member",
                                  json={"code": "import os\nprint(os.environ.get('WR_TEST_HOST_SECRET'))"})
    assert res["stdout"] == "None\n"
    _, res, _ = await secure.call("POST", f"/v1/sessions/{sid}/exec", "a_member",
                                  json={"code": "import socket\nsocket.create_connection(('127.0.0.1', 9))"})
    assert res["error"] is not None
    _, res, _ = await secure.call("POST", f"/v1/sessions/{sid}/exec", "a_member",
                                  json={"code": "open('/etc/evil', 'w')"})
    assert res["error"] is not None
    status, body, _ = await secure.call("PUT", f"/v1/sessions/{sid}/files/../escape.txt", "a_member", data=b"x")
    assert status in (400, 403, 404)
