"""The data directory and its databases are the service's alone."""

from __future__ import annotations

import stat

from wasm_runner import Runner
from wasm_runner_server.security.audit import AuditLog
from wasm_runner_server.security.tenants import TenantStore
from wasm_runner_server.sessions.store import SessionStore


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_data_directory_is_0700_and_every_database_file_0600(tmp_path):
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    data.chmod(0o755)
    (data / "audit.sqlite3").write_bytes(b"")  # an older, world-readable file is narrowed
    (data / "audit.sqlite3").chmod(0o644)
    stores = [SessionStore(data / "server.sqlite3"), AuditLog.in_data_dir(data), TenantStore.in_data_dir(data)]
    assert _mode(data) == 0o700
    databases = sorted(p for p in data.iterdir() if ".sqlite3" in p.name)
    assert {p.name for p in databases} >= {"server.sqlite3", "server.sqlite3-wal", "server.sqlite3-shm",
                                          "audit.sqlite3", "audit.sqlite3-wal", "tenants.sqlite3"}
    for path in databases:
        assert _mode(path) == 0o600, path
    for name in ("audit.journal", "audit.journal.lock"):  # the audit rows not yet committed
        assert _mode(data / name) == 0o600, name
    for store in stores:
        store.close()


def test_a_runner_makes_its_data_directory_private(tmp_path):
    data = tmp_path / "runner"
    data.mkdir(mode=0o755)
    data.chmod(0o755)
    with Runner(data, isolation="in-process", providers=[]):
        assert _mode(data) == 0o700
