"""Where a session's kernel images are kept: one file per language in the session's directory.

The files live beside the session's own (`<session>/kernel/<language>.snap`, outside what the
guest sees), so they count against the workspace's disk quota, move and fork with the session's
directory, and go when it is deleted. A write goes to a temporary file renamed into place: a
crash leaves the previous image or the new one, never half of one. The image it replaces is
freed on a thread of its own (held open until then): freeing a file's 5 MB of cached
pages took 3 ms of every fork. Reads map the file instead of copying it: a restore lays the
pages straight from the page cache. Reads check the image (`decode`): a corrupted, foreign or
outdated file is refused with the reason and removed.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from wasm_runner.snapshots.image import ImageRefused, KernelImage, decode, encode_parts

__all__ = ["KernelImages"]

SUFFIX = ".snap"
_freeing = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kernel-image-free")
"""Closes the last descriptor of replaced images (its thread is joined at exit)."""


class KernelImages:
    """A session's saved kernel images (see the module's docstring)."""

    def __init__(self, directory: Path, owner: str = "") -> None:
        self.directory = directory
        self.owner = owner
        """The workspace the session belongs to: an image of another is refused."""

    def path(self, language: str) -> Path:
        return self.directory / f"{language}{SUFFIX}"

    def has(self, language: str) -> bool:
        return self.path(language).is_file()

    def save(self, image: KernelImage, compress: bool = True) -> int:
        """Keep `image` as the language's saved state (owned by this session's workspace); its size."""
        parts = encode_parts(image.for_owner(self.owner), compress)
        self.directory.mkdir(exist_ok=True)  # never the session's directory itself: a deleted session stays gone
        target = self.path(image.language)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            for part in parts:
                f.write(part)
        try:  # held open, the replaced file is freed when this is closed, on the freeing thread
            replaced: int | None = os.open(target, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            replaced = None
        os.replace(tmp, target)
        if replaced is not None:
            _freeing.submit(os.close, replaced)
        return sum(len(part) for part in parts)

    def load(self, language: str, key: dict[str, Any]) -> KernelImage:
        """The language's saved image, checked against `key` and this workspace (FileNotFoundError:
        none; ImageRefused: one that cannot be restored, which is then removed)."""
        with open(self.path(language), "rb") as f:
            size = os.fstat(f.fileno()).st_size
            blob = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) if size else b""
        try:
            return decode(blob, key=key, owner=self.owner)
        except (ImageRefused, ValueError, KeyError, TypeError) as exc:
            self.discard(language)
            if isinstance(exc, ImageRefused):
                raise
            raise ImageRefused(f"the snapshot is malformed ({type(exc).__name__}: {exc})") from None

    def discard(self, language: str | None = None) -> None:
        """Drop the saved image of `language` (None: of every language)."""
        paths = [self.path(language)] if language is not None else list(self.directory.glob(f"*{SUFFIX}"))
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def languages(self) -> list[str]:
        if not self.directory.is_dir():
            return []
        return sorted(p.name[: -len(SUFFIX)] for p in self.directory.glob(f"*{SUFFIX}"))

