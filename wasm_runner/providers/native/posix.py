"""POSIX helpers of the native tier, in one place: wait statuses, reaping, non-blocking reads,
quiet signals, and the process tree read from /proc."""

from __future__ import annotations

import os
from typing import Any

READ_CHUNK = 65536


def wait_exit_code(status: int) -> int:
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1


def reap(pid: int, block: bool = False) -> tuple[int | None, Any]:
    try:
        got, status, rusage = os.wait4(pid, 0 if block else os.WNOHANG)
    except ChildProcessError:
        return 0, None
    if got == 0:
        return None, None
    return status, rusage


def read_some(fd: int) -> bytes | None:
    """Up to READ_CHUNK bytes; b"" at end of file; None when nothing is ready yet."""
    try:
        return os.read(fd, READ_CHUNK)
    except BlockingIOError:
        return None
    except OSError:
        return b""


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def signal_pid(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def host_tasks() -> int:
    """Threads on the host (the 4th field of /proc/loadavg): a cheap upper bound on the run's growth."""
    try:
        with open("/proc/loadavg", "rb") as f:
            return int(f.read().split()[3].split(b"/")[1])
    except (OSError, ValueError, IndexError):
        return 1 << 30  # unknown: always count the tree


def children_of(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children", "rb") as f:
            return [int(p) for p in f.read().split()]
    except (OSError, ValueError):
        return []


def descendants(root: int) -> set[int]:
    """Every live descendant of `root`, from /proc (the fallback when no cgroup lists them)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
    found: set[int] = set()
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def first_child(pid: int) -> int | None:
    """`pid`'s first child (bwrap's init's: the program it runs), if it has one yet."""
    children = children_of(pid)
    return children[0] if children else None


def child_tree(root: int) -> set[int]:
    """Every live descendant of `root` through the children its main thread lists (cheap; a
    child of another of its threads is not seen: `descendants` sees every one)."""
    found: set[int] = set()
    stack = [root]
    while stack:
        for child in children_of(stack.pop()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found
