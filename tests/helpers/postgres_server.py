"""A PostgreSQL 15 server of the test's own (Debian's `postgresql-15`), in a temporary directory, on
127.0.0.1 and a free port, with a password; run as `nobody` when the tests run as root (postgres refuses
to run as root)."""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

BIN = Path("/usr/lib/postgresql/15/bin")
USER = "wasm"
START_S = 60


@dataclass(frozen=True)
class PostgresServer:
    port: int
    password: str

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{USER}:{self.password}@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """A fresh, empty database's URL."""
        import psycopg

        name = "t_" + secrets.token_hex(6)
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    if not (BIN / "postgres").exists():
        raise RuntimeError(f"PostgreSQL 15 is missing ({BIN}): scripts/install installs Debian's postgresql-15")
    as_root = os.geteuid() == 0
    account = pwd.getpwnam("nobody") if as_root else None
    root = Path(tempfile.mkdtemp(prefix="wasm-runner-pg-"))
    data, run = root / "data", root / "run"
    password = secrets.token_urlsafe(16)
    (root / "pw").write_text(password)
    run.mkdir()
    if account is not None:
        for path in (root, root / "pw", run):
            os.chown(path, account.pw_uid, account.pw_gid)
    user = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []} if account is not None else {}
    env = {"PATH": os.environ.get("PATH", ""), "LC_ALL": "C.UTF-8", "HOME": str(root)}
    subprocess.run([str(BIN / "initdb"), "-D", str(data), "-U", USER, "--pwfile", str(root / "pw"),
                    "--auth=scram-sha-256", "-E", "UTF8", "--no-sync"], check=True, env=env, cwd=root,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **user)
    port = _free_port()
    log = open(root / "postgres.log", "wb")
    server = subprocess.Popen([str(BIN / "postgres"), "-D", str(data), "-h", "127.0.0.1", "-p", str(port),
                               "-k", str(run), "-c", "fsync=off", "-c", "max_connections=200"],
                              env=env, cwd=root, stdout=log, stderr=subprocess.STDOUT, **user)
    try:
        deadline = time.monotonic() + START_S
        while True:
            ready = subprocess.run([str(BIN / "pg_isready"), "-h", "127.0.0.1", "-p", str(port), "-q"], env=env)
            if ready.returncode == 0:
                break
            assert server.poll() is None, (root / "postgres.log").read_text()
            assert time.monotonic() < deadline, "PostgreSQL did not start"
            time.sleep(0.1)
        yield PostgresServer(port, password)
    finally:
        server.send_signal(signal.SIGINT)  # a fast shutdown: clients still connected are disconnected
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()
        shutil.rmtree(root, ignore_errors=True)
