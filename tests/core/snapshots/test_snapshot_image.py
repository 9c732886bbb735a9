"""The snapshot file format: what a restore accepts, and each way a file is refused."""

import numpy as np
import pytest

from wasm_runner.snapshots import ImageRefused, KernelImage, KernelImages
from wasm_runner.snapshots.image import decode, encode

KEY = {"artifact": "python-abc.cwasm", "engine": "epoch-fuel0", "wasmtime": "50.0.1"}


def image(owner="team-a", pages=(0, 3, 9)):
    data = np.arange(len(pages) * 4096, dtype=np.uint32).astype(np.uint8).reshape(len(pages), 4096)
    return KernelImage("python", dict(KEY), 16 * 4096, np.array(pages, np.int64), data, 4096,
                       {"g": 7}, {"env": {"A": "1"}}, owner)


@pytest.mark.parametrize("compress", [True, False])
def test_an_image_round_trips_page_for_page(compress):
    back = decode(encode(image(), compress), key=KEY, owner="team-a")
    assert back.pages.tolist() == [0, 3, 9] and np.array_equal(back.data, image().data)
    assert back.globals == {"g": 7} and back.host == {"env": {"A": "1"}} and back.memory_size == 16 * 4096


def test_a_flipped_byte_is_refused_as_corrupted():
    blob = bytearray(encode(image()))
    blob[-10] ^= 0xFF
    with pytest.raises(ImageRefused, match="corrupted"):
        decode(bytes(blob), key=KEY, owner="team-a")


def test_an_image_of_another_workspace_is_refused():
    with pytest.raises(ImageRefused, match="another workspace"):
        decode(encode(image(owner="team-b")), key=KEY, owner="team-a")


def test_an_image_of_another_runtime_version_is_refused_naming_what_differs():
    with pytest.raises(ImageRefused, match=r"another runtime \(wasmtime differ\)"):
        decode(encode(image()), key={**KEY, "wasmtime": "51.0.0"}, owner="team-a")


@pytest.mark.parametrize("blob", [b"", b"not a snapshot at all", b"WASM-RUNNER-KERNEL\n\xff\xff\xff\x00{"])
def test_other_files_are_refused(blob):
    with pytest.raises(ImageRefused):
        decode(blob, key=KEY)


def test_page_numbers_outside_the_memory_are_refused():
    bad = image(pages=(0, 3, 40))  # memory is 16 pages
    with pytest.raises(ImageRefused, match="outside"):
        decode(encode(bad), key=KEY, owner="team-a")


def test_the_store_keeps_one_image_per_language_and_removes_a_refused_one(tmp_path):
    images = KernelImages(tmp_path / "kernel", owner="team-a")
    images.save(image(owner="whoever"))  # saved as the store's own workspace's
    assert images.languages() == ["python"]
    assert images.load("python", KEY).owner == "team-a"
    with pytest.raises(ImageRefused):
        images.load("python", {**KEY, "engine": "epoch-fuel1"})
    assert not images.has("python")  # a refused image is not tried again
    assert not list((tmp_path / "kernel").glob(".*tmp"))


def test_pages_that_do_not_compress_are_kept_raw_and_read_back():
    random_pages = np.frombuffer(np.random.default_rng(7).bytes(4 * 4096), np.uint8).reshape(4, 4096)
    incompressible = KernelImage("python", dict(KEY), 16 * 4096, np.array([1, 2, 3, 4], np.int64), random_pages, 4096,
                                 owner="team-a")
    blob = encode(incompressible)
    assert b'"codec": "raw"' in blob[:2048]
    assert np.array_equal(decode(blob, key=KEY, owner="team-a").data, random_pages)
