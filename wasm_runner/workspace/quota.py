"""Disk quota enforcement while a guest runs, and reservations for writes made by the host.

WASI has no quota, so one watcher thread re-measures the places running executions can
write (their workspace, its tmp/, and every writable mount) and stops the ones over quota.
Measuring fails closed: a guest whose usage cannot be measured is stopped as over quota.

Writes made through the API reserve their bytes in a `DiskLedger` before they happen, so
concurrent writers cannot each see the same free room.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import shlex
import stat
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from wasm_runner.errors import WasmRunnerError
from wasm_runner.workspace.layout import Workspace, tree_usage, walk_tree
from wasm_runner_protocol.execution import LIMIT_MESSAGES, Limits

log = logging.getLogger("wasm_runner")

CHECK_PERIOD_S = 0.05
NEAR_PERIOD_S = 0.01
"""How often a run that has used half its allowance or more is measured: a fast writer's
overshoot is what it writes between two measurements."""


class DiskBudget(Protocol):
    """A limit shared beyond one session (e.g. a workspace quota over its shared/ directory)."""

    def exceeded(self) -> bool:
        """True when over the limit; raises OSError when usage cannot be measured."""
        ...


def counted_mounts(mounts: Iterable[Any]) -> tuple[list[Path], list[Path], list[DiskBudget]]:
    """The writable mounts counted in the session's own usage, those shared beyond it (only
    what a run adds there counts), and the budgets of mounts limited by a budget of their own."""
    own, shared, budgets = [], [], []
    for mount in mounts:
        if not mount.writable or getattr(mount, "alias", False):
            continue
        if mount.budget is not None:
            budgets.append(mount.budget)
        elif getattr(mount, "shared", False):
            shared.append(mount.host)
        else:
            own.append(mount.host)
    return own, shared, budgets


def over_quota(workspace: Workspace, limits: Limits, mounts: Sequence[Any] = ()) -> bool:
    """Whether the places a guest can write hold more than allowed (absolute, no run's start
    considered: the file API's view). Raises OSError when they cannot be measured."""
    used_bytes, entries = workspace.usage(stop_after_files=limits.disk_files)
    return exceeds(limits, used_bytes, entries) or mounts_exceed(limits, mounts, used_bytes, entries)


def mounts_exceed(limits: Limits, mounts: Sequence[Any], used_bytes: int, entries: int) -> bool:
    """With the workspace's own (bytes, entries): whether the writable mounts push it past
    `limits`, or past their own budgets. Raises OSError when they cannot be measured."""
    own, _, budgets = counted_mounts(mounts)
    if own:
        more_bytes, more_entries = tree_usage(own, stop_after_files=max(limits.disk_files - entries, 0))
        if exceeds(limits, used_bytes + more_bytes, entries + more_entries):
            return True
    return any(budget.exceeded() for budget in budgets)


def exceeds(limits: Limits, used_bytes: int, entries: int) -> bool:
    return used_bytes > limits.disk_bytes or entries > limits.disk_files


class RunDisk:
    """What one run may write, judged against what its places held when it started.

    A run is charged for what it adds: it may bring the session (workspace, its /tmp, its own
    writable mounts) up to `limits.disk_bytes`, and everything it adds (shared mounts included)
    may not pass its allowance: the room left under `disk_bytes` at its start, and at most
    `room` (what the host reserved for it, e.g. a workspace quota's room). A session already
    over its limit may run, delete and rewrite, but not grow; a run that writes nothing is
    never over. Measuring fails closed: a run whose start or usage cannot be measured is over.
    """

    def __init__(self, workspace: Workspace, limits: Limits, mounts: Sequence[Any] = (), room: int | None = None,
                 usage: tuple[int, int] | None = None) -> None:
        self.workspace = workspace
        self.limits = limits
        self.room = room
        self.mounts = tuple(mounts)
        self.near = False
        """Whether the last measurement found half its allowance or more used (measured more often)."""
        self.own, self.shared, self.budgets = counted_mounts(mounts)
        self.start: tuple[int, int, int] | None = None
        try:
            self.start = self.measure(usage)
        except Exception:  # noqa: BLE001 - a start that cannot be measured stops the run
            log.warning("could not measure the disk usage of %s before a run; stopping it as over quota",
                        workspace.root, exc_info=True)
        self.near = self.allowance() == 0  # no room at all: the first byte it adds is too many

    def measure(self, usage: tuple[int, int] | None = None) -> tuple[int, int, int]:
        """(bytes, entries) of the session's own places and bytes of its shared mounts; `usage`:
        the workspace's own (bytes, entries) when just measured. Raises OSError.

        The start is measured whole; later walks stop one entry past what the run may hold (a
        walk stopped early is over on entries, so the bytes it missed cannot go unseen)."""
        cap = None if self.start is None else max(self.limits.disk_files, self.start[1]) + 1
        used_bytes, entries = usage if usage is not None else self.workspace.usage(stop_after_files=cap)
        if self.own:
            more_bytes, more_entries = tree_usage(self.own, stop_after_files=None if cap is None
                                                  else max(cap - entries, 0))
            used_bytes, entries = used_bytes + more_bytes, entries + more_entries
        shared = tree_usage(self.shared)[0] if self.shared else 0
        return used_bytes, entries, shared

    def allowance(self) -> int:
        """Bytes this run may add, everywhere it can write (0 when its start is unknown)."""
        if self.start is None:
            return 0
        allowed = max(self.limits.disk_bytes - self.start[0], 0)
        return allowed if self.room is None else min(allowed, max(self.room, 0))

    def over(self, usage: tuple[int, int] | None = None) -> bool:
        """Whether the run has written past what it may. Raises OSError when it cannot be measured."""
        if self.start is None:
            return True
        start_bytes, start_entries, start_shared = self.start
        used_bytes, entries, shared = self.measure(usage)
        if used_bytes > max(self.limits.disk_bytes, start_bytes) or entries > max(self.limits.disk_files,
                                                                                   start_entries):
            return True
        added, allowance = used_bytes + shared - start_bytes - start_shared, self.allowance()
        self.near = added * 2 >= allowance
        if added > allowance:
            return True
        return any(budget.exceeded() for budget in self.budgets)

    def over_or_unmeasurable(self, usage: tuple[int, int] | None = None) -> bool:
        """`over`, failing closed: a usage that cannot be measured counts as over."""
        try:
            return self.over(usage)
        except Exception:  # noqa: BLE001 - any failure to measure must stop the guest, not let it write on
            log.warning("could not measure the disk usage of %s; stopping it as over quota", self.workspace.root,
                        exc_info=True)
            return True

    def message(self) -> str:
        """The limit's message: what was passed, the largest files and how to remove them."""
        return disk_message(self.workspace, self.limits, self.allowance() if self.start is not None else None,
                            self.mounts)


def over_quota_or_unmeasurable(workspace: Workspace, limits: Limits, mounts: Sequence[Any] = ()) -> bool:
    """over_quota, failing closed: a usage that cannot be measured counts as over."""
    try:
        return over_quota(workspace, limits, mounts)
    except Exception:  # noqa: BLE001 - any failure to measure must stop the guest, not let it write on
        log.warning("could not measure the disk usage of %s; stopping it as over quota", workspace.root,
                    exc_info=True)
        return True


LARGEST_SHOWN = 3


def largest_files(places: Sequence[tuple[Path, str]], count: int = LARGEST_SHOWN) -> list[tuple[str, int]]:
    """The `count` largest regular files under `places` ((host directory, guest path) pairs), as
    (guest path, bytes), largest first; links are never followed, what cannot be read is skipped."""
    found: list[tuple[int, str]] = []
    for host, guest in places:
        try:
            for _, _, rel, st in walk_tree(host):
                if stat.S_ISREG(st.st_mode) and rel:  # unnamed past NAMED_PATH_CHARS: not shown
                    heapq.heappush(found, (st.st_size, f"{guest}/{rel}"))
                    if len(found) > count:
                        heapq.heappop(found)
        except OSError:
            continue
    return [(path, size) for size, path in sorted(found, reverse=True)]


def disk_message(workspace: Workspace, limits: Limits, allowance: int | None = None, mounts: Sequence[Any] = ()) -> str:
    """LIMIT_MESSAGES["disk"] with the figures, the largest files and how to remove them."""
    places = [(workspace.files, "/workspace"), (workspace.tmp, "/tmp")]
    places += [(m.host, m.guest) for m in mounts if m.writable and not getattr(m, "alias", False)]
    largest = largest_files(places)
    text = LIMIT_MESSAGES["disk"] + f" (limits.disk_bytes {limits.disk_bytes}"
    if allowance is not None:
        text += f"; this run could add {allowance} bytes"
    text += ")"
    if largest:
        shown = ", ".join(f"{path} ({size} bytes)" for path, size in largest)
        first = largest[0][0]
        api = first[len("/workspace/"):] if first.startswith("/workspace/") else None
        text += (f". Largest files: {shown}. Deleting is never refused: `rm {shlex.quote(first)}` in a shell, "
                 f"os.remove({first!r}) in Python")
        if api is not None:
            text += f", or DELETE /v1/sessions/{{id}}/files/{api}"
    return text


class QuotaWatcher:
    """One thread measuring every watched run when it is due: each CHECK_PERIOD_S, and each
    NEAR_PERIOD_S once it has used half its allowance."""

    def __init__(self) -> None:
        self._watched: dict[int, tuple[RunDisk, Callable[[], None], float]] = {}
        """key -> (run, how to stop it, when it is next due)."""
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def watch(self, run: RunDisk, stop: Callable[[], None]) -> int:
        with self._lock:
            key = next(self._ids)
            self._watched[key] = (run, stop, time.monotonic() + (NEAR_PERIOD_S if run.near else CHECK_PERIOD_S))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="wasm-quota", daemon=True)
                self._thread.start()
            return key

    def unwatch(self, key: int) -> None:
        with self._lock:
            self._watched.pop(key, None)

    def _loop(self) -> None:
        while True:
            with self._lock:
                soonest = min((w[2] for w in self._watched.values()), default=time.monotonic() + CHECK_PERIOD_S)
            time.sleep(min(max(soonest - time.monotonic(), NEAR_PERIOD_S / 2), CHECK_PERIOD_S))
            self.check_due(time.monotonic())

    def check_due(self, now: float) -> None:
        """One pass: stop every due run that wrote past what it may, or cannot be measured."""
        with self._lock:
            due = [(k, w) for k, w in self._watched.items() if now >= w[2]]
        for key, (run, stop, _) in due:
            with self._lock:
                if key not in self._watched:  # the run ended meanwhile: its workspace may be gone
                    continue
            if run.over_or_unmeasurable():
                stop()
                self.unwatch(key)
                continue
            with self._lock:
                if key in self._watched:
                    self._watched[key] = (run, stop, time.monotonic() + (NEAR_PERIOD_S if run.near
                                                                         else CHECK_PERIOD_S))


