"""What the service counts into the usage ledger, and for whom: executions, background processes'
seconds, stored bytes over time, egress bytes.

- An execution: one `executions`, its `wall_seconds` (duration_ms) and `cpu_seconds` (cpu_ms, when
  the host measured it), its egress bytes; a native run's wall time is also `process_seconds`.
- A background process: its wall time as `process_seconds`, counted while it runs (each `tick`
  adds the seconds since the last) and at its end, with the egress bytes of its requests.
- Stored bytes: sampled on the timer (`tick`), each sample counting the bytes held at that moment
  for the time since the previous sample (`byte_hours` = bytes × hours). A session's files are
  its owning key's; a workspace's shared/ is the workspace's (payer_kind "workspace").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from wasm_runner.workspace.layout import tree_usage
from wasm_runner_server.http.policy import Principal
from wasm_runner_server.security.usage import Payer, UsageLedger

SHARED_PAYER = "shared"


def payer_of(principal: Principal) -> Payer:
    """Who pays for what `principal` does: its API key (the developer's), with the key's kind; for an OAuth
    access token, the member who authorized the app."""
    if principal.scopes is not None and principal.member is not None:
        return Payer(principal.workspace, "member", principal.member, principal.kind)
    return Payer(principal.workspace, "key", principal.key_id, principal.kind)


def egress_bytes(events: Iterable[object]) -> int:
    return sum(int(getattr(e, "bytes_sent", 0) or 0) + int(getattr(e, "bytes_received", 0) or 0) for e in events)


@dataclass
class _Running:
    payer: Payer
    counted_to: float
    """Wall time (time.time()) up to which its seconds are counted."""


class Meter:
    def __init__(self, ledger: UsageLedger, clock: Callable[[], float] = time.time) -> None:
        self.ledger = ledger
        self._clock = clock
        self._lock = threading.Lock()
        self._processes: dict[str, _Running] = {}
        self._sampled_at: float | None = None

    def execution(self, principal: Principal, result: object | None, native: bool) -> None:
        """An admitted execution ended (`result` None: it was aborted, and counts once, without time)."""
        payer = payer_of(principal)
        ledger = self.ledger
        ledger.add(payer, "executions", 1)
        if result is None:
            return
        wall = float(getattr(result, "duration_ms", 0.0) or 0.0) / 1000
        ledger.add(payer, "wall_seconds", wall)
        if native:
            ledger.add(payer, "process_seconds", wall)
        cpu_ms = getattr(result, "cpu_ms", None)
        if cpu_ms:
            ledger.add(payer, "cpu_seconds", float(cpu_ms) / 1000)
        ledger.add(payer, "egress_bytes", egress_bytes(getattr(result, "network", None) or ()))

    def process_started(self, process_id: str, principal: Principal, started_at: float) -> None:
        with self._lock:
            self._processes[process_id] = _Running(payer_of(principal), started_at)

    def process_ended(self, process_id: str, ended_at: float | None, network: Sequence[object]) -> None:
        with self._lock:
            running = self._processes.pop(process_id, None)
        if running is None:
            return
        end = ended_at if ended_at is not None else self._clock()
        self.ledger.add(running.payer, "process_seconds", max(0.0, end - running.counted_to))
        self.ledger.add(running.payer, "egress_bytes", egress_bytes(network))

    def process_network(self, process_id: str, network: Sequence[object]) -> None:
        """A running process's egress decisions taken for the audit log (their bytes count now)."""
        with self._lock:
            running = self._processes.get(process_id)
        if running is not None:
            self.ledger.add(running.payer, "egress_bytes", egress_bytes(network))

    def tick(self, sessions: Iterable[tuple[Path, Principal]], shared: Iterable[tuple[str, Path]]) -> None:
        """Count the running processes' seconds so far, and sample stored bytes: `sessions` are the
        (directory, owner) of the sessions this node holds, `shared` (workspace, directory) pairs."""
        now = self._clock()
        with self._lock:
            running = list(self._processes.values())
            for process in running:
                elapsed, process.counted_to = now - process.counted_to, now
                self.ledger.add(process.payer, "process_seconds", max(0.0, elapsed))
            previous, self._sampled_at = self._sampled_at, now
        if previous is None:
            return  # the first sample only starts the clock
        hours = max(0.0, now - previous) / 3600
        for directory, owner in sessions:
            self.ledger.add(payer_of(owner), "byte_hours", _stored(directory) * hours)
        for workspace, directory in shared:
            self.ledger.add(Payer(workspace, "workspace", SHARED_PAYER), "byte_hours", _stored(directory) * hours)


def _stored(directory: Path) -> int:
    try:
        return tree_usage([directory])[0]
    except OSError:  # removed meanwhile, or not made yet: nothing stored
        return 0
