"""Instances made ahead of need, before they are given a sandbox's view.

A kernel's directories, environment and standard streams are handed to its store (`set_wasi`)
when it is bound to a view, which wasmtime allows until the guest first asks for them (its
first call). So instantiating (about 1 ms) and locating the new memory (1-2 ms: the process's
memory map read twice) are done here on a thread of their own, off the path of whatever needs
a kernel next: a new session's first call, a restore after hibernation or a restart, a rollback.
One instance is kept per engine setting and use; taking it makes the next one, a moment later
(made at once, it would compete with the taker's first call for the cores).

An instance for a restore also has the pages the last restore laid written already (their
copy-on-write copies made: about 3 ms for a small Python kernel's 1,200 pages, the most of a
restore); a restore lays its image over them, and makes them private anyway.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import wasmtime

from wasm_runner.engine import EngineSettings, Interrupt
from wasm_runner.providers.wasm.memory_reset import LinearMemory, mapping_lock
from wasm_runner.providers.wasm.sandbox import close_later

if TYPE_CHECKING:
    import numpy as np

__all__ = ["SpareInstances", "Unbound"]

log = logging.getLogger("wasm_runner")
REFILL_DELAY_S = 0.02
"""How long after a take the next spare is made."""
MAX_POPULATED = 2048
"""Pages (8 MiB) at most that a spare for restores writes ahead: a small kernel's all (about 1,200),
the interpreter's own of a large one (its data comes after)."""
Kind = tuple[EngineSettings, bool]
"""Engine settings, and whether the instance is for a restore."""


@dataclass
class Unbound:
    """A new instance whose guest has not run a call yet: its store's WASI context can still be replaced."""

    store: wasmtime.Store
    interrupt: Interrupt
    instance: Any
    located: LinearMemory | None
    populated: bool = False
    """Pages a restore usually lays are written already."""

    def close(self) -> None:
        close_later(self.store, mapping_lock)


class SpareInstances:
    """One unbound instance per engine setting and use, made again on a thread each time it is taken."""

    def __init__(self, make: Callable[[EngineSettings], Unbound]) -> None:
        self._make = make
        self._spares: dict[Kind, Unbound] = {}
        self._expected: dict[EngineSettings, np.ndarray] = {}
        """The pages the last restore laid, by engine settings."""
        self._wanted: queue.SimpleQueue[Kind | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._closed = False
        self._stopping = threading.Event()
        """Set at close: ends the wait before making a spare at once."""
        self._thread: threading.Thread | None = None

    def take(self, settings: EngineSettings, restoring: bool = False) -> Unbound | None:
        """The spare for `settings` and this use (None: none is ready; the caller instantiates its own)."""
        kind = (settings, restoring)
        with self._lock:
            if self._closed:
                return None
            spare = self._spares.pop(kind, None)
            if self._thread is None:
                self._thread = threading.Thread(target=self._fill, name="wasm-spare-instances", daemon=True)
                self._thread.start()
        self._wanted.put(kind)
        return spare

    def ready(self, settings: EngineSettings, restoring: bool = False) -> bool:
        """Whether a spare for `settings` and this use is made (the next take gets it)."""
        with self._lock:
            return (settings, restoring) in self._spares

    def expect(self, settings: EngineSettings, pages: np.ndarray) -> None:
        """A restore laid these pages: the next instances for restores have them written ahead (the
        first MAX_POPULATED: a spare holds them private while it waits)."""
        import numpy as np

        with self._lock:
            self._expected[settings] = np.sort(pages)[:MAX_POPULATED]

    def _fill(self) -> None:
        while (kind := self._wanted.get()) is not None:
            with self._lock:
                if kind in self._spares or self._closed:
                    continue
            if self._stopping.wait(REFILL_DELAY_S):
                break
            try:
                spare = self._make(kind[0])
                with self._lock:
                    expected = self._expected.get(kind[0]) if kind[1] else None
                if expected is not None and spare.located is not None:
                    spare.populated = spare.located.populate(expected)
            except Exception:  # noqa: BLE001 - the next taker instantiates its own
                log.warning("could not make a spare instance", exc_info=True)
                continue
            with self._lock:
                if self._closed or kind in self._spares or spare.located is None:
                    spare.close()  # (one whose memory was not found saves its taker little)
                else:
                    self._spares[kind] = spare

    def close(self, timeout: float = 15.0) -> None:
        """Drop the spares, after the one being made (a process that exits while a thread is
        inside wasmtime can abort)."""
        with self._lock:
            self._closed = True
            self._stopping.set()
            thread, self._thread = self._thread, None
            spares, self._spares = list(self._spares.values()), {}
        if thread is not None:
            self._wanted.put(None)
            thread.join(timeout)
        for spare in spares:
            spare.close()
