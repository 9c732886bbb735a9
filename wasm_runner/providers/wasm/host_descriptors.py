"""What of a guest's scratch directories the process holds open, seen from the host.

A guest's opens are host descriptors of this process (wasmtime opens the files for it),
and they stay open while its store lives, whatever the guest's memory says afterwards:
the guest driver's own account of what a run opened can be rewritten by the run. So
before an instance serves another run, the host counts its descriptors on the
instance's directories and on removed files and directories below them, and compares
the count with the one before any run (the preopens). Something still present below
them is seen by the scan of the scratch workspace, which keeps such an instance from
being reused too. Linux only (/proc/self/fd).

Reading a descriptor's path costs several microseconds (the kernel builds it), so it is
read only for a removed file or directory on the directories' filesystems (a rare
thing in this process); the directories themselves are told by their inodes.
"""

from __future__ import annotations

import os
from pathlib import Path

_FD_DIR = "/proc/self/fd"


class HostDescriptors:
    """Counts this process's descriptors on `directories` and on removed entries below them."""

    def __init__(self, directories: tuple[Path, ...]) -> None:
        paths = [os.path.realpath(d) for d in directories]
        identities = [os.stat(p) for p in paths]
        self._directories = {(st.st_dev, st.st_ino) for st in identities}
        self._devices = {st.st_dev for st in identities}
        self._prefixes = tuple(p.rstrip("/") + "/" for p in paths)

    def count(self) -> int:
        held = 0
        for name in os.listdir(_FD_DIR):
            try:
                st = os.fstat(int(name))
            except OSError:  # closed meanwhile (the listing's own descriptor)
                continue
            if st.st_dev not in self._devices:
                continue
            if (st.st_dev, st.st_ino) in self._directories:
                held += 1
            elif st.st_nlink == 0:  # removed: its path says where it was ("<path> (deleted)")
                try:
                    held += os.readlink(f"{_FD_DIR}/{name}").startswith(self._prefixes)
                except OSError:
                    continue
        return held
