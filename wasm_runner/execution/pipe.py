"""The pipes between a Runner and its worker processes: length-prefixed msgpack frames."""

from __future__ import annotations

import struct
from typing import IO

import msgspec

from wasm_runner_protocol.execution import ExecRequest, ExecResult

__all__ = ["READY", "Answer", "Order", "read_frame", "write_frame"]

_HEADER = struct.Struct("<I")
READY = b"ready"
"""The worker's first frame: it takes orders from now on."""


class Order(msgspec.Struct, array_like=True):
    """Parent to worker: run `request` as item `seq`, or (no request) cancel item `seq`."""

    seq: int
    request: ExecRequest | None = None


class Answer(msgspec.Struct, array_like=True):
    seq: int
    result: ExecResult


def write_frame(stream: IO[bytes], body: bytes) -> None:
    stream.write(_HEADER.pack(len(body)) + body)
    stream.flush()


def read_frame(stream: IO[bytes]) -> bytes | None:
    """The next frame, or None at the end of the stream (a partial frame included)."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    body = stream.read(size)
    return body if len(body) == size else None
