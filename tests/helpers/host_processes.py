"""The host's process table, read the way a test checks that nothing of a sandbox is left."""

from __future__ import annotations

import os
from pathlib import Path


def host_processes_with(marker: str) -> list[int]:
    """Host pids whose command line holds `marker`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(entry))
    return found


def host_processes_running(argv: list[str]) -> list[int]:
    """Host pids running exactly `argv` (not the launchers whose own arguments name it)."""
    wanted = b"".join(arg.encode() + b"\0" for arg in argv)
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if Path(f"/proc/{entry}/cmdline").read_bytes() == wanted:
                found.append(int(entry))
        except OSError:
            continue
    return found
