"""The C library's calls that Python's standard library does not offer, through ctypes (Linux only)."""

from __future__ import annotations

import array
import ctypes
import errno
import mmap
import os
import sys

MADV_DONTNEED = 4
MADV_POPULATE_WRITE = 23

libc: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None
"""None off Linux: callers then do without (no instance reuse, no write tracking)."""
if libc is not None:
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.process_vm_readv.restype = ctypes.c_ssize_t
    libc.process_vm_readv.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong,
                                      ctypes.c_ulong]
    libc.syscall.restype = ctypes.c_long
    libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]


def linux_libc() -> ctypes.CDLL:
    """The C library, where the caller cannot do without it (OSError off Linux)."""
    if libc is None:
        raise OSError(errno.ENOSYS, "this needs Linux's C library")
    return libc


def map_read_only(fd: int, length: int, offset: int) -> int:
    """The address of a private read-only mapping of `length` bytes of the file at `offset`."""
    address: int | None = linux_libc().mmap(None, length, mmap.PROT_READ, mmap.MAP_PRIVATE, fd, offset)
    if address in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "could not map the memory image")
    return address


def accessible(address: int) -> bool:
    """Whether `address` is readable, without touching it. Raises OSError when the system
    does not let a process read itself this way."""
    byte = ctypes.create_string_buffer(1)
    iov = array.array("Q", (ctypes.addressof(byte), 1, address, 1))
    local = iov.buffer_info()[0]
    if linux_libc().process_vm_readv(os.getpid(), local, 1, local + 16, 1, 0) == 1:
        return True
    if ctypes.get_errno() == errno.EFAULT:
        return False
    raise OSError(ctypes.get_errno(), "process_vm_readv on the own process failed")
