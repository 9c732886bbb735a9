"""Forking a session: new sessions that start where it is, files, packages and kernels included.

The parent's live WebAssembly kernels are saved first (`Session.save_kernels`: they keep running),
then each child's directory is a copy of the parent's (`clone_tree`: files cloned or copied, the
package directory and the kernel snapshots hard-linked, being written only by replacement). A
child's kernels are restored by its first call; each restored kernel reseeds its random generators
(Python's `random`, JavaScript's `Math.random`), and `uuid4`, `secrets` and `os.urandom` read the
host's randomness, so children and parent draw different numbers (the string-hash seed is fixed
in the runtime's build: `hash()` of a string is the same in all of them). Native kernels are
processes, not data: a child starts a fresh one, and the result says so.

A child is made whole or not at all: a copy that fails is removed and reported with its reason
(`Session.fork` does the work; this module holds what it answers).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["LINKED", "MAX_FORK", "ForkFailure", "ForkResult"]

MAX_FORK = 64
"""Children one fork makes at most."""
LINKED = frozenset({"packages", "kernel"})
"""Top-level entries of a session's directory that are never written in place: hard-linked."""


@dataclass(frozen=True)
class ForkFailure:
    index: int
    reason: str


@dataclass
class ForkResult:
    children: list[Any] = field(default_factory=list)
    """The new `Session`s."""
    failed: list[ForkFailure] = field(default_factory=list)
    kernels: list[str] = field(default_factory=list)
    """Languages whose kernel state the children carry (restored by their first call)."""
    fresh_kernels: dict[str, str] = field(default_factory=dict)
    """Languages whose kernel the parent had live but the children start anew, and why."""
    bytes_copied: int = 0
    """Bytes of files each child holds (what it counts against a quota)."""