watcher = QuotaWatcher()


# -- reservations --------------------------------------------------------------------------

COMMITTED_KEPT_S = 5.0
"""How long a committed reservation keeps counting at least: longer than any usage cache
a caller measures with, so a write just renamed into place is never missed by both."""


class QuotaExceeded(WasmRunnerError):
    def __init__(self, scope: str, limit: int, room: int) -> None:
        super().__init__(f"{scope}: {room} of {limit} bytes left")
        self.scope = scope
        self.limit = limit
        self.room = room


class Reservation:
    """Bytes one write may still add against one limit; grows as the write's data arrives."""

    def __init__(self, ledger: DiskLedger, scope: str, limit: int, used: int, measured_at: float) -> None:
        self.ledger = ledger
        self.scope = scope
        self.limit = limit
        self.used = used
        self.measured_at = measured_at
        self.bytes = 0
        self.committed_at: float | None = None
        self.released = False

    def take(self, n: int) -> None:
        """Reserve `n` more bytes; QuotaExceeded (nothing reserved) when they do not fit."""
        self.ledger.take(self, n)

    def room(self) -> int:
        """Bytes this reservation could still take (at this moment)."""
        with self.ledger.lock:
            held = self.used + self.ledger.pending_locked(self.scope, self.measured_at, self)
            return max(self.limit - held - self.bytes, 0)

    def give_back(self, n: int) -> None:
        """Undo a `take(n)` (another limit refused the same bytes)."""
        with self.ledger.lock:
            self.bytes = max(self.bytes - n, 0)

    def commit(self) -> None:
        """The bytes are on disk now: they keep counting until every measurement sees them."""
        self.ledger.settle(self, committed=True)

    def release(self) -> None:
        """The write was abandoned: its bytes are free again (a no-op after commit)."""
        self.ledger.settle(self, committed=False)


