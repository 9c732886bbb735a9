"""The file API over HTTP: raw bytes both ways, Range, edits, diffs, listing, glob, grep,
multipart upload, archives, quotas, and every way out of the workspace refused."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import zipfile

import aiohttp
import pytest
from server_helpers import assert_error_shape, call, new_session, raw_url, run

pytestmark = pytest.mark.asyncio


async def put(client, sid: str, path: str, data: bytes | str) -> dict:
    status, result = await call(client, "PUT", f"/v1/sessions/{sid}/files/{path}",
                                data=data.encode() if isinstance(data, str) else data)
    assert status in (200, 201), result
    return result


async def test_put_get_delete_raw_bytes_with_content_type(client):
    sid = await new_session(client)
    payload = bytes(range(256)) * 10
    status, result = await call(client, "PUT", f"/v1/sessions/{sid}/files/data/blob.bin", data=payload)
    assert status == 201 and result == {"path": "data/blob.bin", "size": 2560, "created": True}
    status, result = await call(client, "PUT", f"/v1/sessions/{sid}/files/data/blob.bin", data=payload[:10])
    assert status == 200 and result["created"] is False and result["size"] == 10
    await put(client, sid, "page.html", "<p>hi</p>")
    async with client.get(f"/v1/sessions/{sid}/files/page.html") as response:
        assert response.status == 200 and response.headers["Content-Type"].startswith("text/html")
        assert response.headers["Accept-Ranges"] == "bytes" and "Last-Modified" in response.headers
        assert await response.text() == "<p>hi</p>"
    async with client.get(f"/v1/sessions/{sid}/files/data/blob.bin") as response:
        assert response.headers["Content-Type"] == "application/octet-stream"
        assert await response.read() == payload[:10]
    async with client.head(f"/v1/sessions/{sid}/files/page.html") as response:
        assert response.status == 200 and response.headers["Content-Length"] == "9"
    status, result = await call(client, "DELETE", f"/v1/sessions/{sid}/files/page.html")
    assert status == 200 and result == {"path": "page.html", "type": "file"}
    status, data = await call(client, "GET", f"/v1/sessions/{sid}/files/page.html")
    assert status == 404
    assert_error_shape(data, "file_not_found")


async def test_the_guest_sees_what_the_api_wrote_and_the_other_way_round(client):
    sid = await new_session(client)
    await put(client, sid, "in.txt", "from the api")
    result = await run(client, sid, "print(open('/workspace/in.txt').read())\nopen('out.txt', 'w').write('from the guest')")
    assert result["stdout"] == "from the api\n"
    async with client.get(f"/v1/sessions/{sid}/files/out.txt") as response:
        assert await response.text() == "from the guest"


async def test_large_files_stream_both_ways(client):
    sid = await new_session(client)
    chunk = os.urandom(1 << 20)

    async def produce():
        for _ in range(12):
            yield chunk

    status, result = await call(client, "PUT", f"/v1/sessions/{sid}/files/big.bin", data=produce())
    assert status == 201 and result["size"] == 12 << 20
    received = hashlib.sha256()
    async with client.get(f"/v1/sessions/{sid}/files/big.bin") as response:
        async for piece in response.content.iter_chunked(1 << 16):
            received.update(piece)
    assert received.hexdigest() == hashlib.sha256(chunk * 12).hexdigest()


async def test_range_requests(client):
    sid = await new_session(client)
    await put(client, sid, "digits.txt", "0123456789")
    cases = {"bytes=2-5": (206, "2345", "bytes 2-5/10"), "bytes=7-": (206, "789", "bytes 7-9/10"),
             "bytes=-3": (206, "789", "bytes 7-9/10"), "bytes=8-100": (206, "89", "bytes 8-9/10")}
    for header, (status, text, content_range) in cases.items():
        async with client.get(f"/v1/sessions/{sid}/files/digits.txt", headers={"Range": header}) as response:
            assert response.status == status and await response.text() == text
            assert response.headers["Content-Range"] == content_range
    async with client.get(f"/v1/sessions/{sid}/files/digits.txt", headers={"Range": "bytes=20-30"}) as response:
        assert response.status == 416 and response.headers["Content-Range"] == "bytes */10"
        assert_error_shape(await response.json(), "range_not_satisfiable")
    async with client.get(f"/v1/sessions/{sid}/files/digits.txt", headers={"Range": "bytes=0-1,4-5"}) as response:
        assert response.status == 200 and await response.text() == "0123456789"  # multiple ranges: whole file


async def test_edit_by_search_and_replace(client):
    sid = await new_session(client)
    await put(client, sid, "app.py", "x = 1\ny = 2\nx = 1\n")
    url = f"/v1/sessions/{sid}/files/app.py"
    status, data = await call(client, "PATCH", url, json={"old_text": "y = 2", "new_text": "y = 3"})
    assert status == 200 and data["replacements"] == 1
    status, data = await call(client, "PATCH", url, json={"old_text": "z = 9", "new_text": "z = 0"})
    assert status == 422
    assert_error_shape(data, "edit_not_found")
    status, data = await call(client, "PATCH", url, json={"old_text": "x = 1", "new_text": "x = 5"})
    assert status == 409
    assert_error_shape(data, "edit_not_unique")
    assert "2 times" in data["error"]["message"] and "lines 1, 3" in data["error"]["message"]
    status, data = await call(client, "PATCH", url, json={"old_text": "x = 1", "new_text": "x = 5", "replace_all": True})
    assert status == 200 and data["replacements"] == 2
    status, data = await call(client, "PATCH", url, json={"edits": [
        {"old_text": "y = 3", "new_text": "y = 4"}, {"old_text": "never", "new_text": ""}]})
    assert status == 422  # all or nothing: the first edit is not applied either
    async with client.get(url) as response:
        assert await response.text() == "x = 5\ny = 3\nx = 5\n"
    status, data = await call(client, "PATCH", url, json={"old_text": "a", "patch": "@@"})
    assert status == 422
    assert_error_shape(data, "validation_error")


async def test_edit_by_unified_diff(client):
    sid = await new_session(client)
    await put(client, sid, "greet.py", "def greet(name):\n    return 'hi ' + name\n\nprint(greet('bob'))\n")
    diff = ("--- a/greet.py\n+++ b/greet.py\n@@ -1,4 +1,4 @@\n def greet(name):\n"
            "-    return 'hi ' + name\n+    return f'hello {name}'\n \n print(greet('bob'))\n")
    status, data = await call(client, "PATCH", f"/v1/sessions/{sid}/files/greet.py", json={"patch": diff})
    assert status == 200 and data["hunks"] == 1
    assert (await run(client, sid, None, path="greet.py"))["stdout"] == "hello bob\n"
    status, data = await call(client, "PATCH", f"/v1/sessions/{sid}/files/greet.py", json={"patch": diff})
    assert status == 409  # already applied: the removed line is gone
    assert_error_shape(data, "patch_failed")


async def test_listing_glob_and_grep(client):
    sid = await new_session(client)
    for path in ("a.py", "src/b.py", "src/pkg/c.py", "src/pkg/notes.txt", "README.md"):
        await put(client, sid, path, f"# {path}\nimport os\nTODO = '{path}'\n")
    status, listing = await call(client, "GET", f"/v1/sessions/{sid}/files")
    assert status == 200
    assert [(e["path"], e["type"]) for e in listing["entries"]] == [("README.md", "file"), ("a.py", "file"),
                                                                      ("src", "directory")]
    entry = listing["entries"][1]
    assert entry["size"] == len("# a.py\nimport os\nTODO = 'a.py'\n") and entry["mtime"].endswith("Z")
    status, listing = await call(client, "GET", f"/v1/sessions/{sid}/files", params={"path": "src", "recursive": "true"})
    assert [e["path"] for e in listing["entries"]] == ["src/b.py", "src/pkg", "src/pkg/c.py", "src/pkg/notes.txt"]
    status, listing = await call(client, "GET", f"/v1/sessions/{sid}/files/src/pkg")  # a directory answers its listing
    assert status == 200 and [e["path"] for e in listing["entries"]] == ["src/pkg/c.py", "src/pkg/notes.txt"]

    async def glob(pattern: str) -> list[str]:
        status, data = await call(client, "GET", f"/v1/sessions/{sid}/glob", params={"pattern": pattern})
        assert status == 200, data
        return [m["path"] for m in data["matches"]]

    assert await glob("*.py") == ["a.py"]  # * does not cross /
    assert await glob("src/*.py") == ["src/b.py"]
    assert await glob("**/*.py") == ["a.py", "src/b.py", "src/pkg/c.py"]  # ** spans any depth
    assert await glob("src/**") == ["src/b.py", "src/pkg", "src/pkg/c.py", "src/pkg/notes.txt"]
    assert await glob("**/*.{md,txt}") == ["README.md", "src/pkg/notes.txt"]

    status, found = await call(client, "GET", f"/v1/sessions/{sid}/grep", params={"pattern": r"TODO = '(src/)?\w\.py'"})
    assert status == 200
    assert [(m["path"], m["line"]) for m in found["matches"]] == [("a.py", 3), ("src/b.py", 3)]
    status, found = await call(client, "GET", f"/v1/sessions/{sid}/grep",
                               params={"pattern": "IMPORT", "ignore_case": "true", "glob": "*.py", "max_matches": "2"})
    assert len(found["matches"]) == 2 and found["truncated"] is True
    status, data = await call(client, "GET", f"/v1/sessions/{sid}/grep", params={"pattern": "("})
    assert status == 422
    assert_error_shape(data, "invalid_pattern")


async def test_multipart_upload_of_several_files(client):
    sid = await new_session(client)
    form = aiohttp.FormData()
    form.add_field("file", b"one", filename="one.txt")
    form.add_field("file", b"\x00\x01", filename="nested/two.bin")
    status, data = await call(client, "POST", f"/v1/sessions/{sid}/files", params={"dir": "up"}, data=form)
    assert status == 201
    assert [(f["path"], f["size"]) for f in data["files"]] == [("up/one.txt", 3), ("up/nested/two.bin", 2)]
    async with client.get(f"/v1/sessions/{sid}/files/up/nested/two.bin") as response:
        assert await response.read() == b"\x00\x01"
    bad = aiohttp.FormData()
    bad.add_field("file", b"x", filename="../escape.txt")
    status, data = await call(client, "POST", f"/v1/sessions/{sid}/files", data=bad)
    assert status == 403
    assert_error_shape(data, "path_escape")


@pytest.mark.parametrize("fmt", ["zip", "tar.gz"])
async def test_folder_downloads_as_an_archive(client, tmp_path, fmt):
    sid = await new_session(client)
    await put(client, sid, "out/a.txt", "A")
    await put(client, sid, "out/sub/b.bin", b"\x00B")
    await put(client, sid, "other.txt", "not included")
    os.symlink("/etc/passwd", tmp_path / "data" / "sessions" / sid / "files" / "out" / "link")
    async with client.get(f"/v1/sessions/{sid}/archive", params={"path": "out", "format": fmt}) as response:
        assert response.status == 200
        assert f'filename="out.{"zip" if fmt == "zip" else "tar.gz"}"' in response.headers["Content-Disposition"]
        data = await response.read()
    if fmt == "zip":
        archive = zipfile.ZipFile(io.BytesIO(data))
        names = sorted(archive.namelist())
        assert names == ["a.txt", "sub/", "sub/b.bin"]
        assert archive.read("sub/b.bin") == b"\x00B"
    else:
        archive = tarfile.open(fileobj=io.BytesIO(data), mode="r:gz")
        assert sorted(archive.getnames()) == ["a.txt", "sub", "sub/b.bin"]
        assert archive.extractfile("sub/b.bin").read() == b"\x00B"


async def test_writes_past_the_quota_are_refused(serve):
    client = await serve(profiles={"tiny": {"language": "python", "limits": {"disk_bytes": 1000, "disk_files": 3}}})
    sid = await new_session(client, profile="tiny")
    await put(client, sid, "a.bin", b"x" * 600)
    status, data = await call(client, "PUT", f"/v1/sessions/{sid}/files/b.bin", data=b"x" * 600)
    assert status == 413
    assert_error_shape(data, "quota_exceeded")
    await put(client, sid, "a.bin", b"x" * 900)  # replacing a file counts its old size as free
    await put(client, sid, "b.txt", b"")
    await put(client, sid, "c.txt", b"")
    status, data = await call(client, "PUT", f"/v1/sessions/{sid}/files/d.txt", data=b"")
    assert status == 413
    assert_error_shape(data, "quota_exceeded")


async def test_a_session_not_used_yet_has_an_empty_workspace(client, tmp_path):
    sid = await new_session(client)
    status, listing = await call(client, "GET", f"/v1/sessions/{sid}/files")
    assert status == 200 and listing["entries"] == []
    status, found = await call(client, "GET", f"/v1/sessions/{sid}/grep", params={"pattern": "x"})
    assert status == 200 and found["matches"] == []
    status, _ = await call(client, "GET", f"/v1/sessions/{sid}/files/missing.txt")
    assert status == 404
    assert not (tmp_path / "data" / "sessions" / sid).exists()  # reading did not create it


# -- every escape is a 4xx --------------------------------------------------------------------------

ESCAPES = [
    "../outside.txt", "..%2Foutside.txt", "%2e%2e/outside.txt", "a/../../outside.txt", "a/%2e%2e/%2e%2e/outside.txt",
    "..", "%2Fetc%2Fpasswd", "/etc/passwd", "%2Fworkspace%2F..%2Fetc", "link-out/passwd", "link-out",
    "link-file", "deep/link-up/x", "a%00b",
]


async def _session_with_links(client, tmp_path) -> str:
    sid = await new_session(client)
    await put(client, sid, "deep/ok.txt", "fine")
    files = tmp_path / "data" / "sessions" / sid / "files"
    os.symlink("/etc", files / "link-out")
    os.symlink("/etc/passwd", files / "link-file")
    os.symlink("../..", files / "deep" / "link-up")
    (tmp_path / "data" / "outside.txt").write_text("secret")
    return sid


@pytest.mark.parametrize("method", ["GET", "HEAD", "PUT", "DELETE", "PATCH"])
async def test_every_file_path_escape_is_refused(client, tmp_path, method):
    sid = await _session_with_links(client, tmp_path)
    for raw in ESCAPES:
        if method == "DELETE" and raw in ("link-out", "link-file"):
            continue  # deleting a link itself is allowed (below)
        kwargs = {"json": {"old_text": "root", "new_text": "x"}} if method == "PATCH" else {}
        if method == "PUT":
            kwargs = {"data": b"pwned"}
        async with client.session.request(method, raw_url(client, f"/v1/sessions/{sid}/files/{raw}"), **kwargs) as response:
            assert 400 <= response.status < 500, (method, raw, response.status)
            if method != "HEAD":
                assert_error_shape(await response.json())
    assert (tmp_path / "data" / "outside.txt").read_text() == "secret"
    assert os.path.islink(tmp_path / "data" / "sessions" / sid / "files" / "link-out")
    assert open("/etc/passwd").read() != "pwned"
    if method == "DELETE":  # a link itself can be removed; its target is untouched
        status, data = await call(client, "DELETE", f"/v1/sessions/{sid}/files/link-file")
        assert status == 200 and data == {"path": "link-file", "type": "symlink"}
        assert os.path.exists("/etc/passwd")


async def test_escapes_through_queries_uploads_and_one_shot_are_refused(client, tmp_path):
    sid = await _session_with_links(client, tmp_path)
    base = f"/v1/sessions/{sid}"
    query_cases = [
        ("/files", {"path": "../"}), ("/files", {"path": "link-out"}), ("/files", {"path": "/etc"}),
        ("/glob", {"pattern": "../*"}), ("/glob", {"pattern": "/etc/*"}), ("/glob", {"pattern": "link-out/*"}),
        ("/grep", {"pattern": "root", "path": "../.."}), ("/grep", {"pattern": "root", "path": "link-out"}),
        ("/grep", {"pattern": "root", "glob": "../*"}),
        ("/archive", {"path": ".."}), ("/archive", {"path": "link-out"}), ("/archive", {"path": "deep/link-up"}),
    ]
    for suffix, params in query_cases:
        status, data = await call(client, "GET", base + suffix, params=params)
        if status == 200:  # links are never followed: a glob finds nothing behind one,
            if suffix == "/glob":  # and listing a link shows the link itself
                assert data["matches"] == [], (params, data)
            else:
                assert suffix == "/files", (suffix, params, data)
                assert [(e["path"], e["type"]) for e in data["entries"]] == [("link-out", "symlink")], data
            continue
        assert 400 <= status < 500, (suffix, params, status)
        assert_error_shape(data)
    # Links are listed, but never followed, by listing, glob, grep and archives.
    status, listing = await call(client, "GET", base + "/files", params={"recursive": "true"})
    assert {e["path"]: e["type"] for e in listing["entries"]}["link-out"] == "symlink"
    status, found = await call(client, "GET", base + "/grep", params={"pattern": "root"})
    assert status == 200 and found["matches"] == []
    status, matched = await call(client, "GET", base + "/glob", params={"pattern": "**/passwd"})
    assert matched["matches"] == []
    for path in ("../x.py", "/etc/x", "a/../../x"):
        status, data = await call(client, "POST", "/v1/exec", json={"code": "1", "files": {path: "x"}})
        assert 400 <= status < 500, (path, status)
        assert_error_shape(data)
    for pattern in ("../outside.txt", "/etc/passwd"):
        status, data = await call(client, "POST", "/v1/exec", json={"code": "1", "output_files": [pattern]})
        assert 400 <= status < 500
        assert_error_shape(data)


async def test_links_made_by_the_guest_are_not_followed(client):
    sid = await new_session(client)
    code = "import os\ntry:\n    os.symlink('/etc/passwd', 'pw')\nexcept OSError as e:\n    print('refused', e)"
    result = await run(client, sid, code)
    status, data = await call(client, "GET", f"/v1/sessions/{sid}/files/pw")
    if "refused" in result["stdout"]:
        assert status == 404  # WASI would not even create it
    else:
        assert status == 403
        assert_error_shape(data, "path_escape")


GUEST_NAMES = ["line\nbreak.txt", "cr\rname.txt", "tab\tname.txt", "rtl-\u202egnp.exe", "bell\x07.txt",
               "dir\nwith/inner\nfile.txt", "%0A literally.txt"]


async def test_every_name_a_guest_can_create_is_readable_replaceable_and_deletable(client):
    from urllib.parse import quote

    sid = await new_session(client)
    result = await run(client, sid, f"import os\nfor name in {GUEST_NAMES!r}:\n"
                       "    os.makedirs(os.path.dirname(name) or '.', exist_ok=True)\n"
                       "    open(name, 'w').write('guest:' + name)\n")
    assert result["exit_code"] == 0, result
    status, listing = await call(client, "GET", f"/v1/sessions/{sid}/files?recursive=true")
    listed = {e["path"] for e in listing["entries"] if e["type"] == "file"}
    assert listed == set(GUEST_NAMES)
    for name in GUEST_NAMES:
        url = raw_url(client, f"/v1/sessions/{sid}/files/" + "/".join(quote(p, safe="") for p in name.split("/")))
        async with client.session.get(url) as response:
            assert response.status == 200, (name, await response.text())
            assert await response.text() == "guest:" + name
        async with client.session.put(url, data=b"replaced") as response:
            assert response.status == 200, (name, await response.text())
        async with client.session.get(url) as response:
            assert await response.read() == b"replaced"
        async with client.session.delete(url) as response:
            assert response.status == 200, (name, await response.text())
    status, listing = await call(client, "GET", f"/v1/sessions/{sid}/files?recursive=true")
    assert [e["path"] for e in listing["entries"] if e["type"] == "file"] == []


async def test_newlines_do_not_open_a_way_out_of_the_workspace(client):
    sid = await new_session(client)
    for raw in ["%0A/../../etc/passwd", "a%0A/%2E%2E/%2E%2E/x", "%2Fetc%2Fpasswd%0A", "a%0Ab%00c"]:
        async with client.session.put(raw_url(client, f"/v1/sessions/{sid}/files/{raw}"), data=b"x") as response:
            data = await response.json()
            assert response.status in (400, 403), (raw, data)
            assert data["error"]["code"] in ("path_escape", "invalid_path"), (raw, data)
