"""Artifacts: published on purpose, immutable and content-addressed, kept past the session and the
service's restarts under their own retention, visible to their workspace only (links included)."""

from __future__ import annotations

import asyncio
import hashlib
import io
import time
import zipfile

from server_helpers import link_path

from wasm_runner_server.http.policy import POLICY


async def session_with(secure, key: str, files: dict[str, bytes], **create) -> str:
    status, info, _ = await secure.call("POST", "/v1/sessions", key, json=create)
    assert status == 201, info
    for path, data in files.items():
        status, body, _ = await secure.call("PUT", f"/v1/sessions/{info['id']}/files/{path}", key, data=data)
        assert status in (200, 201), body
    return info["id"]


async def publish(secure, key: str, session_id: str, **body):
    return await secure.call("POST", f"/v1/sessions/{session_id}/artifacts", key, json=body)


async def fetch(secure, path: str, key: str | None = None) -> tuple[int, bytes, dict]:
    headers = secure.auth(key) if key else {}
    async with secure.client.get(link_path(path), headers=headers) as response:
        return response.status, await response.read(), dict(response.headers)


async def test_a_published_file_is_an_immutable_content_addressed_artifact(secure):
    data = b"name,score\nada,3\n"
    sid = await session_with(secure, "a_member", {"out/report.csv": data})
    status, art, _ = await publish(secure, "a_member", sid, path="out/report.csv", note="weekly")
    assert status == 201, art
    assert art["name"] == "report.csv" and art["media_type"] == "text/csv" and art["size"] == len(data)
    assert art["sha256"] == hashlib.sha256(data).hexdigest()
    assert art["session"] == sid and art["source_path"] == "out/report.csv" and art["note"] == "weekly"
    assert art["key_id"] == secure.keys["a_member"][3:15] and art["expires_at"] > time.time() + 29 * 86400
    # the working file changes; the artifact does not
    await secure.call("PUT", f"/v1/sessions/{sid}/files/out/report.csv", "a_member", data=b"changed")
    status, body, headers = await fetch(secure, f"/v1/artifacts/{art['id']}/content", "a_member")
    assert status == 200 and body == data and "attachment" in headers["Content-Disposition"]
    assert headers["Content-Security-Policy"].startswith("sandbox")
    status, listed, _ = await secure.call("GET", f"/v1/artifacts?session={sid}", "a_member")
    assert [a["id"] for a in listed["artifacts"]] == [art["id"]]
    # the same bytes published again are stored once
    await secure.call("PUT", f"/v1/sessions/{sid}/files/copy.csv", "a_member", data=data)
    status, again, _ = await publish(secure, "a_member", sid, path="copy.csv")
    assert again["sha256"] == art["sha256"] and again["id"] != art["id"]
    blobs = [p for p in (secure.data_dir / "artifacts" / "blobs").rglob("*") if p.is_file()]
    assert len(blobs) == 1


async def test_a_folder_is_published_as_an_archive(secure):
    sid = await session_with(secure, "a_member", {"site/index.html": b"<h1>hi</h1>", "site/a/b.txt": b"b"})
    status, art, _ = await publish(secure, "a_member", sid, path="site")
    assert status == 201 and art["name"] == "site.zip" and art["media_type"] == "application/zip"
    _, body, _ = await fetch(secure, f"/v1/artifacts/{art['id']}/content", "a_member")
    assert sorted(zipfile.ZipFile(io.BytesIO(body)).namelist()) == ["a/", "a/b.txt", "index.html"]
    status, art, _ = await publish(secure, "a_member", sid, path="site", format="tar.gz", name="site.tgz")
    assert status == 201 and art["name"] == "site.tgz" and art["media_type"] == "application/gzip"


async def test_missing_paths_and_links_are_refused_with_what_to_do(secure):
    sid = await session_with(secure, "a_member", {"a.txt": b"a"})
    status, body, _ = await publish(secure, "a_member", sid, path="nope.txt")
    assert status == 404 and body["error"]["code"] == "file_not_found"
    (secure.data_dir / "sessions" / sid / "files" / "link").symlink_to("/etc/passwd")
    status, body, _ = await publish(secure, "a_member", sid, path="link")
    assert status == 409 and body["error"]["code"] == "not_a_file"
    status, body, _ = await publish(secure, "a_member", sid, path="a.txt", extra=1)
    assert status == 422


