"""Scratch workspaces for one-shot runs and batch lanes: made ahead, reused only as made.

An untouched scratch workspace goes back to the idle ones, with sandboxes made ahead for
it, so that the next one-shot run starts at once; one a run left anything in (or changed,
or that a native run used) is removed.
"""

from __future__ import annotations

import collections
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from wasm_runner.providers.base import Job, Provider
from wasm_runner.workspace.layout import Workspace, discard_tree

__all__ = ["READY_SCRATCH", "ScratchPool", "ScratchState", "own_scratch_dir", "scratch_state"]

READY_SCRATCH = 2
"""Idle scratch workspaces kept for one-shot runs, each with sandboxes made ahead."""

ScratchState = tuple[object, ...]
"""Per directory of a scratch workspace: mode, owner, group, inode, times and xattr names."""


class ScratchPool:
    """A Runner's scratch workspaces under `root` (its own directory; removed on close).

    `keep`, `take` and `recycle` are for the event loop's thread only; `new` and `discard`
    are safe from any thread."""

    def __init__(self, root: Path, providers: Sequence[Provider], max_idle: int, ready: int = READY_SCRATCH) -> None:
        self.root = root
        self.providers = providers
        self.max_idle = max_idle
        self.ready = ready
        """Idle workspaces kept at least, once one run is done (0: none made ahead, as a
        command line that runs once wants)."""
        self.idle: collections.deque[Workspace] = collections.deque()
        """Untouched scratch workspaces, oldest first: the oldest had the longest time to get
        its sandboxes made ahead."""
        self._made: dict[Path, ScratchState] = {}
        """What each live scratch workspace looked like when made: one is reused only as it was."""

    def new(self) -> Workspace:
        workspace = Workspace(Path(tempfile.mkdtemp(dir=self.root))).ensure()
        # Searchable like a session's directory (the data directory above it is private): a
        # native sandbox reaches the workspace and its /tmp through one bind of it.
        workspace.root.chmod(0o755)
        self._made[workspace.root] = scratch_state(workspace)
        return workspace

    def take(self, provider: Provider | None, language: str) -> Workspace:
        """An idle scratch workspace, the first whose sandbox is ready: the next in line may be
        waiting for a new instance (one retired after its runs, or one a run left unusable),
        and a run there would wait for it. A new one if none is idle."""
        if provider is not None:
            for workspace in list(self.idle):
                if provider.ready(workspace, language):
                    try:
                        self.idle.remove(workspace)
                        return workspace
                    except ValueError:  # another run took it meanwhile
                        continue
        try:
            return self.idle.popleft()
        except IndexError:
            return self.new()

    def recycle(self, job: Job, reusable: bool = True) -> None:
        """After a one-shot run: keep its workspace if the run left it untouched, else remove it
        (and one whose guest may still be running, or that the caller says is not `reusable`)."""
        workspace = job.workspace
        if job.cancelled or not reusable:
            empty = False
        elif job.left_entries is not None:  # the provider's scan after the run
            empty = job.left_entries == 0
        else:
            empty = workspace.is_empty()
        if empty:
            self.keep(workspace)
        else:
            self.discard(workspace)

    def keep(self, workspace: Workspace) -> None:
        """An empty scratch workspace goes back to the idle ones, if it is exactly as it was made
        (else another tenant's run would see the traces)."""
        made = self._made.get(workspace.root)
        if made is None or scratch_state(workspace) != made:
            self.discard(workspace)
            workspace = self.new()
        if self.ready and len(self.idle) < self.max_idle:  # ready 0: a Runner that runs once keeps nothing
            self._prewarm(workspace)
            self.idle.append(workspace)
        else:
            self.discard(workspace)
        # Two idle workspaces at least: the next run takes one whose sandbox is ready while
        # the other's is being made (the one just returned would still be in the making).
        while len(self.idle) < self.ready:
            spare = self.new()
            self._prewarm(spare)
            self.idle.append(spare)

    def discard(self, workspace: Workspace) -> None:
        self._made.pop(workspace.root, None)
        for provider in self.providers:
            provider.discard(workspace)
        workspace.remove()

    def _prewarm(self, workspace: Workspace) -> None:
        for provider in self.providers:
            provider.prewarm(workspace)

    def close(self) -> None:
        discard_tree(self.root)


def scratch_state(workspace: Workspace) -> ScratchState:
    """Everything a run could leave on a scratch workspace's directories without adding an
    entry: mode, owner, times (the change time moves with any chmod, chown or xattr, even one
    undone) and extended attributes."""
    state = []
    for path in (workspace.root, workspace.files, workspace.tmp):
        try:
            st = os.stat(path, follow_symlinks=False)
        except OSError:
            return ("missing", str(path))
        try:
            xattrs = tuple(sorted(os.listxattr(path, follow_symlinks=False)))
        except OSError:
            xattrs = ("unreadable",)
        state.append((st.st_mode, st.st_uid, st.st_gid, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, xattrs))
    return tuple(state)


def own_scratch_dir(parent: Path) -> Path:
    """A scratch directory for one Runner alone (Runners of one process may share a data
    directory), after removing those of processes that are gone (one-shot leftovers)."""
    parent.mkdir(parents=True, exist_ok=True)
    for entry in parent.iterdir():
        pid = entry.name.split("-", 1)[0]
        if not pid.isdigit() or not _alive(int(pid)):
            discard_tree(entry)
    return Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=parent))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive
        return True
    return True
