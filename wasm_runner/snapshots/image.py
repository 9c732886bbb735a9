"""A kernel's state at rest, as data: the format of a snapshot and the rules of its validity.

A WebAssembly kernel between two calls is its linear memory, a few mutable globals and the host
resources the instance was made with. The image keeps the memory pages that differ from a new
instance's (zero pages and pages of the module's own image are left out), the globals that matter
(see each runtime's `capture`), and the host-side state a runtime keeps about the guest (the
environment it applied, whether it was seeded). It restores only into an instance of the same
compiled runtime, under the same engine settings and the same preopens: `key` names all of them,
and an image whose key differs from the restoring runtime's is refused, never run.

On disk an image is one file: a magic line, a JSON header (key, owner, sizes, the payload's
digest), then the payload (page numbers and page contents), LZ4-compressed (a frame) when asked
and where that at least halves it (a JavaScript kernel's 1.6 MB become 0.34 MB; zlib took ten
times as long); else raw, read in place (mapped): a Python kernel's 2.3 MB shrank by a quarter
only, for 2 ms more on every restore. The digest is XXH3-128: it finds damage at 17 GB/s where
sha256 took ten times as long, and the memory's contents are the guest's own, so there is no
forgery to guard against. A file whose digest, header or sizes do not check out is refused with
the reason.
"""

from __future__ import annotations

import json
import mmap
import struct
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import xxhash

from wasm_runner.errors import WasmRunnerError

if TYPE_CHECKING:
    import numpy as np

__all__ = ["FORMAT", "ImageRefused", "KernelImage", "SnapshotRefused", "decode", "encode", "encode_parts",
           "piece_bounds"]

FORMAT = 2
MAGIC = b"WASM-RUNNER-KERNEL\n"
_LEN = struct.Struct("<I")
MAX_HEADER = 1 << 20
WORTH_COMPRESSING = 0.5
"""An image is kept compressed only where LZ4 at least halves it."""


class SnapshotRefused(WasmRunnerError):
    """A kernel cannot be captured as it is (the reason says what holds it and what to do)."""


class ImageRefused(WasmRunnerError):
    """An image cannot be restored here: corrupted, foreign, or made for another runtime."""


@dataclass
class KernelImage:
    """One kernel's state at rest (see the module's docstring)."""

    language: str
    key: dict[str, Any]
    """What the image is valid for: the runtime artifact's sha256, wasmtime's version, the engine
    settings, the machine, the guest's preopens. Equal to the restoring kernel's, or refused."""
    memory_size: int
    """Bytes of linear memory at capture (it grows, never shrinks)."""
    pages: np.ndarray
    """Numbers (of host pages, `page_size` bytes) of the pages kept: ascending in a file and a
    capture, in no order in a checkpoint (see `LinearMemory.checkpoint`)."""
    data: np.ndarray
    """The kept pages' contents, one row each."""
    page_size: int
    globals: dict[str, int] = field(default_factory=dict)
    host: dict[str, Any] = field(default_factory=dict)
    """The runtime's host-side record of the guest (applied environment, seeding...)."""
    owner: str = ""
    """Whose it is (the workspace): restored for that owner only."""
    taken_at: float = field(default_factory=time.time)

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes + self.pages.nbytes)

    def for_owner(self, owner: str) -> KernelImage:
        """The same state, owned by `owner` (a fork or a template started elsewhere in the workspace)."""
        return KernelImage(self.language, self.key, self.memory_size, self.pages, self.data, self.page_size,
                           dict(self.globals), dict(self.host), owner, self.taken_at)


def encode(image: KernelImage, compress: bool = True) -> bytes:
    """The image as one file's bytes."""
    return b"".join(encode_parts(image, compress))


def encode_parts(image: KernelImage, compress: bool = True) -> list[bytes | memoryview]:
    """The image's file as consecutive parts, without copying the pages when not compressing."""
    import numpy as np

    numbers, pages = image.pages, image.data
    if len(numbers) > 1 and (np.diff(numbers) <= 0).any():  # a checkpoint's, in no order: on disk in page order
        order = np.argsort(numbers)
        numbers, pages = numbers[order], pages[order]
    numbers = np.ascontiguousarray(numbers, "<i8")
    pages = np.ascontiguousarray(pages)
    parts: list[bytes | memoryview] = [numbers.data.cast("B"), pages.data.cast("B")]
    body_bytes = sum(len(part) for part in parts)
    if compress:
        import lz4.frame

        with lz4.frame.LZ4FrameCompressor() as compressor:
            packed = [compressor.begin(), *(compressor.compress(part) for part in parts), compressor.flush()]
        if sum(len(part) for part in packed) <= body_bytes * WORTH_COMPRESSING:  # else raw: read in place
            parts = packed
        else:
            compress = False
    digest = xxhash.xxh3_128()
    for part in parts:
        digest.update(part)
    header = json.dumps({
        "format": FORMAT, "language": image.language, "key": image.key, "owner": image.owner,
        "memory_size": image.memory_size, "page_size": image.page_size, "page_count": len(image.pages),
        "globals": image.globals, "host": image.host, "taken_at": image.taken_at,
        "codec": "lz4" if compress else "raw", "payload_bytes": sum(len(part) for part in parts),
        "body_bytes": body_bytes, "xxh3_128": digest.hexdigest(),
    }, sort_keys=True).encode()
    return [MAGIC + _LEN.pack(len(header)) + header, *parts]