async def test_another_workspace_sees_no_artifact_and_no_link_of_it(secure):
    sid = await session_with(secure, "a_member", {"secret.txt": b"alpha only"})
    _, art, _ = await publish(secure, "a_member", sid, path="secret.txt")
    for method, path in (("GET", f"/v1/artifacts/{art['id']}"), ("GET", f"/v1/artifacts/{art['id']}/content"),
                         ("DELETE", f"/v1/artifacts/{art['id']}"), ("POST", f"/v1/artifacts/{art['id']}:presign")):
        status, body, _ = await secure.call(method, path, "b_member")
        assert status == 404 and body["error"]["code"] == "artifact_not_found", (method, path)
    assert (await secure.call("GET", "/v1/artifacts", "b_member"))[1]["artifacts"] == []
    assert (await publish(secure, "b_member", sid, path="secret.txt"))[0] == 404  # not beta's session
    # beta's own link, pointed at alpha's artifact, is a 404 too
    beta_sid = await session_with(secure, "b_member", {"mine.txt": b"beta"})
    _, beta_art, _ = await publish(secure, "b_member", beta_sid, path="mine.txt")
    _, link, _ = await secure.call("POST", f"/v1/artifacts/{beta_art['id']}:presign", "b_member", json={})
    assert (await fetch(secure, link["url"]))[1] == b"beta"
    swapped = link["url"].rsplit("/", 1)[0] + "/" + art["id"]
    status, body, _ = await fetch(secure, swapped)
    assert status == 404 and b"artifact_not_found" in body


async def test_links_download_without_a_key_until_expiry_or_deletion(secure):
    sid = await session_with(secure, "a_member", {"chart.png": b"\x89PNG fake"})
    _, art, _ = await publish(secure, "a_member", sid, path="chart.png")
    status, link, _ = await secure.call("POST", f"/v1/artifacts/{art['id']}:presign", "a_member")
    assert status == 200 and 3590 < link["expires_in"] <= 3601
    assert link["url"].startswith(f"http://127.0.0.1:{secure.client.port}/v1/artifact-links/")
    status, body, headers = await fetch(secure, link["url"])
    assert status == 200 and body == b"\x89PNG fake" and headers["Content-Type"] == "image/png"
    assert (await fetch(secure, link["url"] + "?x=1"))[0] == 404  # one spelling
    status, body, _ = await secure.call("POST", f"/v1/artifacts/{art['id']}:presign", "a_member",
                                        json={"expires_in": 30 * 86400})
    assert status == 422 and body["error"]["code"] == "limit_exceeds_maximum"
    _, short, _ = await secure.call("POST", f"/v1/artifacts/{art['id']}:presign", "a_member", json={"expires_in": 1})
    await asyncio.sleep(2.1)
    status, body, _ = await fetch(secure, short["url"])
    assert status == 403 and b"link_expired" in body
    # a file link's token does not open an artifact, nor the reverse
    _, file_link, _ = await secure.call("POST", f"/v1/sessions/{sid}/files/chart.png:presign", "a_member")
    token = link_path(file_link["url"]).split("/")[3]
    assert (await fetch(secure, f"/v1/artifact-links/{token}/{art['id']}"))[0] == 404
    status, deleted, _ = await secure.call("DELETE", f"/v1/artifacts/{art['id']}", "a_member")
    assert status == 200 and deleted["id"] == art["id"]
    assert (await fetch(secure, link["url"]))[0] == 404
    assert not [p for p in (secure.data_dir / "artifacts" / "blobs").rglob("*") if p.is_file()]


