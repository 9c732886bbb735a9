"""envd's files, driven by the real `e2b` SDK: the sandbox's files are its session's workspace."""

from __future__ import annotations

import io

import httpx
import pytest
from e2b import FileType, Sandbox
from e2b.exceptions import FileNotFoundException, InvalidArgumentException, NotFoundException

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture
def sandbox(e2b_service):
    sandbox = Sandbox.create()
    yield sandbox
    sandbox.kill()


def test_write_read_and_the_home_alias(sandbox):
    info = sandbox.files.write("/home/user/notes/a.txt", "hello")
    assert info.path == "/workspace/notes/a.txt" and info.type == FileType.FILE
    assert sandbox.files.read("/workspace/notes/a.txt") == "hello"
    assert sandbox.files.read("notes/a.txt") == "hello"
    sandbox.files.write("blob.bin", b"\x00\xff" * 100_000)
    assert bytes(sandbox.files.read("blob.bin", format="bytes")) == b"\x00\xff" * 100_000
    sandbox.files.write("streamed.txt", io.BytesIO(b"from a file object"))  # the octet-stream upload
    assert sandbox.files.read("streamed.txt") == "from a file object"
    written = sandbox.files.write_files([{"path": "m/1.txt", "data": "one"}, {"path": "m/2.txt", "data": "two"}])
    assert [w.path for w in written] == ["/workspace/m/1.txt", "/workspace/m/2.txt"]
    assert b"".join(sandbox.files.read("m/2.txt", format="stream")) == b"two"
    with pytest.raises(FileNotFoundException):
        sandbox.files.read("missing.txt")


def test_list_exists_get_info_make_dir_rename_remove(sandbox):
    sandbox.files.write("d/x.txt", "x")
    sandbox.files.write("d/sub/y.txt", "yy")
    names = {(e.name, e.type) for e in sandbox.files.list("d")}
    assert names == {("x.txt", FileType.FILE), ("sub", FileType.DIR)}
    deep = {e.path for e in sandbox.files.list("/workspace/d", depth=2)}
    assert deep == {"/workspace/d/x.txt", "/workspace/d/sub", "/workspace/d/sub/y.txt"}

    entry = sandbox.files.get_info("d/sub/y.txt")
    assert entry.size == 2 and entry.type == FileType.FILE and entry.path == "/workspace/d/sub/y.txt"
    assert sandbox.files.exists("d/x.txt") and not sandbox.files.exists("d/nope.txt")

    assert sandbox.files.make_dir("e/f/g") is True
    assert sandbox.files.make_dir("e/f/g") is False  # already there
    assert sandbox.files.get_info("e/f/g").type == FileType.DIR

    moved = sandbox.files.rename("d/x.txt", "e/x-moved.txt")
    assert moved.path == "/workspace/e/x-moved.txt"
    assert sandbox.files.read("e/x-moved.txt") == "x" and not sandbox.files.exists("d/x.txt")
    with pytest.raises(NotFoundException):
        sandbox.files.rename("d/missing.txt", "e/z.txt")

    sandbox.files.remove("d")
    assert not sandbox.files.exists("d/sub/y.txt")
    with pytest.raises(FileNotFoundException):
        sandbox.files.list("d")


def test_paths_outside_the_workspace_are_refused_before_any_call(sandbox):
    for path in ("/etc/passwd", "../../etc/passwd", "/home/user/../../etc/passwd"):
        with pytest.raises((InvalidArgumentException, FileNotFoundException), match="outside|'..'"):
            sandbox.files.read(path)
        with pytest.raises(InvalidArgumentException, match="outside|'..'"):
            sandbox.files.list(path)
    with pytest.raises(InvalidArgumentException, match="outside|'..'"):
        sandbox.files.rename("a.txt", "/tmp/a.txt")


def test_envd_calls_with_another_workspaces_key_or_none_reach_nothing(e2b_service, sandbox):
    """An attacker who learnt a sandbox id calls envd directly, with their own key or none: another
    workspace's key is told what a sandbox that does not exist answers (E2B's proxy: 502 / unavailable,
    "was not found"), no key is told 401."""
    sandbox.files.write("secret.txt", "mine")
    url = e2b_service.sandbox_url
    for token, status, rpc_status in ((e2b_service.keys["beta"], 502, 503), (None, 401, 401)):
        headers = {"E2b-Sandbox-Id": sandbox.sandbox_id, **({"X-Access-Token": token} if token else {})}
        read = httpx.get(f"{url}/files", params={"path": "secret.txt"}, headers=headers)
        assert read.status_code == status and "mine" not in read.text
        write = httpx.post(f"{url}/files", params={"path": "secret.txt"}, content=b"theirs",
                           headers={**headers, "Content-Type": "application/octet-stream"})
        assert write.status_code == status
        listing = httpx.post(f"{url}/filesystem.Filesystem/ListDir", json={"path": "/workspace"}, headers=headers)
        assert listing.status_code == rpc_status and "secret" not in listing.text
        if token:
            nowhere = {**headers, "E2b-Sandbox-Id": "0" * 32}  # a sandbox that does not exist answers the same
            assert httpx.get(f"{url}/files", params={"path": "secret.txt"}, headers=nowhere).status_code == status
            assert "was not found" in read.text
    assert sandbox.files.read("secret.txt") == "mine"
