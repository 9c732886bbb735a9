"""An append-only journal of records, one newline-terminated JSON object per record.

A record is on disk once `append` returns: one `os.write` on an `O_APPEND` descriptor puts it
in the kernel's page cache, which a kill of the process does not lose. There is no fsync: a
power loss or an OS crash may lose the last records, as a WAL commit with
`synchronous=NORMAL` may. A torn last line (a process killed inside the write) is skipped
when the journal is read; its record was never acknowledged.

The owner keeps the journal bounded: `rotate` moves the current file aside (new records go to
a fresh one) and `drop_rotated` deletes it once everything in it is stored elsewhere. One
process owns a journal at a time (an exclusive `flock` on the lock file beside it); another one
opening it gets None.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

import msgspec

from wasm_runner_server.data_dir import FILE_MODE, private_directory

ROTATED_SUFFIX = ".old"
LOCK_SUFFIX = ".lock"

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(dict).decode


def _open_append(path: Path) -> int:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    os.fchmod(fd, FILE_MODE)  # an older, wider file is narrowed
    return fd


class Journal:
    """The journal at `path` (its rotated predecessor beside it), owned by this process."""

    def __init__(self, path: Path, lock_fd: int) -> None:
        self.path = path
        self.rotated_path = Path(f"{path}{ROTATED_SUFFIX}")
        self._lock_fd = lock_fd
        fd = self._fd = _open_append(path)
        self.size = os.fstat(fd).st_size
        """Bytes in the current file (the rotated one not counted)."""

    @classmethod
    def open(cls, path: Path) -> Journal | None:
        """The journal, locked for this process; None while another process owns it."""
        private_directory(path.parent)
        lock_fd = _open_append(Path(f"{path}{LOCK_SUFFIX}"))
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(lock_fd)
            return None
        return cls(path, lock_fd)

    def append(self, record: dict) -> None:
        """Write one record; raises OSError (the disk full, say) if it is not all written."""
        data = _encode(record) + b"\n"
        written = os.write(self._fd, data)
        self.size += written
        if written != len(data):
            raise OSError(f"the journal {self.path} took {written} of {len(data)} bytes")

    def records(self) -> Iterator[dict]:
        """Every whole record, the rotated file's first."""
        for path in (self.rotated_path, self.path):
            with contextlib.suppress(FileNotFoundError), open(path, "rb") as file:
                for line in file:
                    if line.endswith(b"\n"):
                        with contextlib.suppress(msgspec.DecodeError):
                            yield _decode(line)

    def rotate(self) -> bool:
        """Move the current file aside and continue in a fresh one; False while the last rotated file is
        still there (its records not yet all stored)."""
        if self.rotated_path.exists():
            return False
        os.rename(self.path, self.rotated_path)
        fd = _open_append(self.path)
        os.close(self._fd)
        self._fd, self.size = fd, 0
        return True

    def drop_rotated(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.rotated_path)

    def clear(self) -> None:
        """Forget every record (all of them are stored elsewhere)."""
        self.drop_rotated()
        os.ftruncate(self._fd, 0)
        self.size = 0

    def close(self) -> None:
        os.close(self._fd)
        os.close(self._lock_fd)  # and with it the lock
