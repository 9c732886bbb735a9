"""A session's package directory: written by the host only, shown read-only to the guest.

    <session>/packages/          the guest's /packages (on its sys.path): hard links into the cache's trees
    <session>/packages.json      what is installed: the lock, with each distribution's files

The directory itself is never replaced (a live instance holds it open as a preopen): a
distribution's top-level entries are staged beside it and renamed in, an older version's moved
out first. Its modification time changes with every install, which tells a live kernel to look
again.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from wasm_runner.guest import Mount
from wasm_runner.packages.trees import remove_read_only_tree
from wasm_runner_protocol.packages import PACKAGES_GUEST_PATH, LockedPackage, PackageLock

if TYPE_CHECKING:
    from wasm_runner.packages.resolution import Pin


def normalise_name(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


class SessionPackages:
    """The installed distributions of one session, and the directory the guest imports them from."""

    def __init__(self, session_root: Path) -> None:
        self.session_root = session_root
        self.directory = session_root / "packages"
        self.state_file = session_root / "packages.json"

    def ensure(self) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        return self.directory

    def mount(self) -> Mount:
        return Mount(self.directory, PACKAGES_GUEST_PATH)

    def _state(self) -> dict[str, Any]:
        try:
            state: dict[str, Any] = json.loads(self.state_file.read_text())
            return state
        except FileNotFoundError:
            return {"packages": []}

    def _save(self, state: dict[str, Any]) -> None:
        tmp = self.state_file.with_suffix(f".{uuid.uuid4().hex}.tmp")
        tmp.write_text(json.dumps(state, indent=1))
        os.replace(tmp, self.state_file)

    def installed(self) -> list[dict[str, Any]]:
        return list(self._state()["packages"])

    def lock(self, index: str | None = None) -> PackageLock:
        return PackageLock(python=tuple(LockedPackage(name=p["name"], version=p["version"], filename=p["filename"],
                                                      sha256=p["sha256"], size=p["size"], url=p["url"])
                                        for p in self.installed()), index=index)

    def has(self, pin: Pin) -> bool:
        return any(p["sha256"] == pin.sha256 for p in self.installed())

    def place(self, pin: Pin, tree: Path, files: tuple[str, ...], size: int) -> None:
        """Link the distribution's files in (replacing another version of it)."""
        self.ensure()
        state = self._state()
        name = normalise_name(pin.name)
        old = [p for p in state["packages"] if normalise_name(p["name"]) == name]
        staging = Path(tempfile.mkdtemp(dir=self.session_root, prefix=".packages-staging-"))
        trash = Path(tempfile.mkdtemp(dir=self.session_root, prefix=".packages-trash-"))
        try:
            for relative in files:
                source = tree.joinpath(*PurePosixPath(relative).parts)
                target = staging.joinpath(*PurePosixPath(relative).parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                try:
                    os.link(source, target, follow_symlinks=False)
                except OSError:  # another filesystem: a copy (still written by the host alone)
                    shutil.copy2(source, target, follow_symlinks=False)
            for previous in old:
                for relative in previous["files"]:
                    with contextlib.suppress(FileNotFoundError):
                        (self.directory.joinpath(*PurePosixPath(relative).parts)).unlink()
                _prune_empty_dirs(self.directory, previous["files"])
            _merge(staging, self.directory, trash)
            os.utime(self.directory)  # a new mtime even within the clock's granularity
        finally:
            shutil.rmtree(staging, ignore_errors=True)
            remove_read_only_tree(trash)
        state["packages"] = [p for p in state["packages"] if normalise_name(p["name"]) != name]
        state["packages"].append({**pin.as_dict(), "size": size if pin.size is None else pin.size,
                                  "files": list(files)})
        self._save(state)

    def remove_all(self) -> None:
        remove_read_only_tree(self.directory)
        with contextlib.suppress(FileNotFoundError):
            self.state_file.unlink()


def _merge(staging: Path, directory: Path, trash: Path) -> None:
    """Rename each staged entry in; into an existing directory (a namespace package) entry by entry."""
    for entry in staging.iterdir():
        target = directory / entry.name
        if target.is_dir() and not target.is_symlink() and entry.is_dir():
            _merge(entry, target, trash)
            continue
        if target.exists() or target.is_symlink():
            os.rename(target, trash / uuid.uuid4().hex)
        os.rename(entry, target)


def _prune_empty_dirs(directory: Path, files: list[str]) -> None:
    ancestors = {parent for f in files for parent in PurePosixPath(f).parents if parent != PurePosixPath(".")}
    parents = sorted(ancestors, key=lambda p: len(p.parts), reverse=True)
    for parent in parents:
        with contextlib.suppress(OSError):
            directory.joinpath(*parent.parts).rmdir()
