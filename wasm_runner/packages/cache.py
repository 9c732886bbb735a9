"""The content-addressed package cache of one workspace.

    artifacts/<sha256>.whl    a downloaded wheel, stored once, checked against its name on every reuse
    trees/<sha256>/           the wheel unpacked (read-only), hard-linked into the sessions that install it
    resolutions/<key>.json    the pins an exact request resolved to, so it needs no index next time

The cache counts its own bytes against its quota; when over, the least recently used artifacts
(and their trees) go first. A session keeps its hard links when the cache evicts the tree: the
files stay until the session drops them, and the cache never writes to a tree once made.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from wasm_runner.packages.trees import remove_read_only_tree
from wasm_runner.packages.wheels import UnpackedTree, WheelRefused, sha256_of, unpack


class PackageCache:
    """Artifacts by sha256, their unpacked trees, and exact resolutions; LRU-evicted past `quota_bytes`."""

    def __init__(self, root: Path, quota_bytes: int, max_unpacked_bytes: int = 1024**3) -> None:
        self.root = root
        self.quota_bytes = quota_bytes
        self.max_unpacked_bytes = max_unpacked_bytes
        self.artifacts = root / "artifacts"
        self.trees = root / "trees"
        self.resolutions = root / "resolutions"
        for directory in (self.artifacts, self.trees, self.resolutions):
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """One install at a time changes this cache (across processes)."""
        with open(self.root / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    # -- artifacts ---------------------------------------------------------------------------

    def artifact(self, sha256: str) -> Path | None:
        """The cached wheel with this hash, verified now (a corrupted one is dropped); marked used."""
        path = self.artifacts / f"{_checked_hash(sha256)}.whl"
        if not path.is_file():
            return None
        if sha256_of(path) != sha256:
            self.drop(sha256)
            return None
        os.utime(path)  # last use, for LRU
        return path

    def store(self, sha256: str, data_file: Path) -> Path:
        """Keep a downloaded wheel (already checked against `sha256` by the caller)."""
        path = self.artifacts / f"{_checked_hash(sha256)}.whl"
        os.replace(data_file, path)
        os.chmod(path, 0o444)
        return path

    def scratch_file(self) -> Path:
        fd, name = tempfile.mkstemp(dir=self.artifacts, suffix=".part")
        os.close(fd)
        return Path(name)

    # -- unpacked trees ----------------------------------------------------------------------

    def tree(self, sha256: str, wheel: Path) -> tuple[Path, UnpackedTree]:
        """The wheel's unpacked tree (made once), and its listing."""
        tree = self.trees / _checked_hash(sha256)
        listing = self.trees / f"{sha256}.json"
        if tree.is_dir() and listing.is_file():
            data = json.loads(listing.read_text())
            return tree, UnpackedTree(tuple(data["files"]), data["size"])
        remove_read_only_tree(tree)
        staging = Path(tempfile.mkdtemp(dir=self.trees, prefix=".unpack-"))
        try:
            unpacked = unpack(wheel, staging / "tree", self.max_unpacked_bytes)
            os.rename(staging / "tree", tree)
        except (WheelRefused, OSError, ValueError) as exc:
            if isinstance(exc, WheelRefused):
                raise
            raise WheelRefused("unsafe_wheel", f"{wheel.name} could not be unpacked: {exc}") from None
        finally:
            remove_read_only_tree(staging)
        listing.write_text(json.dumps({"files": list(unpacked.files), "size": unpacked.size}))
        return tree, unpacked

    # -- resolutions ---------------------------------------------------------------------------

    def resolution(self, key: str) -> list[dict[str, Any]] | None:
        path = self.resolutions / f"{key}.json"
        try:
            pins: list[dict[str, Any]] = json.loads(path.read_text())
            return pins
        except (OSError, ValueError):
            return None

    def remember(self, key: str, pins: list[dict[str, Any]]) -> None:
        path = self.resolutions / f"{key}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(pins))
        os.replace(tmp, path)

    # -- accounting --------------------------------------------------------------------------

    def usage(self) -> int:
        """Bytes held: artifacts plus unpacked trees."""
        total = 0
        for entry in self.artifacts.iterdir():
            with contextlib.suppress(OSError):
                total += entry.lstat().st_size
        for listing in self.trees.glob("*.json"):
            with contextlib.suppress(OSError, ValueError, KeyError):
                total += json.loads(listing.read_text())["size"]
        return total

    def drop(self, sha256: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.artifacts / f"{sha256}.whl").unlink()
        with contextlib.suppress(FileNotFoundError):
            (self.trees / f"{sha256}.json").unlink()
        remove_read_only_tree(self.trees / sha256)

    def evict(self, room_for: int = 0, keep: frozenset[str] = frozenset()) -> list[str]:
        """Drop least recently used artifacts until usage + `room_for` fits the quota; returns their hashes."""
        usage = self.usage()
        dropped: list[str] = []
        if usage + room_for <= self.quota_bytes:
            return dropped
        by_age = sorted(self.artifacts.glob("*.whl"), key=lambda p: p.stat().st_mtime_ns)
        for path in by_age:
            sha = path.stem
            if sha in keep:
                continue
            size = path.stat().st_size
            tree_size = 0
            with contextlib.suppress(OSError, ValueError, KeyError):
                tree_size = json.loads((self.trees / f"{sha}.json").read_text())["size"]
            self.drop(sha)
            dropped.append(sha)
            usage -= size + tree_size
            if usage + room_for <= self.quota_bytes:
                break
        return dropped


def _checked_hash(sha256: str) -> str:
    if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
        raise WheelRefused("hash_mismatch", f"not a sha256 digest: {sha256!r}")
    return sha256
