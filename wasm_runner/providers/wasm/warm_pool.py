"""Instances made ahead of need for one-shot runs.

A one-shot run gets a scratch workspace from the Runner; the instance for it can
be instantiated in the background while a core is free, so the run itself only
pays for its call. While every core runs an execution nothing is made ahead (it
would only compete with the runs). A new instance also makes a warm-up call (the first
call into an instance costs several times a later one): always when its resets restore
the warmed-up state, else only when nothing runs (under load it is offered cold).

An instance that served a one-shot run may be given back with its (empty) scratch
workspace; it is reset to new (its memory restored) before it is offered again,
which costs a fraction of a new instance: under load by the worker that ran it, once
the result is out (`settle`), else by the pool's thread, or by the next run to take
it. One that cannot be reset is replaced at once, even under load: its workspace is
next in line for a run. Every pooled instance is as new: no trace of user code is
left in it.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

from wasm_runner.providers.wasm.sandbox import View
from wasm_runner_protocol.execution import Limits

log = logging.getLogger("wasm_runner")

Key = tuple[str, View]


class WarmPool:
    def __init__(self, make: Callable[[str, View, Limits], Any], limits: Limits) -> None:
        self._make = make
        self._limits = limits
        self._ready: dict[Key, Any] = {}
        self._returned: dict[Key, Any] = {}
        """Instances given back after a run, waiting to be reset."""
        self._taken: set[Key] = set()
        """Views a run is using: a request for one is stale (its instance comes back)."""
        self._wanted: queue.SimpleQueue[Key | None] = queue.SimpleQueue()
        """Views to make or reset an instance for; None once closed, which ends the thread."""
        self._lock = threading.Lock()
        self._active = 0
        self._free_below = os.cpu_count() or 1
        """Make sandboxes ahead only while fewer executions than cores are running."""
        self._closed = False
        self._core_free = threading.Condition(self._lock)
        self._busy: set[Key] = set()
        """Views whose instance a thread is making or resetting now."""
        self._replace: set[Key] = set()
        """Views whose instance could not be reset: a new one is made at once, even under load."""
        self._making: set[Key] = set()
        """Views whose instance is being made from scratch (15-30 ms, more under load)."""
        self._made = threading.Condition(self._lock)
        threading.Thread(target=self._fill, name="wasm-warm-pool", daemon=True).start()

    def busy(self) -> None:
        """An execution started: pre-instantiation waits while every core is busy."""
        with self._lock:
            self._active += 1

    def done(self) -> None:
        with self._lock:
            self._active -= 1
            if self._active < self._free_below:
                self._core_free.notify_all()

    def request(self, language: str, view: View) -> None:
        self._wanted.put((language, view))

    def ready(self, language: str, view: View) -> bool:
        """Whether a run on this view would start at once: its instance is made (reset or not),
        not waiting to be made or replaced."""
        key = (language, view)
        with self._lock:
            return (key in self._ready or key in self._returned or key in self._busy) and not (
                key in self._making or key in self._replace)

    def give_back(self, language: str, view: View, kernel: Any | None, reusable: bool) -> None:
        """The run that took this view is over: keep its instance for `settle` or a later
        `request` to reset and offer (`reusable`), or close it."""
        key = (language, view)
        with self._lock:
            self._taken.discard(key)
            previous = self._returned.pop(key, None) if reusable else kernel
            if reusable:
                self._returned[key] = kernel
        if previous is not None:
            previous.close()

    def take(self, language: str, view: View, limits: Limits) -> Any | None:
        """The sandbox made for this view, waiting for it if it is being made or reset now
        (its head start beats making another one beside it); one given back and not reset
        yet is reset here."""
        key = (language, view)
        with self._lock:
            while key in self._busy:
                self._made.wait()
            self._taken.add(key)
            kernel = self._ready.pop(key, None)
            returned = self._returned.pop(key, None) if kernel is None else None
        if returned is not None:
            if returned.reset():
                kernel = returned
            else:
                returned.close()
        if kernel is not None and not kernel.accepts(limits):
            kernel.close()
            return None
        return kernel

    def discard(self, view: View) -> None:
        with self._lock:
            kernels = [pool.pop(k) for pool in (self._ready, self._returned) for k in list(pool) if k[1] == view]
            self._taken.difference_update([k for k in self._taken if k[1] == view])
            self._replace.difference_update([k for k in self._replace if k[1] == view])
        for kernel in kernels:
            kernel.close()

    def _fill(self) -> None:
        while (key := self._wanted.get()) is not None:
            with self._lock:
                kernel = self._returned.pop(key, None)
                while kernel is None and key not in self._replace and self._active >= self._free_below and not self._closed:
                    self._core_free.wait()  # (a reset is cheap: no wait)
                self._replace.discard(key)
                if key in self._ready or key in self._taken or key in self._busy or self._closed:
                    if kernel is not None:
                        kernel.close()
                    continue
                self._busy.add(key)
            failure: Exception | None = None
            try:
                if kernel is not None and not kernel.reset():  # retired, or its run left something:
                    kernel.close()  # replaced now, busy or not (else the workspace's next run makes one inline)
                    kernel = None
                if kernel is None and key[1].workspace.is_dir():  # else the scratch workspace was removed
                    with self._lock:
                        self._making.add(key)
                    kernel = self._make(key[0], key[1], self._limits)
                if kernel is not None:
                    self._warm_if_due(kernel)
            except Exception as exc:  # noqa: BLE001 - a failed warm-up only costs the run its head start
                failure = exc
                if kernel is not None:
                    kernel.close()
                kernel = None
            gone = not key[1].workspace.is_dir()  # discarded while it was being made
            if failure is not None and not gone:  # a removed workspace fails to preopen: no fault
                log.error("could not pre-instantiate a %s sandbox", key[0], exc_info=failure)
            self._offer(key, kernel, gone)

    def settle(self, language: str, view: View) -> None:
        """Reset, on the calling thread, the instance this view's run gave back (a worker calls
        this once the run's result is out, when other jobs wait: under load, handing the reset
        to the pool's thread costs more than it saves)."""
        key = (language, view)
        with self._lock:
            if self._closed or key not in self._returned:
                return
            kernel = self._returned.pop(key)
            self._busy.add(key)
        try:
            if kernel.reset():
                self._warm_if_due(kernel)
            else:
                kernel.close()
                kernel = None
        except Exception:  # noqa: BLE001 - the pool's thread makes a new one
            log.exception("could not reset a %s sandbox", language)
            kernel.close()
            kernel = None
        gone = not view.workspace.is_dir()
        self._offer(key, kernel, gone)
        if kernel is None and not gone:
            with self._lock:
                self._replace.add(key)
            self._wanted.put(key)

    def _warm_if_due(self, kernel: Any) -> None:
        """A warm-up call for an instance that has not made one: always when its resets keep
        the warmed-up state, else only while nothing runs (it would compete with the runs)."""
        if not kernel.warmed:
            with self._lock:
                idle = self._active == 0
            if idle or kernel.keeps_warmth:
                kernel.warm()

    def _offer(self, key: Key, kernel: Any | None, gone: bool) -> None:
        with self._lock:
            self._busy.discard(key)
            self._making.discard(key)
            self._made.notify_all()
            if kernel is None:
                return
            if key in self._ready or self._closed or gone:
                kernel.close()
            else:
                self._ready[key] = kernel

    def close(self, timeout: float = 15.0) -> None:
        """Drop the ready sandboxes, after the one being made (a process that exits while a
        thread is inside wasmtime can abort)."""
        self._wanted.put(None)
        with self._lock:
            self._closed = True
            self._core_free.notify_all()
            self._made.wait_for(lambda: not self._busy, timeout)
            kernels = [*self._ready.values(), *self._returned.values()]
            self._ready, self._returned = {}, {}
        for kernel in kernels:
            kernel.close()
