"""The Python snapshot's memory: its objects are immortal in the compiled image (see
immortal_image), and its heap has no holes for a run's objects to scatter into (app.py)."""

import logging

import numpy as np
import pytest

from wasm_runner import Runner
from wasm_runner.providers.wasm import immortal_image
from wasm_runner.providers.wasm.immortal_image import IMMORTAL_REFCNT, ensure_immortal_copy, make_immortal
from wasm_runner.providers.wasm.python import PythonRuntime


def test_instances_map_the_immortal_image():
    _, _, mapped_from = PythonRuntime().prepare()
    assert mapped_from.name.endswith("-immortal.cwasm")


def test_the_snapshots_objects_are_immortal_and_a_runs_own_are_not(tmp_path):
    code = ("import sys, json, collections\n"
            "print(sys._is_immortal(json), sys._is_immortal(json.dumps), sys._is_immortal(collections.Counter),"
            " sys._is_immortal(object()), sys._is_immortal([1, 2]))\n"
            # dropping the list that kept them in the snapshot frees none of them
            "import app\napp._SNAPSHOT_OBJECTS.clear()\nimport gc\ngc.collect()\nprint(json.dumps({'a': [1]}))")
    with Runner(tmp_path, isolation="in-process") as runner:
        for _ in range(2):  # the second run is on the instance the first one used, reset
            result = runner.run_sync(code)
            assert result.stdout == 'True True True False False\n{"a": [1]}\n', (result.stdout, result.stderr)


def test_a_runs_small_objects_are_packed_not_scattered_over_the_heap(tmp_path):
    code = "objects = [object() for _ in range(3000)]\nprint(len({id(o) >> 12 for o in objects}))"
    with Runner(tmp_path, isolation="in-process") as runner:
        pages = int(runner.run_sync(code).stdout)
    # 3000 16-byte objects fill 12 pages; builds took 19 to 60 (some land in what the warm-up
    # call freed), the holes of an unfilled heap 1180
    assert pages <= 200


def test_only_ordinary_counts_inside_the_image_become_immortal(tmp_path):
    # a file whose image (64 bytes at file offset 16) starts at linear-memory offset 4096
    words = np.array([3, 0, 1 << 30, 7, 9, 11, 13, (1 << 30) - 1, 1, 2, 3, 4, 5, 6, 7, 8], "<u4")
    data = b"h" * 16 + words.tobytes() + b"t" * 16
    path = tmp_path / "compiled.cwasm"
    path.write_bytes(data)
    addresses = np.array([4096, 4100, 4104, 4108, 4114, 4124, 4096 + 64, 4092, 4124 + 4], "<u4")
    #                     rc 3  rc 0  immortal  rc 7  misaligned  rc 2**30-1  past the end  before  rc 1
    changed = make_immortal(path, addresses, (4096, 16, 64))
    after = np.frombuffer(path.read_bytes()[16:80], "<u4")
    expected = words.copy()
    expected[[0, 3, 7, 8]] = IMMORTAL_REFCNT
    assert changed == 4
    assert after.tolist() == expected.tolist()
    assert path.read_bytes()[:16] == b"h" * 16 and path.read_bytes()[80:] == b"t" * 16


def test_without_the_objects_the_compiled_file_is_used_as_it_is(tmp_path, caplog):
    source = tmp_path / "compiled.cwasm"
    source.write_bytes(b"\0" * 64)

    def fails():
        raise RuntimeError("no such call")

    with caplog.at_level(logging.INFO, logger="wasm_runner"):
        assert ensure_immortal_copy(source, lambda: None) is None
        assert ensure_immortal_copy(source, fails) is None
    assert not immortal_image.immortal_path(source).exists()
    assert "memory image was not found" in caplog.text and "no such call" in caplog.text


@pytest.mark.parametrize("calls", [1, 2])
def test_the_immortal_copy_is_made_once(tmp_path, calls):
    source = tmp_path / "compiled.cwasm"
    source.write_bytes(np.array([1, 2, 3, 4], "<u4").tobytes())
    inspected = []

    def inspect():
        inspected.append(1)
        return np.array([4], "<u4"), (0, 0, 16)

    for _ in range(calls):
        target = ensure_immortal_copy(source, inspect)
    assert len(inspected) == 1
    assert np.frombuffer(target.read_bytes(), "<u4").tolist() == [1, IMMORTAL_REFCNT, 3, 4]
    assert np.frombuffer(source.read_bytes(), "<u4").tolist() == [1, 2, 3, 4]
