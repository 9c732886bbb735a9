"""A manifest: what one generation of a session's stored state is made of.

One manifest per generation (`sessions/<id>/manifests/<generation>`), written once with a conditional
put: its entries are the session directory's files (each a list of chunk digests), directories and
symbolic links, relative to the session's directory. The names in it are the guest's own: they are
checked before anything is made from them (`checked_path`).
"""

from __future__ import annotations

import re
from typing import Literal

import msgspec

FORMAT = 1
_COMPONENT = re.compile(r"[^/\x00]+")


class Entry(msgspec.Struct, frozen=True, omit_defaults=True):
    path: str
    kind: Literal["file", "dir", "link"]
    mode: int = 0o644
    size: int = 0
    mtime_ns: int = 0
    chunks: tuple[str, ...] = ()
    """The file's chunks' SHA-256 digests (hex), in order."""
    target: str = ""
    """A link's target, as the guest wrote it (never followed by the host)."""


class Manifest(msgspec.Struct, frozen=True):
    format: int
    session: str
    generation: int
    epoch: int
    """The lease epoch of the node that wrote it."""
    node: str
    chunk_bytes: int
    entries: tuple[Entry, ...]

    def chunk_digests(self) -> set[str]:
        return {digest for entry in self.entries for digest in entry.chunks}


def encode(manifest: Manifest) -> bytes:
    return msgspec.json.encode(manifest)


def decode(blob: bytes) -> Manifest:
    manifest = msgspec.json.decode(blob, type=Manifest)
    if manifest.format != FORMAT:
        raise ValueError(f"manifest format {manifest.format} is not {FORMAT}")
    for entry in manifest.entries:
        checked_path(entry.path)
        for digest in entry.chunks:
            if not re.fullmatch(r"[0-9a-f]{64}", digest):
                raise ValueError(f"manifest entry {entry.path!r} names a chunk that is not a SHA-256 digest")
    return manifest


def checked_path(path: str) -> str:
    """`path` if it is a plain relative path inside the session's directory (no '..', '.', empty or
    absolute parts); ValueError otherwise."""
    parts = path.split("/")
    if not path or any(p in ("", ".", "..") or not _COMPONENT.fullmatch(p) for p in parts):
        raise ValueError(f"manifest path {path!r} is not a plain relative path")
    return path


def manifest_key(session_id: str, generation: int) -> str:
    return f"sessions/{session_id}/manifests/{generation:012d}"


def chunk_key(session_id: str, digest: str) -> str:
    return f"sessions/{session_id}/chunks/{digest}"


def session_prefix(session_id: str) -> str:
    return f"sessions/{session_id}/"
