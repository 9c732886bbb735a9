"""A pidfd for a child the provider supervises: it lets a waiter wake at the child's exit."""

from __future__ import annotations

import os


def open_pidfd(pid: int) -> int | None:
    """A pidfd of `pid`; None where the kernel or Python has none (the caller polls instead)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None
