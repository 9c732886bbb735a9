"""Capped capture of a guest's output streams, with optional live listeners."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

Stream = Literal["stdout", "stderr"]
OutputListener = Callable[[Stream, bytes], None]
"""Called with each chunk as the guest writes it (streaming); must not block."""


class Capture:
    """Keeps at most `limit` bytes of one stream; `on_overflow` fires once when the cap is passed."""

    def __init__(
        self,
        stream: Stream,
        limit: int,
        on_overflow: Callable[[], None] | None = None,
        listener: OutputListener | None = None,
    ) -> None:
        self.stream = stream
        self.limit = limit
        self.truncated = False
        self._chunks: list[bytes] = []
        self._size = 0
        self.on_overflow = on_overflow
        self._listener = listener

    @property
    def room(self) -> int:
        """Bytes it keeps before it overflows."""
        return max(self.limit - self._size, 0)

    @property
    def streams(self) -> bool:
        """Whether a listener sees each chunk as it is written."""
        return self._listener is not None

    def write(self, data: bytes) -> None:
        room = self.room
        if len(data) > room:
            data = data[:room]
            if not self.truncated:
                self.truncated = True
                if self.on_overflow is not None:
                    self.on_overflow()
        if data:
            self._chunks.append(data)
            self._size += len(data)
            if self._listener is not None:
                self._listener(self.stream, data)

    def text(self) -> str:
        return b"".join(self._chunks).decode("utf-8", errors="replace")