async def test_a_link_dies_with_the_key_that_made_it(secure):
    sid = await session_with(secure, "a_member", {"x.txt": b"x"})
    _, art, _ = await publish(secure, "a_member", sid, path="x.txt")
    _, temp, _ = await secure.call("POST", "/v1/admin/keys", "admin", json={"workspace": "alpha", "name": "t"})
    headers = {"Authorization": f"Bearer {temp['key']}"}
    status, link, _ = await secure.call("POST", f"/v1/artifacts/{art['id']}:presign", headers=headers)
    assert status == 200 and (await fetch(secure, link["url"]))[0] == 200
    assert (await secure.call("DELETE", f"/v1/admin/keys/{temp['prefix']}", "admin"))[0] == 200
    status, body, _ = await fetch(secure, link["url"])
    assert status == 403 and b"link_revoked" in body


async def test_publish_and_delete_leave_audit_rows(secure):
    sid = await session_with(secure, "a_member", {"r.md": b"# r"})
    _, art, _ = await publish(secure, "a_member", sid, path="r.md")
    await secure.call("DELETE", f"/v1/artifacts/{art['id']}", "a_member")
    status, page, _ = await secure.call("GET", "/v1/audit?kind=artifact", "a_member")
    assert status == 200
    rows = [(e["mode"], e["path"], e["session"], e["key_id"]) for e in page["entries"]]
    key_id = secure.keys["a_member"][3:15]
    assert rows == [("publish", "r.md", sid, key_id), ("delete", "r.md", sid, key_id)]


async def test_a_temporary_session_publishes_nothing(secure):
    sid = await session_with(secure, "a_member", {"tmp.txt": b"t"}, temporary=True)
    status, data, _ = await publish(secure, "a_member", sid, path="tmp.txt")
    assert status == 409 and data["error"]["code"] == "temporary_session", data
    assert (await secure.call("GET", "/v1/artifacts", "a_member"))[1]["artifacts"] == []
    _, page, _ = await secure.call("GET", "/v1/audit?kind=artifact", "a_member")
    assert page["entries"] == []


async def test_artifacts_survive_the_session_expiry_and_a_restart(start_secure, tmp_path):
    first = await start_secure()
    sid = await session_with(first, "a_member", {"result.json": b'{"ok": true}'}, ttl_s=1)
    _, art, _ = await publish(first, "a_member", sid, path="result.json")
    _, link, _ = await first.call("POST", f"/v1/artifacts/{art['id']}:presign", "a_member")
    await asyncio.sleep(1.5)
    assert (await first.call("GET", f"/v1/sessions/{sid}", "a_member"))[0] == 404
    assert not (first.data_dir / "sessions" / sid).exists()
    assert (await fetch(first, f"/v1/artifacts/{art['id']}/content", "a_member"))[1] == b'{"ok": true}'
    await first.client.close()
    second = await start_secure(data_dir=first.data_dir, keys=first.keys)
    status, info, _ = await second.call("GET", f"/v1/artifacts/{art['id']}", "a_member")
    assert status == 200 and info["session"] == sid
    assert (await fetch(second, link["url"]))[1] == b'{"ok": true}'


async def test_retention_removes_expired_artifacts_per_workspace(start_secure):
    secure = await start_secure(artifacts={"retention_days": 1 / 86400, "workspace_retention_days": {"beta": None}})
    a_sid = await session_with(secure, "a_member", {"a.txt": b"a"})
    b_sid = await session_with(secure, "b_member", {"b.txt": b"b"})
    _, a_art, _ = await publish(secure, "a_member", a_sid, path="a.txt")
    _, b_art, _ = await publish(secure, "b_member", b_sid, path="b.txt")
    assert b_art["expires_at"] is None and a_art["expires_at"] <= time.time() + 1
    await asyncio.sleep(1.1)
    assert (await secure.call("GET", f"/v1/artifacts/{a_art['id']}", "a_member"))[0] == 404  # expired: gone at once
    assert secure.client.app[POLICY].prune_artifacts() == 1
    assert (await secure.call("GET", f"/v1/artifacts/{b_art['id']}", "b_member"))[0] == 200
    _, page, _ = await secure.call("GET", "/v1/audit?kind=artifact&workspace=alpha", "admin")  # not a member's call
    assert [(e["mode"], e["key_id"]) for e in page["entries"]][-1] == ("expire", "retention")
