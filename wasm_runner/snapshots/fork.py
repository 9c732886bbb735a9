"""Forking a session: new sessions that start where it is, files, packages and kernels included.

The parent's live WebAssembly kernels are saved first (`Session.save_kernels`: they keep running),
then each child's directory is a copy of the parent's (`clone_tree`: files cloned or copied, the
package directory and the kernel snapshots hard-linked, being written only by replacement). A
child's kernels are restored by its first call; each restored kernel reseeds its random generators
(Python's `random`, JavaScript's `Math.random`), and `uuid4`, `secrets` and `os.urandom` read the
host's randomness, so children and parent draw different numbers (the string-hash seed is fixed
in the runtime's build: `hash()` of a string is the same in all of them). Native kernels are
processes, not data: a child starts a fresh one, and the result says so.

A child is made whole or not at all: a copy that fails is removed and reported with its reason.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from wasm_runner.errors import InvalidRequestError
from wasm_runner.workspace.clone import clone_tree
from wasm_runner.workspace.layout import discard_tree

if TYPE_CHECKING:
    from wasm_runner.session import Session

__all__ = ["MAX_FORK", "ForkFailure", "ForkResult", "fork_session"]

log = logging.getLogger("wasm_runner")
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
    children: list[Session] = field(default_factory=list)
    failed: list[ForkFailure] = field(default_factory=list)
    kernels: list[str] = field(default_factory=list)
    """Languages whose kernel state the children carry (restored by their first call)."""
    fresh_kernels: dict[str, str] = field(default_factory=dict)
    """Languages whose kernel the parent had live but the children start anew, and why."""
    bytes_copied: int = 0
    """Bytes of files each child holds (what it counts against a quota)."""


def fork_session(parent: Session, count: int, skip: frozenset[str] = frozenset()) -> ForkResult:
    if not 1 <= count <= MAX_FORK:
        raise InvalidRequestError(f"a fork makes 1 to {MAX_FORK} sessions; ask for fewer, or fork a child again")
    if parent.workspace.files_dir is not None:
        raise InvalidRequestError("a session whose /workspace is an existing host directory cannot be forked "
                                  "(its children would share that directory)")
    live = set(parent.kernels)
    result = ForkResult(fresh_kernels=parent.save_kernels(compress=False))  # read back at once: not worth compressing
    parent.workspace.ensure()
    parent.packages.ensure()
    result.kernels = parent.images.languages()
    for language in live - set(result.kernels) - set(result.fresh_kernels):
        result.fresh_kernels[language] = "its state was not saved"
    own_mounts = tuple(m for m in parent.mounts if m.host != parent.packages.directory)
    for index in range(count):
        child = parent.runner.session(uuid.uuid4().hex, mounts=own_mounts, owner=parent.owner)
        root = child.workspace.root
        try:
            root.parent.mkdir(parents=True, exist_ok=True)
            stats = clone_tree(parent.workspace.root, root, LINKED, skip)
        except Exception as exc:  # noqa: BLE001 - this child is not made; the others may be
            log.warning("a fork's child could not be made", exc_info=True)
            discard_tree(root)
            child.destroy()
            result.failed.append(ForkFailure(index, f"copying the session failed: {exc}"))
            continue
        result.bytes_copied = max(result.bytes_copied, stats.bytes)
        child.egress_limit, child.process_limits = parent.egress_limit, parent.process_limits
        if parent.egress is not None:
            child.set_egress(parent.egress)
        result.children.append(child)
    return result

