"""SQLite databases in WAL mode whose commits never pay for a checkpoint.

A WAL commit appends its pages to the -wal file: once `commit` returns, the transaction
survives a kill of the process (the pages are in the kernel's page cache). With
`synchronous=NORMAL` it may not survive a power loss or an OS crash (the WAL is fsynced only
at checkpoints, so the last transactions can be rolled back); `synchronous=FULL` fsyncs the
WAL at every commit and survives both, at the cost of one fsync per commit.

SQLite's automatic checkpoint runs inside the commit that crosses its threshold, which then
takes tens of milliseconds (it writes and fsyncs the database file). It is turned off here,
and a `Checkpointer` thread checkpoints instead, on its own connection: a passive checkpoint
never blocks a writer, so commits stay short. The WAL is rewound only once a checkpoint has
copied all of it; under a steady stream of commits a passive one keeps being overtaken, so
past `RESTART_FRAMES` the checkpointer holds writers off until it is through (writers wait
for it as they would for an automatic checkpoint, only that rarely).
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Literal

from wasm_runner_server.data_dir import connect_private, narrow_database

Synchronous = Literal["NORMAL", "FULL"]

CHECKPOINT_S = 0.25
"""How often the checkpointer moves committed pages into the database file (a no-op when none are
new); often enough that the WAL stays a few MiB under a steady stream of commits."""
RESTART_FRAMES = 1000
"""WAL pages (SQLite's own automatic checkpoint threshold) past which a checkpoint holds writers off."""
WAL_KEPT_BYTES = 16 * 1024 * 1024
"""A WAL that grew past this (a burst) is truncated back to it when it is next reused."""


def connect_wal(path: Path, synchronous: Synchronous = "NORMAL") -> sqlite3.Connection:
    """A private connection in WAL mode, autocommit, without automatic checkpoints."""
    db = connect_private(path)
    db.execute("PRAGMA journal_mode=WAL")
    narrow_database(path)  # the -wal and -shm files it made
    db.execute(f"PRAGMA synchronous={synchronous}")
    db.execute("PRAGMA busy_timeout=5000")
    db.execute("PRAGMA wal_autocheckpoint=0")
    db.execute(f"PRAGMA journal_size_limit={WAL_KEPT_BYTES}")
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
        db.execute("PRAGMA busy_timeout=5000")
        try:
            while not self._stop.wait(self.interval):
                try:
                    _, frames, _ = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()[0]
                    if frames > RESTART_FRAMES:  # not rewound for a while: commits keep overtaking
                        db.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()
                except sqlite3.Error:
                    continue  # busy or locked: the next round tries again
        finally:
            db.close()

    def close(self) -> None:
        """Stop the thread; the owner's last connection to close checkpoints what is left."""
        self._stop.set()
        self._thread.join()
