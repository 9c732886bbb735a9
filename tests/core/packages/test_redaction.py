"""What reaches a caller from a failed install names no host path: uv's stderr and OSErrors, sanitized."""

from wasm_runner.packages.redaction import HIDDEN, sanitized

UV_STDERR = """error: Failed to read from file `/srv/wasm-runner/data/presign.secret`
  Caused by: No such file or directory (os error 2) at /tmp/wasm-runner-uv-abc123/requirements.txt:3
  Caused by: file:///srv/wasm-runner/data/package-cache/default/artifacts/x.whl
  while fetching http://127.0.0.1:8080/simple/tinydep/ and https://pypi.org/simple/requests/"""


def test_paths_go_urls_stay():
    shown = sanitized(UV_STDERR, "/tmp/wasm-runner-uv-abc123")
    assert "/srv" not in shown and "/tmp" not in shown and "presign" not in shown and "file:" not in shown
    assert "http://127.0.0.1:8080/simple/tinydep/" in shown and "https://pypi.org/simple/requests/" in shown
    assert shown.count(HIDDEN) == 3


def test_labelled_roots_keep_the_part_below_them():
    shown = sanitized("File exists: '/var/lib/wr/sessions/s1/packages'", labels={"/var/lib/wr/sessions/s1": "<session>"})
    assert shown == "File exists: '<session>/packages'"
