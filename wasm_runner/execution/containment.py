"""What contains a worker process (a memory ceiling set by the parent when it starts one) and
when it is retired (`WorkerPolicy`).

A cgroup of its own where the machine offers a writable one (v2, else v1's memory
controller; made under the parent's cgroup, so the host's limits on the service still
apply), else `RLIMIT_DATA` (what the worker maps writable; not `RLIMIT_AS`: wasmtime
reserves several GiB of address space for each instance, so an address-space ceiling would
refuse kernels long before memory runs short). Past the ceiling, the kernel's OOM killer
(cgroup) or a failed allocation (rlimit) ends that worker alone; its supervisor replaces it.
"""

from __future__ import annotations

import itertools
import logging
import os
import resource
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

log = logging.getLogger("wasm_runner")

__all__ = ["Containment", "WorkerCgroup", "WorkerPolicy", "detect_containment"]

ContainmentKind = Literal["cgroup-v2", "cgroup-v1", "rlimit", "none"]
PREFIX = "wasm-runner-"
"""Worker cgroups are `wasm-runner-<parent pid>-worker-<n>`: the native provider's sweep
removes those of a parent that is gone."""
_seq = itertools.count(1)


@dataclass(frozen=True)
class WorkerPolicy:
    """How kernel workers are contained and retired."""

    memory_bytes: int | None = 4 * 2**30
    """The memory ceiling of each worker process (cgroup, or RLIMIT_DATA); None: no ceiling."""
    max_runs: int = 100_000
    """Calls a worker serves before it is retired (its sessions' kernels restart elsewhere)."""
    max_rss_bytes: int | None = 3 * 2**30
    """Private resident size (RssAnon) at which a worker is retired."""
    threads: int = 64
    """Turns one worker runs at once (the Runner's admission bounds them before)."""


@dataclass
class WorkerCgroup:
    """A worker's cgroup directory, removed once the worker has exited."""

    path: Path

    def peak_bytes(self) -> int | None:
        for name in ("memory.peak", "memory.max_usage_in_bytes"):
            try:
                return int((self.path / name).read_text())
            except (OSError, ValueError):
                continue
        return None

    def remove(self) -> None:
        """Remove the cgroup with what the worker left in it: its native runs' cgroups and any
        sandbox process that outlived it (a killed worker cleans up nothing itself)."""
        from wasm_runner.providers.native.limits import remove_cgroup

        remove_cgroup(self.path)


@dataclass(frozen=True)
class Containment:
    """How this machine contains worker processes, decided once per supervisor."""

    kind: ContainmentKind
    memory_bytes: int | None
    parent: Path | None = None
    """Where worker cgroups are made."""
    reason: str = ""
    """Why no cgroup is used, when none is."""

    def describe(self) -> str:
        if self.memory_bytes is None:
            return "no memory ceiling per worker process (none configured)"
        ceiling = f"{self.memory_bytes / 2**20:.0f} MiB per worker process"
        if self.kind.startswith("cgroup"):
            return f"{self.kind} memory ceiling of {ceiling} (cgroups under {self.parent})"
        if self.kind == "rlimit":
            return f"RLIMIT_DATA ceiling of {ceiling} (no writable cgroup: {self.reason})"
        return f"no memory ceiling ({self.reason})"

    def apply(self, pid: int) -> WorkerCgroup | None:
        """Contain the (just started) worker `pid`; its cgroup, if it got one."""
        if self.memory_bytes is None:
            return None
        if self.kind.startswith("cgroup") and self.parent is not None:
            path = self.parent / f"{PREFIX}{os.getpid()}-worker-{next(_seq)}"
            limit_file = "memory.max" if self.kind == "cgroup-v2" else "memory.limit_in_bytes"
            try:
                path.mkdir()
                (path / limit_file).write_text(str(self.memory_bytes))
                if self.kind == "cgroup-v2":
                    try:
                        (path / "memory.swap.max").write_text("0")
                    except OSError:
                        pass
                (path / "cgroup.procs").write_text(str(pid))
                return WorkerCgroup(path)
            except OSError as exc:
                log.warning("could not put worker %d in a cgroup (%s); RLIMIT_DATA instead", pid, exc)
                WorkerCgroup(path).remove()
        try:
            resource.prlimit(pid, resource.RLIMIT_DATA, (self.memory_bytes, self.memory_bytes))
        except (OSError, ValueError) as exc:
            log.warning("could not set a memory ceiling on worker %d: %s", pid, exc)
        return None


def detect_containment(memory_bytes: int | None) -> Containment:
    """The best memory ceiling this machine offers for worker processes."""
    if memory_bytes is None:
        return Containment("none", None, reason="no ceiling configured")
    try:
        from wasm_runner.providers.native.limits import detect
    except ImportError as exc:  # pragma: no cover - the module ships with the core
        return Containment("rlimit", memory_bytes, reason=str(exc))
    support = detect()
    if support.enforcement == "cgroup-v2":
        return Containment("cgroup-v2", memory_bytes, support.parents[""])
    if support.enforcement == "cgroup-v1" and "memory" in support.parents:
        return Containment("cgroup-v1", memory_bytes, support.parents["memory"])
    return Containment("rlimit", memory_bytes, reason=support.reason or "no writable cgroup")