class DiskLedger:
    """Reservations per scope (a session, a workspace), under one lock.

    A write measures the scope's usage (time `measured_at`), then reserves against it: the
    check adds every reservation still writing plus those committed since that measurement
    (a measurement started before a commit may not contain its file)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.lock = threading.Lock()
        self._scopes: dict[str, list[Reservation]] = {}

    def reserve(self, scope: str, limit: int, used: int, measured_at: float, initial: int = 0) -> Reservation:
        reservation = Reservation(self, scope, limit, used, measured_at)
        with self.lock:
            self._scopes.setdefault(scope, []).append(reservation)
        if initial:
            try:
                reservation.take(initial)
            except QuotaExceeded:
                reservation.release()
                raise
        return reservation

    def pending(self, scope: str, measured_at: float, excluding: Reservation | None = None) -> int:
        """Bytes a measurement taken at `measured_at` may not contain."""
        with self.lock:
            return self.pending_locked(scope, measured_at, excluding)

    def pending_locked(self, scope: str, measured_at: float, excluding: Reservation | None) -> int:
        return sum(r.bytes for r in self._scopes.get(scope, ())
                   if r is not excluding and (r.committed_at is None or r.committed_at >= measured_at))

    def take(self, reservation: Reservation, n: int) -> None:
        with self.lock:
            if reservation.released or reservation.committed_at is not None:
                raise ValueError("the reservation is settled")
            held = reservation.used + self.pending_locked(reservation.scope, reservation.measured_at, reservation)
            if held + reservation.bytes + n > reservation.limit:
                raise QuotaExceeded(reservation.scope, reservation.limit,
                                    max(reservation.limit - held - reservation.bytes, 0))
            reservation.bytes += n

    def settle(self, reservation: Reservation, *, committed: bool) -> None:
        now = self.clock()
        with self.lock:
            if reservation.released or reservation.committed_at is not None:
                return
            if committed:
                reservation.committed_at = now
            else:
                reservation.released = True
            entries = self._scopes.get(reservation.scope, [])
            writing = [r.measured_at for r in entries if r.committed_at is None and not r.released]
            horizon = min([now - COMMITTED_KEPT_S, *writing])
            kept = [r for r in entries if not r.released and (r.committed_at is None or r.committed_at >= horizon)]
            if kept:
                self._scopes[reservation.scope] = kept
            else:
                self._scopes.pop(reservation.scope, None)
