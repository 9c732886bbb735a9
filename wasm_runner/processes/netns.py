"""Reaching a port inside a native sandbox's own network namespace from the host.

A sandbox has its own network namespace (loopback only): nothing outside can connect to it,
and it has no route out but the egress relay. The host reaches a server listening there by
creating the socket *in* that namespace (setns on one dedicated thread, which switches back at
once): the connection is then plain loopback TCP inside the sandbox's namespace, with no relay
process in between. Which ports listen is read from the namespace's /proc/PID/net/tcp{,6}.
Entering a namespace the sandbox's user namespace owns takes CAP_SYS_ADMIN in the host's
namespace: a root service (the usual native deployment, sandboxes dropping to their own user)
has it; a service running as another user gets `NetnsUnavailable` saying so.
"""

from __future__ import annotations

import ctypes
import os
import socket
import threading
from concurrent.futures import ThreadPoolExecutor

from wasm_runner.errors import WasmRunnerError

CLONE_NEWNET = 0x40000000
LISTEN = "0A"


class NetnsUnavailable(WasmRunnerError, RuntimeError):
    """The host cannot enter the sandbox's network namespace (the message says why)."""


def listening_ports(pid: int) -> set[int]:
    """TCP ports listened on in `pid`'s network namespace, on loopback or any address."""
    ports: set[int] = set()
    for name in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{name}") as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == LISTEN:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


class _Entering:
    """One thread that creates sockets inside other network namespaces (setns is per thread)."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wasm-runner-netns")
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._home: int | None = None
        self._lock = threading.Lock()

    def _setns(self, fd: int) -> None:
        if self._libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))

    def _make(self, pid: int, family: int, type_: int, proto: int) -> socket.socket:
        if self._home is None:
            self._home = os.open(f"/proc/{os.getpid()}/task/{threading.get_native_id()}/ns/net", os.O_RDONLY)
        try:
            target = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
        except OSError as exc:
            raise NetnsUnavailable(f"the sandbox's network namespace is gone ({exc.strerror})") from None
        try:
            try:
                self._setns(target)
            except OSError as exc:
                raise NetnsUnavailable(
                    f"the service cannot enter the sandbox's network namespace ({exc.strerror}): preview ports "
                    "need a service running as root (it drops sandboxes to their own user)") from None
            try:
                return socket.socket(family, type_, proto)
            finally:
                self._setns(self._home)  # never leave this thread elsewhere
        finally:
            os.close(target)

    def socket(self, pid: int, family: int = socket.AF_INET, type_: int = socket.SOCK_STREAM,
               proto: int = 0) -> socket.socket:
        """A new socket in `pid`'s network namespace (not yet connected)."""
        return self._pool.submit(self._make, pid, family, type_, proto).result()


_entering: _Entering | None = None
_entering_lock = threading.Lock()


def socket_in(pid: int, family: int = socket.AF_INET, type_: int = socket.SOCK_STREAM, proto: int = 0) -> socket.socket:
    """A socket created in the network namespace of host process `pid`."""
    global _entering
    with _entering_lock:
        if _entering is None:
            _entering = _Entering()
    return _entering.socket(pid, family, type_, proto)
