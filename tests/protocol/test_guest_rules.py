"""The rules both sides check: session ids, mount guest paths, file extensions."""

from __future__ import annotations

import msgspec
import pytest

from wasm_runner_protocol.guest import check_guest_path, is_session_id, language_for_path
from wasm_runner_protocol.wire import SessionCreate


@pytest.mark.parametrize("value", ["a", "A-b_9", "---", "_", "x" * 64, "0123"])
def test_a_session_id_is_1_to_64_ascii_letters_digits_dashes_or_underscores(value):
    assert is_session_id(value)
    assert msgspec.json.decode(msgspec.json.encode({"id": value}), type=SessionCreate).id == value


@pytest.mark.parametrize("value", ["", "x" * 65, "café", "١٢٣", "ß", "a b", "a/b", "a.b", "abc\n", "a\0"])
def test_anything_else_is_not_a_session_id_on_either_side(value):
    assert not is_session_id(value)
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(msgspec.json.encode({"id": value}), type=SessionCreate)


@pytest.mark.parametrize("path, normal", [("/data", "/data"), ("/data/", "/data"), ("/workspace/shared", "/workspace/shared"),
                                          ("/tmp/cache", "/tmp/cache"), ("/opt/x/y", "/opt/x/y")])
def test_a_mount_may_sit_at_an_absolute_path_below_the_guest_roots(path, normal):
    assert check_guest_path(path) == normal


@pytest.mark.parametrize("path", ["", "/", "//", "/workspace", "/workspace/", "/tmp", "/tmp/", "data", "./data",
                                  "/data/../workspace", "/..", "/a\0b"])
def test_a_mount_never_replaces_a_guest_root_or_climbs_out(path):
    with pytest.raises(ValueError):
        check_guest_path(path)


@pytest.mark.parametrize("path, language", [
    ("a.py", "python"), ("A.PY", "python"), ("dir/x.js", "javascript"), ("x.mjs", "javascript"),
    ("x.cjs", "javascript"), ("x.sh", "bash"), ("x.Bash", "bash"), ("x.txt", None), ("Makefile", None),
])
def test_the_language_of_a_file_comes_from_its_extension_in_any_case(path, language):
    assert language_for_path(path) == language
