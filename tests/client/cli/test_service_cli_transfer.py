"""Folders up and down (wasm_runner_client.cli.transfer) against answers the test controls: an archive
that tries to write outside the target is refused whole, and a large folder goes up in batches."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import httpx
import pytest

from wasm_runner_client import Client
from wasm_runner_client.cli import transfer
from wasm_runner_client.cli.status import LOCAL_ERROR, CliError


def targz(*entries: tarfile.TarInfo | tuple[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for entry in entries:
            if isinstance(entry, tarfile.TarInfo):
                tar.addfile(entry)
            else:
                name, data = entry
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def serving_archive(archive: bytes) -> Client:
    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/sessions/s1/archive" and request.url.params["format"] == "tar.gz"
        return httpx.Response(200, content=archive, headers={"Content-Type": "application/gzip"})

    return Client("http://service.test", transport=httpx.MockTransport(answer))


def link(name: str, target: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, target
    return info


def test_a_folder_comes_down_whole_under_the_name_asked_for(tmp_path: Path) -> None:
    archive = targz(("a.txt", b"alpha"), ("sub/b.txt", b"beta"))
    with serving_archive(archive) as client:
        assert transfer.download_folder(client, "s1", "results", tmp_path / "out") == 2
    assert (tmp_path / "out" / "sub" / "b.txt").read_bytes() == b"beta"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no staging left behind


@pytest.mark.parametrize("hostile", [
    ("../../escape.txt", b"outside"),
    link("passwd", "/etc/passwd"),
    link("up", "../../.."),
], ids=["dot-dot", "link-to-absolute", "link-outside"])
def test_an_archive_reaching_outside_the_target_writes_nothing(tmp_path: Path, hostile) -> None:
    root = tmp_path / "here"
    root.mkdir()
    archive = targz(("fine.txt", b"ok"), hostile, ("up/escape.txt", b"through a link"))
    with serving_archive(archive) as client, pytest.raises(CliError) as refused:
        transfer.download_folder(client, "s1", "", root / "out")
    assert refused.value.status == LOCAL_ERROR and "could not be extracted" in refused.value.message
    assert list(root.iterdir()) == []  # neither the target nor the staging folder
    assert sorted(p.name for p in tmp_path.iterdir()) == ["here"]


def test_an_absolute_name_lands_inside_the_target(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    with serving_archive(targz((str(outside), b"contained"))) as client:
        transfer.download_folder(client, "s1", "", tmp_path / "out")
    assert not outside.exists()
    assert (tmp_path / "out" / str(outside).lstrip("/")).read_bytes() == b"contained"


def test_a_folder_goes_up_in_batches_without_following_links(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(transfer, "BATCH_FILES", 3)
    local = tmp_path / "project"
    (local / "sub").mkdir(parents=True)
    for index in range(7):
        (local / ("sub" if index % 2 else ".") / f"f{index}.txt").write_text(str(index))
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the service")
    (local / "secret-link").symlink_to(secret)
    (local / "dir-link").symlink_to(tmp_path, target_is_directory=True)
    requests: list[bytes] = []

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.params["dir"] == "dest"
        body = request.read()
        requests.append(body)
        names = [part.split(b'"')[0].decode() for part in body.split(b'filename="')[1:]]
        files = [{"path": f"dest/{n}", "size": 1, "created": True} for n in names]
        return httpx.Response(201, json={"files": files})

    with Client("http://service.test", transport=httpx.MockTransport(answer)) as client:
        written = transfer.upload_folder(client, "s1", local, "dest")
    assert len(requests) == 3  # 7 files, 3 a request
    assert sorted(w.path for w in written) == sorted(
        f"dest/{'sub/' if i % 2 else ''}f{i}.txt" for i in range(7))
    assert not any(b"not for the service" in body for body in requests)
