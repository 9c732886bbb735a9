"""SQLite databases in WAL mode whose commits never pay for a checkpoint.

A WAL commit appends its pages to the -wal file: once `commit` returns, the transaction
survives a kill of the process (the pages are in the kernel's page cache). With
`synchronous=NORMAL` it may not survive a power loss or an OS crash (the WAL is fsynced only
at checkpoints, so the last transactions can be rolled back); `synchronous=FULL` fsyncs the
WAL at every commit and survives both, at the cost of one fsync per commit.

SQLite's automatic checkpoint runs inside the commit that crosses its threshold, which then
takes tens of milliseconds (it writes and fsyncs the database file). It is turned off here,
and a `Checkpointer` thread checkpoints instead, on its own connection: a passive checkpoint
never blocks a writer, so commits stay short.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Literal

from wasm_runner_server.data_dir import connect_private, narrow_database

Synchronous = Literal["NORMAL", "FULL"]

CHECKPOINT_S = 1.0
"""How often the checkpointer looks for committed pages to move into the database file."""


def connect_wal(path: Path, synchronous: Synchronous = "NORMAL") -> sqlite3.Connection:
    """A private connection in WAL mode, autocommit, without automatic checkpoints."""
    db = connect_private(path)
    db.execute("PRAGMA journal_mode=WAL")
    narrow_database(path)  # the -wal and -shm files it made
    db.execute(f"PRAGMA synchronous={synchronous}")
    db.execute("PRAGMA busy_timeout=5000")
    db.execute("PRAGMA wal_autocheckpoint=0")
    return db


class Checkpointer:
    """Checkpoints a WAL database every `interval` seconds on its own thread and connection."""

    def __init__(self, path: Path, name: str, interval: float = CHECKPOINT_S) -> None:
        self.path = path
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        db = connect_private(self.path)
        try:
            while not self._stop.wait(self.interval):
                try:
                    db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                except sqlite3.Error:
                    continue  # busy or locked: the next round tries again
        finally:
            db.close()

    def close(self) -> None:
        """Stop the thread; the owner's last connection to close checkpoints what is left."""
        self._stop.set()
        self._thread.join()
