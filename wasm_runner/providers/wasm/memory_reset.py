"""Put a used instance's linear memory back to the state it was instantiated in.

A fresh instance of the Python snapshot costs several milliseconds, most of them
page faults: wasmtime maps the memory image copy-on-write from the compiled
`.cwasm` file, and the first call copies a few hundred pages and maps a few
thousand. Restoring the pages a run wrote (a few hundred) costs about 0.5-1 ms, and
leaves memory byte for byte as it was before the run.

An instance may keep its state after a warm-up call (driver code only) as the one to
restore: the first call into an instance does set-up work (preopens, standard
streams, caches) that then need not be redone for every run; the pages that call
changed are kept in a copy. The pages written since then are told by the kernel
(`write_tracking`). Where it cannot tell, they are read from /proc/self/pagemap: a
written page of a private file mapping has become anonymous (or swapped out), and
stays so once restored, so that set grows with the runs an instance serves. Pages of
the image are copied back from the file (`copy_pages`); written pages outside it
(zero at instantiation) are dropped. The page lists are numpy operations: a Python
loop over a few hundred page runs cost more than the copy itself. Linux only; where
the layout is not the expected one, nothing is reused.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import logging
import os
import resource
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from wasm_runner.lowlevel.libc import MADV_DONTNEED, MADV_POPULATE_WRITE, accessible, libc, linux_libc, map_read_only
from wasm_runner.lowlevel.pages import copy_pages
from wasm_runner.lowlevel.write_tracking import PAGE, WrittenPages, pagemap, start_tracking

if TYPE_CHECKING:
    import numpy as np

T = TypeVar("T")
log = logging.getLogger("wasm_runner")
WASM_PAGE = 65536
MAX_WASM_PAGES = 65536
"""A 32-bit memory's most pages (4 GiB)."""
FD_VALVE_SHARE = 4
"""No instance is reused while the process holds more than 1/4 of its file-descriptor limit
(a guest that leaves files open keeps them open in its instance until it is closed)."""

_PRESENT, _SWAPPED, _FILE = 0x80, 0x40, 0x20  # bits 63, 62 and 61 of a pagemap entry, in its last byte


@functools.cache
def _written_flags() -> np.ndarray:
    """Whether a page whose pagemap entry ends in this byte was written: a private anonymous copy, in memory or swap."""
    import numpy as np  # instance reuse only: a one-shot run does without it

    return np.array([(b & (_PRESENT | _FILE)) == _PRESENT or bool(b & _SWAPPED) for b in range(256)])


@dataclass(frozen=True)
class _Mapping:
    start: int
    end: int
    perms: str
    offset: int
    inode: int
    path: str


def _parse(line: str) -> _Mapping:
    fields = line.split(maxsplit=5)
    start, end = (int(x, 16) for x in fields[0].split("-"))
    name = fields[5].rstrip("\n") if len(fields) > 5 else ""
    return _Mapping(start, end, fields[1], int(fields[2], 16), int(fields[4]), name)


def _maps(path: str) -> list[_Mapping]:
    """The process's mappings of the file `path`."""
    with open("/proc/self/maps") as f:
        return [m for m in map(_parse, (line for line in f if path in line)) if m.path == path]


def _maps_around(path: str) -> list[_Mapping]:
    """The process's mappings of the file `path`, each with the mappings just before and after it
    (all that `_locate` looks at: parsing every line cost milliseconds once many instances live)."""
    with open("/proc/self/maps") as f:
        lines = f.readlines()
    keep: set[int] = set()
    for i, line in enumerate(lines):
        if path in line:
            keep.update(range(max(i - 2, 0), min(i + 3, len(lines))))
    return [_parse(lines[i]) for i in sorted(keep)]


class _Image:
    """The pristine bytes of a memory image: the compiled file, mapped read-only once."""

    def __init__(self, path: str, offset: int, length: int) -> None:
        self.offset = offset
        """Where the image starts in the file."""
        with open(path, "rb") as f:
            self.inode = os.fstat(f.fileno()).st_ino
            address = map_read_only(f.fileno(), length, offset)
        self.address: int = address
        self.length = length

    @functools.cached_property
    def pages(self) -> np.ndarray:
        return _pages(self.address, self.length)


