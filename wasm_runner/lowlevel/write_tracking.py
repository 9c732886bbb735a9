"""Which pages of a memory range were written since tracking started, told by the kernel.

Linux (6.7+) write protection through userfaultfd in its asynchronous mode: the first write
to a protected page just clears the page's flag in its page-table entry, in the same fault
a copy-on-write takes anyway, and no handler runs. PAGEMAP_SCAN then lists the unprotected
ranges, reading page-table bits only. Reading /proc/self/pagemap instead costs about 0.4 ms
per reset of a 30 MiB memory (it looks at the page behind every entry), and counts every
page written since instantiation, the warm-up's included.

Written pages are not protected again: runs write mostly the same pages, and each write to a
protected page is a fault (about 1.5 us), more than copying the page back. Where the
kernel or the system's policy does not allow it, `start_tracking` returns None and the
caller reads the page map.
"""

from __future__ import annotations

import ctypes
import logging
import os
import struct
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

from wasm_runner.lowlevel.libc import libc, linux_libc

log = logging.getLogger("wasm_runner")
PAGE = os.sysconf("SC_PAGE_SIZE")

_SYS_USERFAULTFD = {"x86_64": 323, "aarch64": 282}.get(os.uname().machine)
_UFFD_USER_MODE_ONLY = 1
_UFFD_API = 0xAA
_UFFD_FEATURE_WP_UNPOPULATED = 1 << 13  # never-touched pages are protected too
_UFFD_FEATURE_WP_ASYNC = 1 << 15
_UFFDIO_API = 0xC018AA3F
_UFFDIO_REGISTER = 0xC020AA00
_UFFDIO_REGISTER_MODE_WP = 2
_PAGEMAP_SCAN = 0xC0606610
_PM_SCAN_WP_MATCHING, _PM_SCAN_CHECK_WPASYNC = 1, 2
_PAGE_IS_WRITTEN = 1 << 1
_REGIONS = 1024
"""Ranges one scan returns; a memory with more written ranges takes more scans."""

_libc = libc
_lock = threading.Lock()
_opened = False
_uffd: int | None = None
"""The process's userfaultfd, once opened (None: not available)."""
_refused = False
_pagemap_fd: int | None = None


def pagemap() -> int:
    """The process's descriptor of /proc/self/pagemap (opened once)."""
    global _pagemap_fd
    if _pagemap_fd is None:
        _pagemap_fd = os.open("/proc/self/pagemap", os.O_RDONLY | os.O_CLOEXEC)
    return _pagemap_fd


def start_tracking(address: int, length: int) -> WrittenPages | None:
    """Protect the range (every page of it) and track its writes from now; None where the
    system cannot (the caller then reads /proc/self/pagemap)."""
    global _opened, _uffd, _refused
    with _lock:
        if not _opened:
            _opened, _uffd = True, _open()
    if _uffd is None:
        return None
    try:
        return WrittenPages(address, length, _uffd)
    except OSError as exc:
        if not _refused:
            _refused = True
            log.info("pages written by runs are read from the page map: %s", exc)
        return None


class WrittenPages:
    """One tracked range; `pages()` lists the pages written since tracking started."""

    def __init__(self, address: int, length: int, uffd: int) -> None:
        import numpy as np  # instance reuse only: a one-shot run does without it

        self.address, self.length = address, length
        self._pagemap = pagemap()
        self._regions = np.zeros((_REGIONS, 3), np.uint64)
        self._arg = (ctypes.c_uint64 * 12)()
        register = ctypes.create_string_buffer(struct.pack("QQQQ", address, length, _UFFDIO_REGISTER_MODE_WP, 0))
        if linux_libc().ioctl(uffd, _UFFDIO_REGISTER, register) != 0:
            raise OSError(ctypes.get_errno(), "userfaultfd cannot write-protect this memory")
        self._scan(protect=True)

    def pages(self) -> np.ndarray:
        """Sorted numbers (from the range's first page) of the pages written since tracking started."""
        return self._page_numbers(self._scan(protect=False))

    def take(self) -> np.ndarray:
        """The pages written since tracking started or the last `take`, protected again in the
        same pass (so the next `take` lists only what is written after this one)."""
        return self._page_numbers(self._scan(protect=True, written_only=True))

    def _page_numbers(self, ranges: np.ndarray) -> np.ndarray:
        import numpy as np

        first = ((ranges[:, 0] - self.address) // PAGE).astype(np.int64)
        counts = ((ranges[:, 1] - ranges[:, 0]) // PAGE).astype(np.int64)
        return np.repeat(first - (np.cumsum(counts) - counts), counts) + np.arange(int(counts.sum()))

    def _scan(self, protect: bool, written_only: bool = False) -> np.ndarray:
        """The written ranges as rows of (start, end, flags); `protect` write-protects every page
        (the categories then match every page), or with `written_only` the written ones."""
        import numpy as np

        arg, start, end, found = self._arg, self.address, self.address + self.length, []
        while True:
            match = _PAGE_IS_WRITTEN if written_only or not protect else 0
            arg[:] = [96, _PM_SCAN_WP_MATCHING | _PM_SCAN_CHECK_WPASYNC if protect else 0, start, end, 0,
                      self._regions.ctypes.data, _REGIONS, 0, 0, match, 0, _PAGE_IS_WRITTEN]
            count = linux_libc().ioctl(self._pagemap, _PAGEMAP_SCAN, ctypes.addressof(arg))
            if count < 0:
                raise OSError(ctypes.get_errno(), "PAGEMAP_SCAN failed")
            found.append(self._regions[:count].copy())
            if arg[4] >= end:  # walk_end: where this scan stopped
                return np.concatenate(found) if len(found) > 1 else found[0]
            start = arg[4]


def _open() -> int | None:
    if _libc is None or _SYS_USERFAULTFD is None:
        return None
    uffd = -1
    for flags in (os.O_CLOEXEC | os.O_NONBLOCK, os.O_CLOEXEC | os.O_NONBLOCK | _UFFD_USER_MODE_ONLY):
        uffd = _libc.syscall(_SYS_USERFAULTFD, flags)
        if uffd >= 0:
            break
    if uffd < 0:
        log.info("pages written by runs are read from the page map: userfaultfd: %s",
                 os.strerror(ctypes.get_errno()))
        return None
    features = _UFFD_FEATURE_WP_ASYNC | _UFFD_FEATURE_WP_UNPOPULATED
    api = ctypes.create_string_buffer(struct.pack("QQQ", _UFFD_API, features, 0))
    if _libc.ioctl(uffd, _UFFDIO_API, api) != 0:
        reason = os.strerror(ctypes.get_errno())
        os.close(uffd)
        log.info("pages written by runs are read from the page map: asynchronous write protection: %s "
                 "(Linux 6.7 or later has it)", reason)
        return None
    return uffd
