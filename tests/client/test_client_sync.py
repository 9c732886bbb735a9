"""wasm_runner.client.Client against a real server on 127.0.0.1."""

from __future__ import annotations

import io
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

from wasm_runner_client import (
    BadRequestError,
    Client,
    ConflictError,
    ExecResult,
    FileListing,
    LimitsPatch,
    NotFoundError,
    OneShotResult,
    PermissionDeniedError,
    SessionInfo,
    TransportError,
)


def test_sessions_exec_and_the_typed_results(server) -> None:
    with Client(server.url) as client:
        assert client.health().status == "ok"
        assert client.readiness().ready is True
        assert "python" in {p.name for p in client.profiles().profiles}

        info = client.create_session("conversation-1", metadata={"user": "ada"})
        assert isinstance(info, SessionInfo) and info.id == "conversation-1" and info.state == "idle"
        result = client.exec(info.id, "x = 6 * 7\nprint('hello')\nx")
        assert isinstance(result, ExecResult)
        assert (result.stdout, result.value, result.exit_code, result.ok) == ("hello\n", "42", 0, True)
        assert client.exec(info.id, "x + 1").value == "43"  # the kernel keeps state
        assert client.get_session(info.id).executions == 2

        others = [client.create_session().id for _ in range(3)]
        assert [s.id for s in client.iter_sessions(page_size=2)] == ["conversation-1", *others]
        page = client.list_sessions(limit=1)
        assert len(page.sessions) == 1 and page.next_cursor is not None

        limited = client.exec(info.id, "while True: pass", limits={"timeout_s": 0.5}, fresh=True)
        assert limited.limit == "timeout" and not limited.ok
        one_shot = client.run("import sys\nprint(open('in.txt').read().upper(), file=sys.stderr)\n"
                              "open('out.csv', 'w').write('a,b')", files={"in.txt": "abc", "raw.bin": b"\x00\xff"},
                              output_files=["*.csv", "missing.txt"])
        assert isinstance(one_shot, OneShotResult)
        assert one_shot.stderr == "ABC\n" and one_shot.output_files["out.csv"].data == b"a,b"
        assert one_shot.missing_outputs == ["missing.txt"]

        client.delete_session(others[0])
        with pytest.raises(NotFoundError) as caught:
            client.get_session(others[0])
        assert caught.value.code == "session_not_found" and caught.value.status == 404


def test_file_helpers_upload_download_edit_and_search(server, tmp_path: Path) -> None:
    with Client(server.url) as client:
        sid = client.create_session().id
        created = client.write_file(sid, "docs/a note%.txt", "one\ntwo\nthree\n")
        assert (created.path, created.size, created.created) == ("docs/a note%.txt", 14, True)
        assert client.read_text(sid, "docs/a note%.txt") == "one\ntwo\nthree\n"

        local = tmp_path / "big.bin"
        local.write_bytes(bytes(range(256)) * 4096)  # 1 MiB, streamed up and down
        assert client.upload_file(sid, local, "data/big.bin").size == 1024 * 1024
        uploaded = client.upload(sid, {"multi/x.txt": b"x", "multi/y z.txt": "y", "multi/f.bin": io.BytesIO(b"f")},
                                 dir="up")
        assert [f.path for f in uploaded.files] == ["up/multi/x.txt", "up/multi/y z.txt", "up/multi/f.bin"]

        target = tmp_path / "down.bin"
        assert client.download(sid, "data/big.bin", target) == 1024 * 1024
        assert target.read_bytes() == local.read_bytes()
        sink = io.BytesIO()
        client.download(sid, "up/multi/y z.txt", sink)
        assert sink.getvalue() == b"y"

        edited = client.edit_file(sid, "docs/a note%.txt", "two", "TWO")
        assert edited.replacements == 1
        client.edit_file(sid, "docs/a note%.txt", edits=[("one", "ONE"), ("three", "THREE")])
        client.edit_file(sid, "docs/a note%.txt",
                         patch="--- a\n+++ b\n@@ -1,3 +1,3 @@\n ONE\n-TWO\n+2\n THREE\n")
        assert client.read_text(sid, "docs/a note%.txt") == "ONE\n2\nTHREE\n"

        listing = client.list_files(sid, recursive=True)
        assert isinstance(listing, FileListing)
        assert {"docs/a note%.txt", "data/big.bin", "up/multi/f.bin"} <= {e.path for e in listing.entries}
        assert [m.path for m in client.glob(sid, "up/**/*.txt").matches] == ["up/multi/x.txt", "up/multi/y z.txt"]
        found = client.grep(sid, "three", ignore_case=True)
        assert [(m.path, m.line, m.text) for m in found.matches] == [("docs/a note%.txt", 3, "THREE")]

        archive = tmp_path / "up.zip"
        client.download_archive(sid, archive, "up")
        names = [n for n in zipfile.ZipFile(archive).namelist() if not n.endswith("/")]
        assert sorted(names) == ["multi/f.bin", "multi/x.txt", "multi/y z.txt"]
        tgz = io.BytesIO()
        client.download_archive(sid, tgz, format="tar.gz")
        tgz.seek(0)
        assert "docs/a note%.txt" in tarfile.open(fileobj=tgz).getnames()

        assert client.delete_file(sid, "up", recursive=True).type == "directory"
        with pytest.raises(ConflictError) as caught:
            client.read_file(sid, "docs")
        assert caught.value.code == "is_a_directory"
        assert client.file_url(sid, "docs/a note%.txt") == f"{server.url}/v1/sessions/{sid}/files/docs/a%20note%25.txt"