def _header(view: memoryview) -> tuple[dict[str, Any], int]:
    """The file's header and where its payload starts (ImageRefused: not an image of this format)."""
    if bytes(view[:len(MAGIC)]) != MAGIC or len(view) < len(MAGIC) + _LEN.size:
        raise ImageRefused("not a kernel snapshot (its first bytes are not the format's)")
    (header_len,) = _LEN.unpack_from(view, len(MAGIC))
    start = len(MAGIC) + _LEN.size
    if header_len > MAX_HEADER or start + header_len > len(view):
        raise ImageRefused("the snapshot's header is truncated or oversized")
    try:
        header = json.loads(bytes(view[start:start + header_len]))
    except ValueError as exc:
        raise ImageRefused(f"the snapshot's header is not valid JSON: {exc}") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ImageRefused(f"the snapshot's format is not {FORMAT}")
    return header, start + header_len


def piece_bounds(blob: bytes | mmap.mmap, target: int) -> list[int] | None:
    """Where an uncompressed image's file can be cut so that each piece holds the pages of one `target`-byte
    region of memory (the header and page table are the first piece): offsets from 0 to its end. A page
    that changed changes its own piece only, where cuts at fixed offsets would change every piece after
    the first page added or dropped. None: not such an image (compressed, or not an image)."""
    import numpy as np

    with memoryview(blob) as view:
        try:
            header, start = _header(view)
            count, page = int(header["page_count"]), int(header["page_size"])
        except (ImageRefused, KeyError, TypeError, ValueError):
            return None
        pages_at = start + 8 * count
        if header.get("codec") != "raw" or page <= 0 or count < 0 or len(view) != pages_at + count * page:
            return None
        regions = np.frombuffer(view, "<i8", count, offset=start) * page // target  # (a copy: the view closes)
    cuts = (np.flatnonzero(np.diff(regions)) + 1) * page + pages_at
    return [0, *([pages_at] if count else []), *cuts.tolist(), len(blob)]


def decode(blob: bytes | memoryview | mmap.mmap, *, key: dict[str, Any] | None = None, owner: str | None = None) -> KernelImage:
    """The image in `blob`, checked: its digest and sizes, and (when given) that it was made for
    `key` and belongs to `owner`. ImageRefused says which check failed."""
    import numpy as np

    view = memoryview(blob)
    header, start = _header(view)
    payload = view[start:]
    if len(payload) != header.get("payload_bytes") or xxhash.xxh3_128_hexdigest(payload) != header.get("xxh3_128"):
        raise ImageRefused("the snapshot is corrupted (its payload does not match its digest)")
    if owner is not None and header.get("owner") != owner:
        raise ImageRefused("the snapshot belongs to another workspace")
    if key is not None and header.get("key") != key:
        differs = sorted(k for k in set(key) | set(header.get("key") or {}) if key.get(k) != header["key"].get(k))
        raise ImageRefused("the snapshot was made for another runtime (" + ", ".join(differs) + " differ)")
    codec = header.get("codec")
    if codec == "lz4":
        import lz4.frame

        try:
            body: bytes | memoryview = lz4.frame.decompress(payload)
        except RuntimeError as exc:
            raise ImageRefused(f"the snapshot's payload does not decompress: {exc}") from None
    elif codec == "raw":
        body = payload  # no copy: the pages are read where they lie (a mapped file's page cache)
    else:
        raise ImageRefused(f"the snapshot's codec {codec!r} is not known here")
    count, page = int(header["page_count"]), int(header["page_size"])
    if len(body) != header.get("body_bytes") or len(body) != count * (8 + page):
        raise ImageRefused("the snapshot's page table does not match its contents")
    pages = np.frombuffer(body, "<i8", count).astype(np.int64)
    data = np.frombuffer(body, np.uint8, count * page, offset=count * 8).reshape(count, page)
    if count and (pages.min() < 0 or (pages[-1] + 1) * page > int(header["memory_size"]) or (np.diff(pages) <= 0).any()):
        raise ImageRefused("the snapshot's page numbers lie outside its memory or are out of order")
    return KernelImage(header["language"], header["key"], int(header["memory_size"]), pages, data, page,
                       {k: int(v) for k, v in header["globals"].items()}, dict(header["host"]), header["owner"],
                       float(header["taken_at"]))


def validity_key(language: str, artifact: str, engine: str, preopens: list[str]) -> dict[str, Any]:
    """What an image of `language` is valid for: the compiled runtime it was laid over (`artifact`:
    its file's name holds its sha256 and the engine settings), wasmtime's version, the engine's
    settings, the machine and its page size, and the guest's preopens, in order."""
    import os
    import platform

    from wasm_runner.lowlevel import WASMTIME_VERSION

    return {"format": FORMAT, "language": language, "artifact": artifact, "wasmtime": WASMTIME_VERSION,
            "engine": engine, "machine": platform.machine(), "page_size": os.sysconf("SC_PAGE_SIZE"),
            "preopens": preopens}
