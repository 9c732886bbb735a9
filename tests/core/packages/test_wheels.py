"""Wheels are checked by name and unpacked on the host without running anything, inside their target."""

import stat
import zipfile

import pytest
from package_index import build_wheel, wheel_io

from wasm_runner.packages.wheels import WheelRefused, check_filename, unpack


def test_pure_python_wheels_pass_and_native_or_sdist_are_refused_with_a_hint():
    check_filename("tinyapp-1.0-py3-none-any.whl", "tinyapp")
    check_filename("six-1.17.0-py2.py3-none-any.whl", "six")
    with pytest.raises(WheelRefused) as native:
        check_filename("fastext-0.1-cp314-cp314-manylinux_2_17_x86_64.whl", "fastext")
    assert native.value.kind == "native_code" and native.value.package == "fastext"
    assert "fastext" in native.value.message and "python-data" in native.value.hint
    with pytest.raises(WheelRefused) as sdist:
        check_filename("pyyaml-6.0.2.tar.gz", "pyyaml")
    assert sdist.value.kind == "sdist_only" and "native sandbox" in sdist.value.hint


def test_unpack_places_purelib_drops_scripts_and_leaves_the_tree_read_only(tmp_path):
    wheel = build_wheel(tmp_path, "demo", "1.0", {"demo/__init__.py": "X = 1\n"},
                        extra_entries={"demo-1.0.data/purelib/extra.py": b"Y = 2\n",
                                       "demo-1.0.data/scripts/run-me": b"#!/bin/sh\nrm -rf /\n"})
    tree = unpack(wheel, tmp_path / "tree", max_bytes=1 << 20)
    assert "demo/__init__.py" in tree.files and "extra.py" in tree.files
    assert not any("run-me" in f for f in tree.files) and not (tmp_path / "tree" / "run-me").exists()
    assert stat.S_IMODE((tmp_path / "tree" / "demo" / "__init__.py").stat().st_mode) == 0o444
    assert stat.S_IMODE((tmp_path / "tree" / "demo").stat().st_mode) == 0o555


@pytest.mark.parametrize("name", ["../escape.py", "/etc/evil.py", "demo/../../escape.py", "C:/evil.py", "a\\..\\b.py"])
def test_entries_outside_the_tree_are_refused_before_anything_is_written(tmp_path, name):
    wheel = tmp_path / "bad-1.0-py3-none-any.whl"
    wheel.write_bytes(wheel_io({"ok/__init__.py": b"", name: b"x"}))
    with pytest.raises(WheelRefused) as refused:
        unpack(wheel, tmp_path / "tree", max_bytes=1 << 20)
    assert refused.value.kind == "unsafe_wheel"
    assert not (tmp_path / "escape.py").exists() and list((tmp_path / "tree").iterdir()) == []


def test_a_symlink_entry_is_refused(tmp_path):
    wheel = tmp_path / "link-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        info = zipfile.ZipInfo("link/passwd")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(info, "/etc/passwd")
    with pytest.raises(WheelRefused, match="link or special file"):
        unpack(wheel, tmp_path / "tree", max_bytes=1 << 20)


def test_a_tree_larger_than_allowed_is_refused(tmp_path):
    wheel = build_wheel(tmp_path, "big", "1.0", {"big/__init__.py": "x" * 5000})
    with pytest.raises(WheelRefused) as refused:
        unpack(wheel, tmp_path / "tree", max_bytes=1000)
    assert refused.value.kind == "too_large"
