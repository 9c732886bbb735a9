"""The data directory and its databases are the service's alone: directory 0700, files 0600.

They hold every tenant's code and output (audit), key hashes (tenants) and sessions; nothing
there is for another local user. SQLite creates a database's -wal and -shm files with the
database's own mode, so a database created 0600 keeps its companions 0600; older files are
narrowed when opened.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

DIRECTORY_MODE = 0o700
FILE_MODE = 0o600
SQLITE_COMPANIONS = ("", "-wal", "-shm", "-journal")


def private_directory(path: Path) -> Path:
    """`path` created if missing, and narrowed to 0700."""
    path.mkdir(mode=DIRECTORY_MODE, parents=True, exist_ok=True)
    os.chmod(path, DIRECTORY_MODE)
    return path


def narrow_database(path: Path) -> None:
    """The database file and its companions (where they exist) narrowed to 0600."""
    for suffix in SQLITE_COMPANIONS:
        try:
            os.chmod(f"{path}{suffix}", FILE_MODE)
        except FileNotFoundError:
            continue


def connect_private(path: Path) -> sqlite3.Connection:
    """A connection to the database at `path`, in a private directory, created 0600."""
    private_directory(path.parent)
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, FILE_MODE))
    narrow_database(path)
    return sqlite3.connect(path, isolation_level=None, check_same_thread=False)


def mount_path(value: str | None, setting: str) -> str | None:
    """`value` if it is an absolute path without '.' or '..' parts (a shared mount's, named in `setting`)."""
    if value is not None and (not value.startswith("/") or any(p in (".", "..") for p in value.split("/"))):
        raise ValueError(f"{setting} is an absolute directory path without '.' or '..' (the shared mount)")
    return value
