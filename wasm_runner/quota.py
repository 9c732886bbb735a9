"""Disk quota enforcement while a guest runs.

WASI has no quota, so one watcher thread re-measures the workspaces of running
executions (those running longer than one period) and stops the ones over quota.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable

from .api import Limits
from .workspace import Workspace

log = logging.getLogger("wasm_runner")

CHECK_PERIOD_S = 0.05


def over_quota(workspace: Workspace, limits: Limits) -> bool:
    used_bytes, entries = workspace.usage(stop_after_files=limits.disk_files)
    return exceeds(limits, used_bytes, entries)


def exceeds(limits: Limits, used_bytes: int, entries: int) -> bool:
    return used_bytes > limits.disk_bytes or entries > limits.disk_files


class QuotaWatcher:
    def __init__(self) -> None:
        self._watched: dict[int, tuple[Workspace, Limits, Callable[[], None], float]] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def watch(self, workspace: Workspace, limits: Limits, stop: Callable[[], None]) -> int:
        with self._lock:
            key = next(self._ids)
            self._watched[key] = (workspace, limits, stop, time.monotonic())
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="wasm-quota", daemon=True)
                self._thread.start()
            return key

    def unwatch(self, key: int) -> None:
        with self._lock:
            self._watched.pop(key, None)

    def _loop(self) -> None:
        while True:
            time.sleep(CHECK_PERIOD_S)
            now = time.monotonic()
            with self._lock:
                due = [(k, w) for k, w in self._watched.items() if now - w[3] >= CHECK_PERIOD_S]
            for key, (workspace, limits, stop, _) in due:
                try:
                    over = over_quota(workspace, limits)
                except OSError:  # e.g. the workspace was removed meanwhile; the next pass retries
                    log.warning("could not measure %s", workspace.root, exc_info=True)
                    continue
                if over:
                    stop()
                    self.unwatch(key)


watcher = QuotaWatcher()
