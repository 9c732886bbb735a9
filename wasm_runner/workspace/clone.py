"""Copying a session's directory for a fork: nothing writable shared with the original.

Files are cloned copy-on-write where the file system can (a reflink: `FICLONE`, on btrfs, XFS,
bcachefs...), else copied byte for byte; the copy is counted either way. Hard links are used only
where nobody writes in place: the package directory (written by the host, by renames, and
read-only to the guest) and the kernel snapshots (replaced whole, never changed). A guest writes
its files in place through WASI, so a hard link there would share a file between parent and child.
Symbolic links are copied as links (never followed: a guest makes them point anywhere);
sockets, FIFOs and devices are left out.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CloneStats", "clone_entry", "clone_tree"]

FICLONE = 0x40049409
"""ioctl(dst, FICLONE, src): share src's blocks copy-on-write (Linux)."""


@dataclass
class CloneStats:
    files: int = 0
    bytes: int = 0
    """Bytes of the files copied or cloned (what the copy counts against a quota)."""
    reflinked: int = 0
    linked: int = 0


def clone_tree(src: Path, dst: Path, linked: frozenset[str] = frozenset(),
               skip: frozenset[str] = frozenset()) -> CloneStats:
    """Copy the directory `src` to the new directory `dst` (see the module's docstring); the
    top-level entries named in `linked` are hard-linked instead (they are never written in place),
    those in `skip` left out."""
    stats = CloneStats()
    os.mkdir(dst, stat.S_IMODE(os.lstat(src).st_mode))
    for entry in os.scandir(src):
        if entry.name not in skip:
            clone_entry(Path(entry.path), dst / entry.name, stats, hard=entry.name in linked)
    return stats


def clone_entry(src: Path, dst: Path, stats: CloneStats, hard: bool) -> None:
    """Copy one entry (a whole directory with what it holds) to the new path `dst`."""
    st = os.lstat(src)
    if stat.S_ISDIR(st.st_mode):
        os.mkdir(dst, stat.S_IMODE(st.st_mode) | stat.S_IRWXU)
        for entry in os.scandir(src):
            clone_entry(Path(entry.path), dst / entry.name, stats, hard)
        os.chmod(dst, stat.S_IMODE(st.st_mode))
    elif stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(src), dst)
    elif stat.S_ISREG(st.st_mode):
        stats.files += 1
        stats.bytes += st.st_size
        if hard:
            os.link(src, dst, follow_symlinks=False)
            stats.linked += 1
        elif _reflink(src, dst):
            stats.reflinked += 1
        else:
            shutil.copyfile(src, dst, follow_symlinks=False)
        if not hard:
            os.chmod(dst, stat.S_IMODE(st.st_mode))
            os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)


def _reflink(src: Path, dst: Path) -> bool:
    """Clone `src` into a new `dst` copy-on-write; False (and no `dst`) where the file system cannot."""
    with open(src, "rb") as source:
        fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.ioctl(fd, FICLONE, source.fileno())
        except OSError:
            os.close(fd)
            os.unlink(dst)
            return False
        os.close(fd)
        return True
