"""Whether the process holds open something removed from a guest's directories.

A guest's opens are host descriptors of this process (wasmtime opens the files for it),
held while its store lives, whatever the guest's memory says afterwards; the guest
driver's own account of what a run opened can be rewritten by the run. A run that
leaves something open and present in its scratch directories is seen by the scan of the
workspace; one that removes it after opening it is seen only here: a descriptor on a
removed file or directory whose path ("<path> (deleted)") lies below the directories.
Linux only (/proc/self/fd).

Reading a descriptor's path costs several microseconds (the kernel builds it), so it is
read only for a removed entry on the directories' filesystems, a rare thing: an `fstat`
tells those apart. The scan runs before every reset, so it is compiled
(`_held_descriptors.c`, the GIL released); built without a C compiler, the package uses
the Python loop. The directories themselves are not counted: the instances made for a
scratch workspace (one per language) hold them open too, and come and go.
"""

from __future__ import annotations

import os
from pathlib import Path

try:
    from wasm_runner.lowlevel._held_descriptors import held_removed as compiled_held_removed
except ImportError:  # built without a C compiler: the Python loop
    compiled_held_removed = None

_FD_DIR = "/proc/self/fd"


class HostDescriptors:
    """What this process holds open below `directories`."""

    def __init__(self, directories: tuple[Path, ...]) -> None:
        paths = [os.path.realpath(d) for d in directories]
        self._devices = tuple({os.stat(p).st_dev for p in paths})
        self._prefixes = tuple(p.rstrip("/") + "/" for p in paths)
        self._prefix_bytes = tuple(os.fsencode(p) for p in self._prefixes)

    def hold_removed(self) -> bool:
        """Whether a descriptor of the process is open on a removed entry below the directories."""
        if compiled_held_removed is not None:
            return bool(compiled_held_removed(self._devices, self._prefix_bytes))
        for name in os.listdir(_FD_DIR):
            try:
                st = os.fstat(int(name))
            except OSError:  # closed meanwhile (the listing's own descriptor)
                continue
            if st.st_nlink == 0 and st.st_dev in self._devices:
                try:
                    if os.readlink(f"{_FD_DIR}/{name}").startswith(self._prefixes):
                        return True
                except OSError:
                    continue
        return False
