"""Sessions' directories in a real S3 server (SeaweedFS on loopback) and in a shared directory (what an NFS
mount is to each node): stored whole, uploaded incrementally, one writer per generation, and restored
without trusting the names stored."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pytest

from wasm_runner.snapshots.image import KernelImage
from wasm_runner.snapshots.image import encode as encode_image
from wasm_runner_server.storage import GenerationTaken, ObjectStorage, StorageError, StorageSettings
from wasm_runner_server.storage.manifest import FORMAT, Entry, Manifest, chunk_key, encode, manifest_key

CHUNK = 64 * 1024


@pytest.fixture(params=["s3", "posix"])
def storage(request, tmp_path_factory):
    place = (request.getfixturevalue("s3").settings() if request.param == "s3" else
             {"kind": "posix", "path": str(tmp_path_factory.mktemp("shared"))})
    storage = ObjectStorage(StorageSettings.model_validate({**place, "chunk_bytes": CHUNK}))
    yield storage
    storage.close()


def _session(root: Path) -> None:
    (root / "files" / "deep" / "er").mkdir(parents=True)
    (root / "files" / "a.txt").write_text("alpha")
    (root / "files" / "empty").write_bytes(b"")
    (root / "files" / "deep" / "er" / "big.bin").write_bytes(os.urandom(3 * CHUNK + 123))
    (root / "files" / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "files" / "run.sh").chmod(0o755)
    os.symlink("a.txt", root / "files" / "link")
    os.symlink("/etc/passwd", root / "files" / "outside")  # the guest's own link: kept as a link, never read
    (root / "kernel").mkdir()
    (root / "kernel" / "python.snap").write_bytes(os.urandom(CHUNK // 2))
    (root / "tmp").mkdir()
    (root / "tmp" / "scratch").write_text("not stored")


def _tree(root: Path) -> dict[str, tuple]:
    tree = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                tree[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                tree[rel] = ("dir",)
            else:
                tree[rel] = ("file", stat.S_IMODE(st.st_mode), path.read_bytes(), st.st_mtime_ns)
    return tree


def test_a_session_directory_comes_back_whole_on_another_root(storage, tmp_path):
    source, target = tmp_path / "node-a" / "s1", tmp_path / "node-b" / "s1"
    _session(source)
    saved = storage.save("s1", source, generation=1, epoch=1, node="node-a")
    assert saved.files == 5 and saved.chunks_uploaded == 4 + 1 + 1 + 1  # big.bin's 4, a.txt, run.sh, the image
    target.mkdir(parents=True)
    (target / "stale").write_text("from an older copy")  # what was there is replaced

    other = ObjectStorage(storage.settings)  # another node: knows nothing of what was stored
    try:
        other.restore("s1", target, 1)
    finally:
        other.close()
    expected = {k: v for k, v in _tree(source).items() if not k.startswith("tmp")}
    assert _tree(target) == expected
    assert not (target / "stale").exists() and not (target / "tmp").exists()


def test_a_save_uploads_only_the_chunks_that_changed(storage, tmp_path):
    root = tmp_path / "s2"
    _session(root)
    storage.save("s2", root, generation=1, epoch=1, node="n")
    unchanged = storage.save("s2", root, generation=2, epoch=1, node="n")
    assert unchanged.bytes_uploaded == 0

    big = root / "files" / "deep" / "er" / "big.bin"
    data = bytearray(big.read_bytes())
    data[CHUNK + 5] ^= 0xFF  # one byte of the second chunk
    big.write_bytes(bytes(data))
    (root / "files" / "new.txt").write_text("new")
    changed = storage.save("s2", root, generation=3, epoch=1, node="n")
    assert (changed.chunks_uploaded, changed.bytes_uploaded) == (2, CHUNK + 3)


def test_two_writers_of_one_generation_cannot_both_win(storage, tmp_path):
    root = tmp_path / "s3"
    _session(root)
    storage.save("s3", root, generation=1, epoch=1, node="node-a")
    other = ObjectStorage(storage.settings)
    try:
        (root / "files" / "a.txt").write_text("written by a paused owner")
        with pytest.raises(GenerationTaken):
            other.save("s3", root, generation=1, epoch=2, node="node-b")
        assert other.save("s3", root, generation=2, epoch=2, node="node-b").generation == 2
    finally:
        other.close()
    restored = tmp_path / "restored"
    storage.restore("s3", restored, 1)
    assert (restored / "files" / "a.txt").read_text() == "alpha"  # the first writer's generation stands


@pytest.mark.parametrize("bad", ["../escaped", "files/../../escaped", "/etc/escaped", "files//x", "files/./x"])
def test_a_manifest_naming_a_path_outside_the_session_is_refused(storage, tmp_path, bad):
    manifest = Manifest(FORMAT, "s4", 1, 1, "n", CHUNK, (Entry(bad, "file", 0o644, 0, 0, ()),))
    storage.objects.put_new(manifest_key("s4", 1), encode(manifest))
    root = tmp_path / "sessions" / "s4"
    try:
        with pytest.raises(ValueError, match="not a plain relative path"):
            storage.restore("s4", root, 1)
    finally:
        storage.remove("s4")
    assert not root.exists() and not (tmp_path / "escaped").exists() and not Path("/etc/escaped").exists()
    assert list((tmp_path / "sessions").iterdir()) == []  # the staging directory is gone too


def test_nothing_is_written_through_a_stored_link(storage, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    data = b"through the link"
    import hashlib

    digest = hashlib.sha256(data).hexdigest()
    storage.objects.put_new(chunk_key("s5", digest), data)
    manifest = Manifest(FORMAT, "s5", 1, 1, "n", CHUNK, (
        Entry("files", "dir", 0o755), Entry("files/l", "link", target=str(outside)),
        Entry("files/l/x", "file", 0o644, len(data), 0, (digest,))))
    storage.objects.put_new(manifest_key("s5", 1), encode(manifest))
    try:
        with pytest.raises(OSError):
            storage.restore("s5", tmp_path / "sessions" / "s5", 1)
    finally:
        storage.remove("s5")
    assert list(outside.iterdir()) == []


def test_a_damaged_chunk_is_refused(storage, tmp_path):
    root = tmp_path / "s6"
    (root / "files").mkdir(parents=True)
    (root / "files" / "a").write_text("original")
    storage.save("s6", root, generation=1, epoch=1, node="n")
    import hashlib

    digest = hashlib.sha256(b"original").hexdigest()
    storage.objects.delete([chunk_key("s6", digest)])
    storage.objects.put_new(chunk_key("s6", digest), b"tampered")
    with pytest.raises(StorageError, match="does not match its digest"):
        storage.restore("s6", tmp_path / "restored", 1)


def test_removing_a_session_deletes_everything_stored_for_it(storage, tmp_path):
    root = tmp_path / "s7"
    _session(root)
    storage.save("s7", root, generation=1, epoch=1, node="n")
    assert list(storage.objects.keys("sessions/s7/"))
    storage.remove("s7")
    assert list(storage.objects.keys("sessions/s7/")) == []


def test_collecting_keeps_what_the_committed_generation_needs_and_sends_again_what_it_deleted(storage, tmp_path,
                                                                                            monkeypatch):
    from wasm_runner_server.storage import sessions

    root = tmp_path / "s8"
    _session(root)
    first = (root / "files" / "a.txt").read_bytes()
    storage.save("s8", root, generation=1, epoch=1, node="n")
    (root / "files" / "a.txt").write_text("second")
    storage.save("s8", root, generation=2, epoch=1, node="n")
    (root / "files" / "a.txt").write_text("third")
    storage.save("s8", root, generation=3, epoch=1, node="n")

    def stored() -> tuple[list[str], int]:
        keys = list(storage.objects.keys("sessions/s8/"))
        return sorted(k.rsplit("/", 1)[1] for k in keys if "/manifests/" in k), sum("/chunks/" in k for k in keys)

    chunks_before = stored()[1]
    assert storage.collect("s8", 3) == 2  # young chunks stay (another writer's may be among them)
    assert stored() == (["000000000003"], chunks_before)
    monkeypatch.setattr(sessions, "COLLECT_GRACE_S", 0.0)
    assert storage.collect("s8", 3) == 2  # the chunks of "alpha" and "second", named by no manifest left
    assert stored() == (["000000000003"], chunks_before - 2)
    restored = tmp_path / "restored"
    storage.restore("s8", restored, 3)
    assert (restored / "files" / "a.txt").read_text() == "third"
    (root / "files" / "a.txt").write_bytes(first)  # back to a content whose chunk was deleted: sent again
    storage.save("s8", root, generation=4, epoch=1, node="n")
    again = tmp_path / "again"
    storage.restore("s8", again, 4)
    assert (again / "files" / "a.txt").read_bytes() == first


def _image(path: Path, pages: dict[int, bytes], page: int = 4096) -> None:
    """A kernel image (uncompressed, as a Python kernel's is) holding `pages` (number -> contents)."""
    numbers = np.array(sorted(pages), dtype=np.int64)
    data = np.frombuffer(b"".join(pages[n] for n in sorted(pages)), np.uint8).reshape(len(pages), page)
    image = KernelImage("python", {"format": 2}, (int(numbers[-1]) + 1) * page, numbers, data, page)
    path.write_bytes(encode_image(image, compress=False))


def test_a_kernel_image_uploads_only_the_memory_regions_that_changed(storage, tmp_path):
    root = tmp_path / "s1"
    (root / "kernel").mkdir(parents=True)
    page = 4096
    pages = {n: os.urandom(page) for n in range(0, 400, 2)}  # every other page of 400: 25 regions of 64 KiB
    _image(root / "kernel" / "python.snap", pages)
    first = storage.save("s1", root, generation=1, epoch=1, node="a")
    assert first.chunks_uploaded >= 25
    # a page changed in one region, a page added in another (everything after it moves in the file)
    pages[101 * 2] = os.urandom(page)
    pages[301] = os.urandom(page)
    _image(root / "kernel" / "python.snap", pages)
    second = storage.save("s1", root, generation=2, epoch=1, node="a")
    assert second.chunks_uploaded <= 3, second  # the header and page table, and the two regions
    target = tmp_path / "elsewhere" / "s1"
    storage.restore("s1", target, 2)
    assert (target / "kernel" / "python.snap").read_bytes() == (root / "kernel" / "python.snap").read_bytes()
    # any other file is cut at fixed offsets (a file merely named like an image too)
    (root / "kernel" / "python.snap").write_bytes(b"WASM-RUNNER-KERNEL\n" + os.urandom(3 * CHUNK))
    assert storage.save("s1", root, generation=3, epoch=1, node="a").chunks_uploaded == 4
