"""A bounded output log read by offset: a ring of bytes that drops (and counts) its oldest bytes.

Offsets count every byte the stream ever produced, so a reader that comes back after a
disconnect asks from the offset it reached and loses nothing the ring still holds; what it
did lose is reported as `dropped`. Writers are the process's reader thread; readers are any
thread, or an event loop through `subscribe`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Chunk:
    offset: int
    """Offset of `data`'s first byte (the asked one, or the oldest kept when that was dropped)."""
    data: bytes
    dropped: int
    """Bytes between the asked offset and `offset` no longer kept."""

    @property
    def next_offset(self) -> int:
        return self.offset + len(self.data)


class OutputRing:
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be positive")
        self.capacity = capacity
        self._buffer = bytearray()
        self._start = 0
        """Offset of the buffer's first byte."""
        self._closed = False
        self._cond = threading.Condition()
        self._subscribers: list[Callable[[], object]] = []

    @property
    def end(self) -> int:
        """Bytes written so far: the next byte's offset."""
        return self._start + len(self._buffer)

    @property
    def dropped(self) -> int:
        """Bytes no longer kept (the oldest)."""
        return self._start

    @property
    def closed(self) -> bool:
        return self._closed

    def write(self, data: bytes) -> None:
        if not data:
            return
        with self._cond:
            if len(data) >= self.capacity:
                self._start += len(self._buffer) + len(data) - self.capacity
                self._buffer = bytearray(data[-self.capacity:])
            else:
                self._buffer += data
                excess = len(self._buffer) - self.capacity
                if excess > 0:
                    del self._buffer[:excess]
                    self._start += excess
            self._cond.notify_all()
            subscribers = list(self._subscribers)
        for notify in subscribers:
            notify()

    def close(self) -> None:
        """No more bytes will come (the process ended): readers waiting are woken."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            subscribers = list(self._subscribers)
        for notify in subscribers:
            notify()

    def read(self, offset: int, limit: int = 1 << 20) -> Chunk:
        """Up to `limit` bytes from `offset` (clamped to what is kept)."""
        with self._cond:
            return self._read(offset, limit)

    def _read(self, offset: int, limit: int) -> Chunk:
        end = self.end
        start = min(max(offset, self._start), end)
        dropped = max(self._start - offset, 0)
        begin = start - self._start
        return Chunk(start, bytes(self._buffer[begin:begin + limit]), dropped)

    def wait(self, offset: int, timeout: float | None) -> bool:
        """Block until bytes past `offset` exist or the ring is closed; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self.end > offset or self._closed, timeout)

    def subscribe(self, notify: Callable[[], object]) -> Callable[[], None]:
        """Call `notify` (from the writer's thread) at each write and at close; returns the unsubscriber."""
        with self._cond:
            self._subscribers.append(notify)

        def unsubscribe() -> None:
            with self._cond:
                if notify in self._subscribers:
                    self._subscribers.remove(notify)

        return unsubscribe


def utf8_prefix(data: bytes, final: bool) -> bytes:
    """`data` without an incomplete UTF-8 sequence at its end (kept for the next read), unless `final`."""
    if final or not data:
        return data
    # Look at most 3 bytes back for the lead byte of a sequence that is not complete yet.
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0x80:
            continue  # a continuation byte: keep looking for its lead
        if byte & 0x80 == 0:
            return data  # ASCII: complete
        need = 2 if byte & 0xE0 == 0xC0 else 3 if byte & 0xF0 == 0xE0 else 4 if byte & 0xF8 == 0xF0 else 1
        return data if back >= need else data[:-back]
    return data