def test_errors_carry_the_servers_code_message_and_hint(server) -> None:
    with Client(server.url) as client:
        sid = client.create_session().id
        client.write_file(sid, "twice.txt", "a a")
        with pytest.raises(NotFoundError) as missing:
            client.read_file(sid, "nope.txt")
        assert missing.value.code == "file_not_found" and "nope.txt" in missing.value.message
        with pytest.raises(PermissionDeniedError) as escape:
            client.write_file(sid, "../outside.txt", "x")
        assert escape.value.code == "path_escape" and escape.value.hint
        with pytest.raises(ConflictError) as twice:
            client.edit_file(sid, "twice.txt", "a", "b")
        assert twice.value.code == "edit_not_unique" and twice.value.status == 409
        with pytest.raises(BadRequestError) as too_long:
            client.exec(sid, "1", limits=LimitsPatch(timeout_s=99999))
        assert too_long.value.status == 422 and too_long.value.hint
        assert str(too_long.value).startswith(f"{too_long.value.code}: ")
        assert too_long.value.request_id  # the server's X-Request-Id, for support


def test_streaming_yields_output_while_the_code_runs(server) -> None:
    code = "import time\nprint('first', flush=True)\ntime.sleep(0.6)\nprint('second')\n'done'"
    with Client(server.url) as client:
        sid = client.create_session().id
        started = time.monotonic()
        seen: list[tuple[str, float]] = []
        with client.exec_stream(sid, code) as stream:
            for chunk in stream:
                seen.append((chunk.text, time.monotonic() - started))
        assert stream.result is not None and stream.result.value == "'done'"
        assert "".join(text for text, _ in seen) == "first\nsecond\n"
        assert seen[0][0].startswith("first") and seen[-1][1] - seen[0][1] > 0.4  # not all at the end
        errors = client.exec_stream(sid, "import sys\nsys.stderr.write('oops\\n')\nraise SystemExit(3)").collect()
        assert errors.exit_code == 3 and errors.stderr == "oops\n"
        native = client.run_stream("print(40 + 2)", files={"x.txt": "x"}, output_files=["x.txt"])
        assert [c.text for c in native] == ["42\n"] and native.result.output_files["x.txt"].content == "x"


def test_api_key_is_sent_as_a_bearer_token(start_server, monkeypatch) -> None:
    seen: list[str | None] = []
    server = start_server(record_auth=seen)
    with Client(server.url, api_key="k-123") as client:
        client.health()
    monkeypatch.setenv("WASM_RUNNER_API_KEY", "from-env")
    monkeypatch.setenv("WASM_RUNNER_URL", server.url)
    with Client() as client:
        client.health()
    assert seen == ["Bearer k-123", "Bearer from-env"]


def test_an_unreachable_server_is_a_transport_error() -> None:
    with Client("http://127.0.0.1:9", timeout=2) as client:
        with pytest.raises(TransportError):
            client.health()


def test_names_with_newlines_and_bidi_controls_are_percent_encoded(server) -> None:
    names = ["line\nbreak.txt", "rtl-\u202egnp.exe", "a dir\r/x#y?.txt"]
    with Client(server.url) as client:
        sid = client.create_session().id
        for name in names:
            assert client.write_file(sid, name, name).path == name
            assert client.read_text(sid, name) == name
        assert {e.path for e in client.list_files(sid, recursive=True).entries if e.type == "file"} == set(names)
        for name in names:
            client.delete_file(sid, name)
        assert [e.path for e in client.list_files(sid, recursive=True).entries if e.type == "file"] == []
