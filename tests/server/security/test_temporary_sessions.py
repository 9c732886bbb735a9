"""Temporary sessions: they start from nothing (no shared/, no template), keep no file history, publish
nothing, leave audit rows without code, output or their id, and once they end (deleted, expired, the
service stopped, or a killed process's restart) nothing of them is left anywhere in the data directory:
not in a file, a SQLite database, its WAL or a journal."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from process_calls import SECTIONS, new_session
from server_helpers import assert_error_shape, eventually


def _traces(data_dir: Path, *needles: str) -> list[str]:
    """Every file under `data_dir` (databases, WAL and journal files included) holding one of `needles`,
    in its name or its bytes."""
    found = []
    wanted = [n.encode() for n in needles]
    for root, dirs, files in os.walk(data_dir):  # os.walk skips what a sweep removes while it runs
        for name in dirs + files:
            path = Path(root, name)
            if any(n in str(path.relative_to(data_dir)) for n in needles):
                found.append(f"{path}: name")
        for name in files:
            path = Path(root, name)
            if path.is_symlink():
                continue
            try:
                data = path.read_bytes()
            except FileNotFoundError:  # removed while the scan ran (a sweep, a journal rotated): nothing left
                continue
            found += [f"{path}: {n.decode()}" for n in wanted if n in data]
    return found


async def _use(secure, sid: str) -> tuple[str, str, str]:
    """Run code, write files through the guest and the API; the markers to look for afterwards."""
    code_mark, file_mark, out_mark = (f"{kind}-{secrets.token_hex(8)}" for kind in ("code", "file", "out"))
    code = f"x = '{code_mark}'\nopen('guest.txt', 'w').write('{file_mark}')\nprint('{out_mark}'.upper())"
    status, result, _ = await secure.call("POST", f"/v1/sessions/{sid}/exec", "a_member", json={"code": code})
    assert status == 200 and result["exit_code"] == 0, result
    assert (await secure.call("PUT", f"/v1/sessions/{sid}/files/api.txt", "a_member", data=file_mark))[0] == 201
    status, result, _ = await secure.call("POST", f"/v1/sessions/{sid}/exec", "a_member",
                                          json={"code": "open('api.txt').read()"})
    assert result["value"] == repr(file_mark)
    status, result, _ = await secure.call("POST", f"/v1/sessions/{sid}/process", "a_member",  # the native tier too
                                          json={"command": ["sh", "-c", f"cat api.txt > native.txt; echo {out_mark}"]})
    assert status == 200 and result["stdout"] == out_mark + "\n", result
    return code_mark, file_mark, out_mark


async def test_a_deleted_temporary_session_leaves_nothing_and_never_had_earlier_state(start_secure):
    secure = await start_secure(**SECTIONS)
    assert (await secure.call("PUT", "/v1/shared/files/team.txt", "a_member", data=b"team"))[0] == 201
    status, data, _ = await secure.call("POST", "/v1/sessions", "a_member", json={"temporary": True, "template": "t"})
    assert status == 422, data
    assert_error_shape(data, "temporary_session")
    sid = await new_session(secure, temporary=True)
    status, result, _ = await secure.call("POST", f"/v1/sessions/{sid}/exec", "a_member",
                                          json={"code": "import os\nos.path.exists('/workspace/shared')"})
    assert result["value"] == "False", result  # no shared/: it starts from nothing
    marks = await _use(secure, sid)
    assert any(_traces(secure.data_dir, *marks))  # (the scan finds them while the session lives)

    for method, path, body in (("GET", f"/v1/sessions/{sid}/history?path=api.txt", None),
                               ("POST", f"/v1/sessions/{sid}/artifacts", {"path": "api.txt"}),
                               ("POST", "/v1/templates", {"session": sid, "name": "kept"})):
        status, data, _ = await secure.call(method, path, "a_member", json=body)
        assert status == 409, (path, data)
        assert_error_shape(data, "temporary_session")

    status, page, _ = await secure.call("GET", "/v1/audit", "a_member", params={"session": sid})
    rows = page["entries"]
    assert {r["kind"] for r in rows} >= {"exec", "file"}
    for row in rows:  # metadata only: that it ran, sizes, outcome
        assert row["ephemeral"] and row["session"] != sid and row["session"].startswith("tmp-")
        assert row["code"] is None and row["stdout"] is None and row["path"] is None and row["code_sha256"] is None

    # its kernel saved to disk (its memory holds the code's string), then restored by a call
    assert (await secure.call("POST", f"/v1/sessions/{sid}:hibernate", "a_member"))[0] == 200
    status, result, _ = await secure.call("POST", f"/v1/sessions/{sid}/exec", "a_member", json={"code": "x"})
    assert result["value"] == repr(marks[0]), result
    assert (await secure.call("DELETE", f"/v1/sessions/{sid}", "a_member"))[0] == 204
    assert (await secure.call("GET", "/v1/audit", "a_member"))[0] == 200  # every audit row committed
    assert _traces(secure.data_dir, sid, *marks) == []
    assert (await secure.call("GET", "/v1/shared/files/team.txt", "a_member"))[0] == 200  # shared/ untouched


async def test_the_deprecated_ephemeral_flag_makes_a_temporary_session(start_secure):
    secure = await start_secure(**SECTIONS)
    sid = await new_session(secure, ephemeral=True)
    status, data, _ = await secure.call("POST", f"/v1/sessions/{sid}/artifacts", "a_member", json={"path": "."})
    assert status == 409 and data["error"]["code"] == "temporary_session"


async def test_an_expired_temporary_session_leaves_nothing(start_secure):
    secure = await start_secure(**SECTIONS)
    sid = await new_session(secure, temporary=True)
    marks = await _use(secure, sid)
    status, data, _ = await secure.call("PATCH", f"/v1/sessions/{sid}", "a_member", json={"expires_in_s": 0.5})
    assert status == 200, data

    async def gone() -> bool:
        return (await secure.call("GET", f"/v1/sessions/{sid}", "a_member"))[0] == 404

    await eventually(gone, timeout=15)

    async def erased() -> bool:  # the sweep removes it from the API first, then erases its files
        assert (await secure.call("GET", "/v1/audit", "a_member"))[0] == 200  # every audit row committed
        return _traces(secure.data_dir, sid, *marks) == []

    await eventually(erased, timeout=30)


async def test_a_stop_and_a_killed_process_restart_leave_nothing(start_secure, tmp_path):
    data_dir = tmp_path / "d"
    first = await start_secure(data_dir=data_dir, **SECTIONS)
    sid = await new_session(first, temporary=True)
    kept = await new_session(first)
    marks = await _use(first, sid)
    await first.client.close()
    assert _traces(data_dir, sid, *marks) == []
    # what a killed process leaves: the session's directory with the host's mark, no row anywhere
    orphan = data_dir / "sessions" / "orphan-temporary"
    (orphan / "files").mkdir(parents=True)
    (orphan / "files" / "left.txt").write_text("left-behind-marker")
    (orphan / "temporary").touch()
    second = await start_secure(data_dir=data_dir, keys=first.keys, **SECTIONS)
    assert (await second.call("GET", f"/v1/sessions/{sid}", "a_member"))[0] == 404
    assert (await second.call("GET", f"/v1/sessions/{kept}", "a_member"))[0] == 200
    assert _traces(data_dir, "orphan-temporary", "left-behind-marker") == []
