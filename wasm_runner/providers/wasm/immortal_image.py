"""A copy of the compiled Python snapshot whose objects are immortal in its memory image.

CPython (3.12+) never writes the reference count of an immortal object. The snapshot holds
some 44 000 objects (modules, their functions, classes and constants) that live as long as
it does; with ordinary counts, every run writes the counts of those it touches, spread over
hundreds of heap pages that a reset must then copy back. Made immortal in the compiled file's
memory image (which every instance maps copy-on-write), they cost nothing per instance, and
the pages an instance's check runs wrote went from about 630 to 510.

The guest names the objects (a `snapshot_objects` call): those reachable from its modules at
the end of the build, which it keeps alive, at fixed addresses, in a list of the snapshot.
A word of the image is changed only where it reads as an ordinary count (1 to 2**30 - 1), to
the value CPython gives immortal objects on 32-bit platforms. Where anything is missing (the
memory image not found, a guest without the call), the compiled file is used as it is.
"""

from __future__ import annotations

import fcntl
import logging
import mmap
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger("wasm_runner")

IMMORTAL_REFCNT = 5 << 28
"""_Py_IMMORTAL_INITIAL_REFCNT of a 32-bit CPython 3.14: counts at or above 2**30 are immortal."""
_IMMORTAL_MINIMUM = 1 << 30


ImageSpan = tuple[int, int, int]
"""(offset in linear memory, offset in the compiled file, length) of the memory image."""


def immortal_path(compiled_file: Path) -> Path:
    return compiled_file.with_name(compiled_file.stem + "-immortal.cwasm")


def ensure_immortal_copy(compiled_file: Path,
                         inspect: Callable[[], tuple[np.ndarray, ImageSpan] | None]) -> Path | None:
    """The immortal copy of `compiled_file`, made once (across processes) from what `inspect`
    tells: the addresses of the snapshot's objects and where the image lies. None if it cannot be made."""
    target = immortal_path(compiled_file)
    if target.exists():
        return target
    with open(target.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.exists():
            return target
        tmp = target.with_suffix(f".tmp{os.getpid()}")
        try:
            found = inspect()
            if found is None:
                log.info("the Python snapshot's objects stay mortal: its memory image was not found")
                return None
            shutil.copyfile(compiled_file, tmp)
            changed = make_immortal(tmp, *found)
            os.replace(tmp, target)
        except Exception:  # noqa: BLE001 - an optimisation: the plain file still serves
            log.warning("could not make the Python snapshot's objects immortal; its compiled file is used "
                        "as it is", exc_info=True)
            return None
        finally:
            tmp.unlink(missing_ok=True)
        log.info("made %d objects of the Python snapshot immortal", changed)
        return target


def make_immortal(compiled_file: Path, addresses: np.ndarray, span: ImageSpan) -> int:
    """Set the count of each object at `addresses` (linear-memory offsets) in the file's image to
    the immortal value, where it reads as an ordinary count; returns how many were changed."""
    import numpy as np  # prepare time only: a one-shot run does without it

    memory_offset, file_offset, length = span
    offsets = addresses.astype(np.int64) - memory_offset
    offsets = offsets[(offsets >= 0) & (offsets <= length - 4) & (offsets % 4 == 0)]
    with open(compiled_file, "r+b") as f, mmap.mmap(f.fileno(), 0) as mapped:
        words = np.ndarray((length // 4,), "<u4", buffer=mapped, offset=file_offset)
        index = offsets // 4
        counts = words[index]
        mortal = index[(counts > 0) & (counts < _IMMORTAL_MINIMUM)]
        words[mortal] = IMMORTAL_REFCNT
        del words  # the mapping cannot close while an array uses it
        mapped.flush()
    return len(mortal)