class LinearMemory:
    """One instance's linear memory, located once; `reset` restores it."""

    def __init__(self, base: int, size: int, image_start: int, image: _Image, image_len: int) -> None:
        self.base, self.size = base, size
        self._image_first = (image_start - base) // PAGE
        self._image_end = self._image_first + image_len // PAGE
        self._image = image
        self._entries = bytearray(size // PAGE * 8)
        self._kept: np.ndarray | None = None
        """Pages `keep` found changed from the image, as they were then."""
        self._kept_slot: np.ndarray | None = None
        """For each page, its row in `_kept`, or -1."""
        self._tracked: WrittenPages | None = None
        """The kernel's record of the pages written since `keep`, where it keeps one."""
        self._checkpoint: _Checkpoint | None = None
        """A session kernel's last `checkpoint`."""
        self._checkpoint_tracked: WrittenPages | None = None

    # The page views are made on first use (a reset or keep), so that a one-shot run's
    # instance, never reset, does without numpy.
    @functools.cached_property
    def _pages(self) -> np.ndarray:
        return _pages(self.base, self.size)

    @functools.cached_property
    def _entry_flags(self) -> np.ndarray:
        import numpy as np

        return np.frombuffer(self._entries, np.uint8)[7::8]

    def holds(self, offset: int, length: int) -> bool:
        """Whether `length` bytes at `offset` lie within the memory's size at instantiation."""
        return 0 <= offset <= offset + length <= self.size

    def read(self, offset: int, length: int) -> bytes:
        """`length` bytes at `offset` in the linear memory."""
        if not self.holds(offset, length):
            raise ValueError(f"{length} bytes at {offset} lie outside the linear memory")
        return ctypes.string_at(self.base + offset, length)

    @property
    def image_span(self) -> tuple[int, int, int]:
        """(offset in linear memory, offset in the compiled file, length) of the memory image."""
        return self._image_first * PAGE, self._image.offset, (self._image_end - self._image_first) * PAGE

    def keep(self) -> None:
        """Make the memory as it is now the state `reset` restores (only after calls that
        ran driver code: whatever the memory holds now, every later run starts from)."""
        import numpy as np

        written = self._written_in(self.size)
        now = self._pages[written]  # a copy
        pristine = np.zeros_like(now)
        inside = (written >= self._image_first) & (written < self._image_end)
        pristine[inside] = self._image.pages[written[inside] - self._image_first]
        changed = (now != pristine).any(axis=1)
        self._kept = now[changed]
        self._kept_slot = np.full(len(self._pages), -1, np.int32)
        self._kept_slot[written[changed]] = np.arange(int(changed.sum()), dtype=np.int32)
        if self._tracked is None:
            self._tracked = start_tracking(self.base, self.size)

    def reset(self) -> bool:
        """Restore every page written since instantiation (or `keep`); False when the memory
        grew (its size is visible to the guest, so the instance must not be reused)."""
        if accessible(self.base + self.size) or _fd_pressure():
            return False
        written = self._written()
        if self._kept_slot is not None and self._kept is not None:  # set together by keep()
            slots = self._kept_slot[written]
            kept = slots >= 0
            copy_pages(self._pages, written[kept], self._kept, slots[kept])
            written = written[~kept]
        first, end = self._image_first, self._image_end
        inside = (written >= first) & (written < end)
        for lo, hi in _runs(written[~inside]):  # zero at instantiation: drop the pages
            if linux_libc().madvise(self.base + lo * PAGE, (hi - lo) * PAGE, MADV_DONTNEED) != 0:
                return False
        written = written[inside]
        copy_pages(self._pages, written, self._image.pages, written - first)
        return True

    # -- kernel snapshots: the whole state of a memory at rest, and laying it over another ----

    def current_size(self) -> int:
        """Bytes the memory has now: it grows from its end, in WebAssembly pages, into its
        reservation, which the host can probe without touching it."""
        lo, hi = self.size // WASM_PAGE, MAX_WASM_PAGES + 1  # pages lo are accessible, hi are not
        if not accessible(self.base + self.size):
            return self.size
        lo += 1
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if accessible(self.base + (mid - 1) * WASM_PAGE):
                lo = mid
            else:
                hi = mid
        return lo * WASM_PAGE

    def capture(self) -> tuple[int, np.ndarray, np.ndarray]:
        """(size, page numbers, contents) of the pages that differ from a new instance's: its
        memory image's for pages inside it, zero for the others (the rest of the memory, and
        whatever it grew by)."""
        import numpy as np

        size = self.current_size()
        written = self._written_in(size)
        now = _pages(self.base, size)[written]  # a copy
        inside = (written >= self._image_first) & (written < self._image_end)
        words = now.view(np.uint64)  # compared a word at a time: 8 times fewer elements than bytes
        changed = words.any(axis=1)
        image = self._image.pages[written[inside] - self._image_first].view(np.uint64)
        changed[inside] = (words[inside] != image).any(axis=1)
        keep = np.flatnonzero(changed)
        return size, written[keep], now[keep]

    def checkpoint(self) -> tuple[int, np.ndarray, np.ndarray]:
        """`capture`, kept up to date between calls at the cost of the pages each call writes:
        after the first, the kernel lists the pages written since the last checkpoint (write
        tracking) and only those are copied. The page numbers are in no order (a page first
        written by a call is appended). The arrays returned are the checkpoint's own: valid until
        the next checkpoint (copy what must outlive it)."""
        size = self.current_size()
        held = self._checkpoint
        if held is None or held.size != size or self._checkpoint_tracked is None:
            # First, or the memory grew past what is tracked: everything, and track it all from now.
            self._checkpoint = held = _Checkpoint(*self.capture(), shared=False)
            self._checkpoint_tracked = start_tracking(self.base, size)
            return held.view()
        written = self._checkpoint_tracked.take()
        if len(written):
            held.update(written, _pages(self.base, size))
        return held.view()

    def adopt_checkpoint(self, size: int, pages: np.ndarray, data: np.ndarray) -> None:
        """Take a restored image as the checkpoint (its rows are shared: copied on first change)."""
        self._checkpoint = _Checkpoint(size, pages, data, shared=True)
        self._checkpoint_tracked = start_tracking(self.base, size)

    def restore(self, pages: np.ndarray, data: np.ndarray) -> None:
        """Make the memory hold `data` at `pages` and a new instance's contents elsewhere (the
        memory must have grown to the captured size already; pages past it are zeroed)."""
        import numpy as np

        size = self.current_size()
        if len(pages) and (int(pages.max()) + 1) * PAGE > size:
            raise ValueError("the memory is smaller than the snapshot's")
        written = self._written_in(size)
        stale = np.setdiff1d(written, pages, assume_unique=True)
        first, end = self._image_first, self._image_end
        inside = (stale >= first) & (stale < end)
        for lo, hi in _runs(stale[~inside]):
            if linux_libc().madvise(self.base + lo * PAGE, (hi - lo) * PAGE, MADV_DONTNEED) != 0:
                raise OSError(ctypes.get_errno(), "could not drop the pages of a memory")
        view = _pages(self.base, size)
        copy_pages(view, stale[inside], self._image.pages, stale[inside] - first)
        copy_pages(view, pages, data, np.arange(len(pages)))

    def populate(self, pages: np.ndarray) -> bool:
        """Write these pages ahead (their copy-on-write copies made, contents unchanged), where the
        system can (Linux 5.14's MADV_POPULATE_WRITE): a restore that lays them then faults no more."""
        import numpy as np

        pages = np.sort(pages[pages < self.size // PAGE])
        for lo, hi in _runs(pages):
            if linux_libc().madvise(self.base + lo * PAGE, (hi - lo) * PAGE, MADV_POPULATE_WRITE) != 0:
                return False
        return True

    def _written_in(self, size: int) -> np.ndarray:
        """Numbers of the pages of the first `size` bytes written since instantiation (the buffer
        made at location is reused for the memory's first size: a reset reads it every run)."""
        entries = self._entries if size == self.size else bytearray(size // PAGE * 8)
        if os.preadv(pagemap(), [entries], self.base // PAGE * 8) != len(entries):
            raise OSError(errno.EIO, "short read of /proc/self/pagemap")
        import numpy as np

        flags = self._entry_flags if entries is self._entries else np.frombuffer(entries, np.uint8)[7::8]
        return np.flatnonzero(_written_flags()[flags])

    def _written(self) -> np.ndarray:
        """Numbers of the pages written since `keep` (with write tracking) or instantiation."""
        if self._tracked is not None:
            return self._tracked.pages()
        return self._written_in(self.size)



class _Checkpoint:
    """A checkpoint's pages, in no order, with room to grow: a page a call writes for the first time
    is appended (sorting it in copied every page held, 3 ms for 2 MB, on every such call)."""

    def __init__(self, size: int, pages: np.ndarray, data: np.ndarray, shared: bool) -> None:
        import numpy as np

        self.size, self.pages, self.data, self.count = size, pages, data, len(pages)
        self.shared = shared
        """The arrays also belong to an image handed out: copied before changing."""
        self.rows = np.full(size // PAGE, -1, np.int64)
        """Each page's row, or -1."""
        self.rows[pages] = np.arange(len(pages))

    def update(self, written: np.ndarray, live: np.ndarray) -> None:
        """Copy the `written` pages from `live` (the memory's pages) into the checkpoint."""
        import numpy as np

        if self.shared:
            self.pages, self.data, self.shared = self.pages[:self.count].copy(), self.data[:self.count].copy(), False
        rows = self.rows[written]
        known = rows >= 0
        copy_pages(self.data, rows[known], live, written[known])
        fresh = written[~known]
        if not len(fresh):
            return
        end = self.count + len(fresh)
        if end > len(self.pages):  # twice the room: appending stays cheap over many calls
            room = max(end, 2 * len(self.pages))
            pages, data = np.empty(room, np.int64), np.empty((room, PAGE), np.uint8)
            pages[:self.count], data[:self.count] = self.pages[:self.count], self.data[:self.count]
            self.pages, self.data = pages, data
        added = np.arange(self.count, end)
        self.pages[self.count:end] = fresh
        copy_pages(self.data, added, live, fresh)
        self.rows[fresh] = added
        self.count = end

    def view(self) -> tuple[int, np.ndarray, np.ndarray]:
        return self.size, self.pages[:self.count], self.data[:self.count]


def _pages(address: int, length: int) -> np.ndarray:
    """The memory at `address` as an array of pages (a view: no copy)."""
    import numpy as np

    memory = (ctypes.c_char * length).from_address(address)
    return np.frombuffer(memory, np.uint8).reshape(-1, PAGE)  # type: ignore[call-overload,no-any-return]  # a ctypes array is a buffer


def _runs(pages: np.ndarray) -> list[tuple[int, int]]:
    """Sorted page numbers as (first, end) runs of consecutive pages."""
    if not len(pages):
        return []
    import numpy as np

    breaks = np.flatnonzero(np.diff(pages) != 1) + 1
    firsts = pages[np.concatenate(([0], breaks))]
    lasts = pages[np.concatenate((breaks - 1, [len(pages) - 1]))]
    return list(zip(firsts.tolist(), (lasts + 1).tolist(), strict=True))


mapping_lock = threading.Lock()
"""Held while an instance is located; stores of the same compiled file close under it, so
that no mapping vanishes (and its address is reused) while the new one is told apart."""
_images: dict[tuple[str, int, int, int], _Image] = {}


def _fd_pressure() -> bool:
    """Whether the process holds more than 1/FD_VALVE_SHARE of its descriptor limit. New
    descriptors take the lowest free numbers, so the lowest free one bounds the count."""
    read, write = os.pipe()
    os.close(read)
    os.close(write)
    return read * FD_VALVE_SHARE > resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def instantiate_located(instantiate: Callable[[], T], compiled_file: Path) -> tuple[T, LinearMemory | None]:
    """Instantiate, and find the new instance's linear memory (None if it cannot be reset).

    The memory is the one new copy-on-write mapping of `compiled_file`; instantiations
    that locate take a lock, so no other such mapping appears meanwhile.
    """
    if libc is None:
        return instantiate(), None
    path = str(compiled_file)
    with mapping_lock:
        before = {m.start for m in _maps(path)}
        result = instantiate()
        maps = _maps_around(path)
    try:
        memory = _locate(maps, path, before)
    except (OSError, ValueError):
        memory = None
    if memory is None:
        log.debug("an instance of %s was not located: it will not be reused", path)
    return result, memory


def _locate(maps: list[_Mapping], path: str, before: set[int]) -> LinearMemory | None:
    new = [i for i, m in enumerate(maps) if m.path == path and m.perms == "rw-p" and m.start not in before]
    if len(new) != 1 or not 1 <= new[0] < len(maps) - 1:
        return None
    i = new[0]
    image = maps[i]

    def anon(m: _Mapping) -> bool:
        return m.path == "" and m.inode == 0

    base, first = image.start, i
    if maps[i - 1].end == image.start and maps[i - 1].perms == "rw-p" and anon(maps[i - 1]):
        base, first = maps[i - 1].start, i - 1
    end, last = image.end, i
    if maps[i + 1].start == image.end and maps[i + 1].perms == "rw-p" and anon(maps[i + 1]):
        end, last = maps[i + 1].end, i + 1
    guarded = (first > 0 and maps[first - 1].perms == "---p" and maps[first - 1].end == base
               and last + 1 < len(maps) and maps[last + 1].perms == "---p" and maps[last + 1].start == end)
    if not guarded or base % WASM_PAGE or (end - base) % WASM_PAGE or not accessible(base):
        return None
    key = (path, image.inode, image.offset, image.end - image.start)
    with mapping_lock:
        pristine = _images.get(key)
        if pristine is None:
            pristine = _Image(path, image.offset, image.end - image.start)
            if pristine.inode != image.inode:  # the file was replaced since it was loaded
                return None
            _images[key] = pristine
    return LinearMemory(base, end - base, image.start, pristine, image.end - image.start)
