"""Keeping wasmtime's trap handlers in place while another native library installs its own.

wasmtime turns a guest's stack overflow or out-of-bounds access into a trap through handlers
for SIGSEGV, SIGBUS, SIGILL and SIGFPE, installed once per process when the first engine is
made. A library that installs handlers for the same signals afterwards (Ray's core worker
does, for its crash reports, when the process joins a cluster) takes them over: the next such
trap of a guest running in the process kills it. `keep_trap_handlers()` saves the handlers
around such a call and puts back the ones it replaced; a handler installed first is what
wasmtime's own chains to, so nothing is lost the other way round.
"""

from __future__ import annotations

import contextlib
import ctypes
import signal
from collections.abc import Iterator

from wasm_runner.lowlevel.libc import libc

__all__ = ["keep_trap_handlers"]

TRAP_SIGNALS = (signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE)
SIGACTION_BYTES = 256
"""Room for the C library's `struct sigaction` (152 bytes on x86-64 and aarch64 glibc), copied as it is."""


def _action(signum: int) -> bytes:
    buffer = ctypes.create_string_buffer(SIGACTION_BYTES)
    if libc is None or libc.sigaction(signum, None, buffer) != 0:
        raise OSError(ctypes.get_errno(), f"sigaction({signum}) failed")
    return buffer.raw


@contextlib.contextmanager
def keep_trap_handlers() -> Iterator[None]:
    """Run the body, then restore the trap signals' handlers it changed (Linux; elsewhere a no-op)."""
    if libc is None:
        yield
        return
    saved = {signum: _action(signum) for signum in TRAP_SIGNALS}
    try:
        yield
    finally:
        for signum, action in saved.items():
            if _action(signum) != action:
                libc.sigaction(signum, ctypes.create_string_buffer(action, SIGACTION_BYTES), None)
