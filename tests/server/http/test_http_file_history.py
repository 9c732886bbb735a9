"""File history over HTTP: every API write keeps a version, guest changes are found against the last
version the host saw, diffs between versions, bounded per session."""

from __future__ import annotations

import aiohttp
import pytest
from server_helpers import call, new_session, run

pytestmark = pytest.mark.asyncio


async def put(client, sid: str, path: str, text: str) -> None:
    status, result = await call(client, "PUT", f"/v1/sessions/{sid}/files/{path}", data=text.encode())
    assert status in (200, 201), result


async def history(client, sid: str, path: str) -> dict:
    status, result = await call(client, "GET", f"/v1/sessions/{sid}/history", params={"path": path})
    assert status == 200, result
    return result


async def test_put_patch_and_upload_each_keep_a_version_with_a_diff_between_them(client):
    sid = await new_session(client)
    await put(client, sid, "src/app.py", "def f():\n    return 1\n")
    status, _ = await call(client, "PATCH", f"/v1/sessions/{sid}/files/src/app.py",
                           json={"old_text": "return 1", "new_text": "return 2"})
    assert status == 200
    form = aiohttp.FormData()
    form.add_field("file", b"print('up')\n", filename="up.py")
    async with client.post(f"/v1/sessions/{sid}/files", data=form) as response:
        assert response.status == 201
    found = await history(client, sid, "src/app.py")
    assert [(v["version"], v["source"], v["method"]) for v in found["versions"]] == [(1, "api", "put"), (2, "api", "edit")]
    assert found["changed_outside"] is False and found["current_sha256"] == found["versions"][-1]["sha256"]
    assert (await history(client, sid, "up.py"))["versions"][0]["method"] == "upload"
    status, diff = await call(client, "GET", f"/v1/sessions/{sid}/history/diff", params={"path": "src/app.py"})
    assert status == 200 and (diff["from_version"], diff["to_version"]) == (1, None)
    assert "-    return 1\n" in diff["diff"] and "+    return 2\n" in diff["diff"]
    async with client.get(f"/v1/sessions/{sid}/history/content", params={"path": "src/app.py", "version": "1"}) as r:
        assert r.status == 200 and await r.read() == b"def f():\n    return 1\n"
        assert r.headers["Content-Security-Policy"].startswith("sandbox")
    status, body = await call(client, "GET", f"/v1/sessions/{sid}/history/content",
                              params={"path": "src/app.py", "version": "9"})
    assert status == 404 and body["error"]["code"] == "version_not_found"


async def test_a_guest_change_is_compared_with_the_last_version_the_host_saw(client):
    sid = await new_session(client)
    await put(client, sid, "notes.txt", "one\n")
    result = await run(client, sid, "open('notes.txt', 'a').write('by the guest\\n')")
    assert result["exit_code"] == 0, result
    found = await history(client, sid, "notes.txt")
    assert found["changed_outside"] is True and len(found["versions"]) == 1
    status, diff = await call(client, "GET", f"/v1/sessions/{sid}/history/diff", params={"path": "notes.txt"})
    assert "+by the guest\n" in diff["diff"]
    await put(client, sid, "notes.txt", "rewritten\n")
    found = await history(client, sid, "notes.txt")
    assert [v["source"] for v in found["versions"]] == ["api", "outside", "api"]


async def test_history_is_bounded_per_session_and_can_be_turned_off(serve, tmp_path):
    client = await serve(history={"max_versions": 3})
    sid = await new_session(client)
    for i in range(5):
        await put(client, sid, "a.txt", f"{i}\n")
    assert [v["version"] for v in (await history(client, sid, "a.txt"))["versions"]] == [3, 4, 5]
    off = await serve(data_dir=tmp_path / "off", history={"max_versions": 0})
    sid = await new_session(off)
    await put(off, sid, "a.txt", "x")
    assert (await history(off, sid, "a.txt"))["versions"] == []
    assert not (tmp_path / "off" / "sessions" / sid / "history").exists()


async def test_history_is_not_visible_to_the_guest(client):
    sid = await new_session(client)
    await put(client, sid, "a.txt", "x")
    result = await run(client, sid, "import os; print(sorted(os.listdir('.')), os.path.exists('../history'))")
    assert result["stdout"] == "['a.txt'] False\n"
