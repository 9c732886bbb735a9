"""Resource limits for native runs: a per-run cgroup (v2 or v1) where the machine offers one,
rlimits otherwise.

Each run gets its own cgroup, created under the cgroup this process already lives in (so
whatever limits the host puts on the service still apply to its sandboxes) and removed when
the run ends. The sandbox joins it before bubblewrap starts (a small launcher moves itself
into the cgroup and then execs bwrap), so every process of the run is counted from the
first fork (on v1 by moving only its own thread, which avoids the kernel's global
threadgroup lock). Where no writable cgroup with the memory and pids controllers exists, the run
falls back to rlimits set inside the sandbox, and the result says `enforcement: "rlimit"`.
"""

from __future__ import annotations

import atexit
import functools
import itertools
import logging
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from wasm_runner.providers.native.identity import SandboxIdentity
from wasm_runner.providers.native.launch import Drop, launch_prefix

log = logging.getLogger("wasm_runner.native")

Enforcement = Literal["cgroup-v2", "cgroup-v1", "rlimit"]
CgroupMode = Literal["auto", "v2", "v1", "off"]

PREFIX = "wasm-runner-"
"""Name prefix of per-run cgroups: `wasm-runner-<service pid>-<n>`."""

CPU_PERIOD_US = 100_000
_seq = itertools.count(1)


# -- discovery ---------------------------------------------------------------------------------


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, fs type, super options) of every cgroup mount."""
    found: list[tuple[str, str, set[str]]] = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        left, _, right = line.partition(" - ")
        parts, rparts = left.split(), right.split()
        if len(parts) < 5 or len(rparts) < 3 or rparts[0] not in ("cgroup", "cgroup2"):
            continue
        mount_point = parts[4].replace("\\040", " ")
        found.append((mount_point, rparts[0], set(rparts[2].split(","))))
    return found


def _own_paths() -> dict[str, str]:
    """controller (or "" for the v2 hierarchy) -> this process's cgroup path, from /proc/self/cgroup."""
    paths: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return paths
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            paths[name] = path
    return paths


def _sweep_stale(parent: Path) -> None:
    """Remove per-run cgroups left by services that died mid-run (their pid is gone)."""
    try:
        entries = list(parent.iterdir())
    except OSError:
        return
    for entry in entries:
        name = entry.name
        if not name.startswith(PREFIX) or not entry.is_dir():
            continue
        try:
            owner = int(name[len(PREFIX):].split("-")[0])
        except ValueError:
            continue
        if owner == os.getpid() or Path(f"/proc/{owner}").exists():
            continue
        _kill_and_remove(entry, "cgroup.procs")


def _probe(parent: Path) -> bool:
    """Can we create (and remove) a child cgroup here?"""
    probe = parent / f"{PREFIX}{os.getpid()}-probe"
    try:
        probe.mkdir()
    except FileExistsError:
        pass
    except OSError:
        return False
    try:
        probe.rmdir()
    except OSError:
        pass
    return True


@dataclass(frozen=True)
class CgroupSupport:
    """Where per-run cgroups can be made on this machine, or why not."""

    enforcement: Enforcement
    parents: dict[str, Path] = field(default_factory=dict)
    """controller -> parent directory for per-run cgroups (v1: one per controller; v2: key "")."""
    reason: str = ""
    """Why cgroups are not used (rlimit), for doctor and the log."""


def detect(mode: CgroupMode = "auto", parent: str | None = None) -> CgroupSupport:
    """Find a writable cgroup hierarchy with the memory and pids controllers.

    `parent` (or $WASM_RUNNER_CGROUP_PARENT) names the directory to create run cgroups in
    (for v2: a path under the unified mount; for v1: a path relative to each controller's
    mount); by default, this process's own cgroup.
    """
    if mode == "off":
        return CgroupSupport("rlimit", reason="cgroups switched off by configuration")
    parent = parent or os.environ.get("WASM_RUNNER_CGROUP_PARENT") or None
    reasons = []
    if mode in ("auto", "v2"):
        found = _detect_v2(parent)
        if isinstance(found, CgroupSupport):
            return found
        reasons.append(f"cgroup v2: {found}")
    if mode in ("auto", "v1"):
        found = _detect_v1(parent)
        if isinstance(found, CgroupSupport):
            return found
        reasons.append(f"cgroup v1: {found}")
    return CgroupSupport("rlimit", reason="; ".join(reasons))


def _detect_v2(parent: str | None) -> CgroupSupport | str:
    unified = [m for m, fs, _ in _mounts() if fs == "cgroup2"]
    if not unified:
        return "no cgroup2 mount"
    root = Path(unified[0])
    own = _own_paths().get("", "/")
    base = root / (parent or own).lstrip("/")
    try:
        available = (base / "cgroup.controllers").read_text().split()
    except OSError as exc:
        return f"cannot read {base}/cgroup.controllers ({exc.strerror})"
    if not {"memory", "pids"} <= set(available):
        return f"memory/pids controllers not available in {base} (hybrid mode or not delegated)"
    wanted = [c for c in ("memory", "pids", "cpu") if c in available]
    try:
        enabled = set((base / "cgroup.subtree_control").read_text().split())
        missing = [c for c in wanted if c not in enabled]
        if missing:
            (base / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in missing))
    except OSError as exc:
        return (f"cannot enable controllers for children of {base} ({exc.strerror}); run the service in "
                "a delegated cgroup or set WASM_RUNNER_CGROUP_PARENT to one without processes")
    if not _probe(base):
        return f"cannot create cgroups under {base}"
    _sweep_stale(base)
    return CgroupSupport("cgroup-v2", {"": base})


def _detect_v1(parent: str | None) -> CgroupSupport | str:
    own = _own_paths()
    parents: dict[str, Path] = {}
    for mount_point, fs, options in _mounts():
        if fs != "cgroup":
            continue
        for controller in ("memory", "pids", "cpu", "cpuacct"):  # cpuacct: the run's CPU time (metering)
            if controller in options and controller not in parents:
                rel = parent if parent is not None else own.get(controller, "/")
                parents[controller] = Path(mount_point) / rel.lstrip("/")
    if "memory" not in parents or "pids" not in parents:
        return "memory and pids controllers are not both mounted"
    for controller, base in list(parents.items()):
        if not _probe(base):
            if controller in ("cpu", "cpuacct"):  # optional: without them, no CPU cap or CPU time
                del parents[controller]
                continue
            return f"cannot create cgroups under {base}"
        _sweep_stale(base)
    return CgroupSupport("cgroup-v1", parents)


# -- one run's cgroup ---------------------------------------------------------------------------


@dataclass
class RunLimits:
    memory_bytes: int
    max_processes: int
    cpus: float | None
    file_bytes: int | None = None
    cpu_seconds: int | None = None


class RunCgroup:
    """The cgroup(s) of one run: created with limits, joined by the launcher, read, removed."""

    def __init__(self, support: CgroupSupport, limits: RunLimits) -> None:
        self.support = support
        self.name = f"{PREFIX}{os.getpid()}-{next(_seq)}"
        self.dirs: dict[str, Path] = {c: p / self.name for c, p in support.parents.items()}
        self._made: list[Path] = []
        try:
            for path in self.dirs.values():
                path.mkdir()
                self._made.append(path)
            if support.enforcement == "cgroup-v2":
                self._limit_v2(limits)
            else:
                self._limit_v1(limits)
        except BaseException:
            self.remove()
            raise

    @property
    def v2(self) -> bool:
        return self.support.enforcement == "cgroup-v2"

    def _dir(self, controller: str) -> Path:
        return self.dirs[""] if self.v2 else self.dirs[controller]

    def _limit_v2(self, limits: RunLimits) -> None:
        d = self.dirs[""]
        (d / "memory.max").write_text(str(limits.memory_bytes))
        _try_write(d / "memory.swap.max", "0")
        _try_write(d / "memory.oom.group", "1")
        (d / "pids.max").write_text(str(limits.max_processes))
        if limits.cpus:
            _try_write(d / "cpu.max", f"{int(limits.cpus * CPU_PERIOD_US)} {CPU_PERIOD_US}")

    def _limit_v1(self, limits: RunLimits) -> None:
        mem = self.dirs["memory"]
        (mem / "memory.limit_in_bytes").write_text(str(limits.memory_bytes))
        _try_write(mem / "memory.memsw.limit_in_bytes", str(limits.memory_bytes))  # no escape into swap
        (self.dirs["pids"] / "pids.max").write_text(str(limits.max_processes))
        if limits.cpus and "cpu" in self.dirs:
            cpu = self.dirs["cpu"]
            _try_write(cpu / "cpu.cfs_period_us", str(CPU_PERIOD_US))
            _try_write(cpu / "cpu.cfs_quota_us", str(int(limits.cpus * CPU_PERIOD_US)))

    def join_writes(self) -> list[tuple[str, str]]:
        """(file, value) pairs by which the single-threaded launcher moves itself into the run's cgroups.

        v1: "0" into `tasks` moves the calling thread alone, which the kernel does without the
        global threadgroup lock (an RCU grace period, ~10 ms under load, per cgroup.procs write).
        v2 has no such file outside threaded cgroups: the launcher writes its pid to cgroup.procs.
        """
        if self.v2:
            return [(str(self.dirs[""] / "cgroup.procs"), "$$")]
        return [(str(d / "tasks"), "0") for d in self.dirs.values()]

    def pids(self) -> set[int]:
        try:
            text = (self._dir("pids") / "cgroup.procs").read_text()
        except OSError:
            return set()
        return {int(p) for p in text.split()}

    def signal_all(self, sig: int, spare: AbstractSet[int] = frozenset()) -> None:
        if sig == signal.SIGKILL and self.v2 and not spare and _try_write(self.dirs[""] / "cgroup.kill", "1"):
            return
        for pid in self.pids() - set(spare):
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def memory_peak(self) -> int | None:
        name = "memory.peak" if self.v2 else "memory.max_usage_in_bytes"
        try:
            return int((self._dir("memory") / name).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def cpu_seconds_used(self) -> float | None:
        """CPU time (user + system) of every process the run had: the sandbox's own descendants, which
        a wait on the launcher does not count. None when no CPU accounting is mounted."""
        try:
            if self.v2:
                usage = _read_keyed(self.dirs[""] / "cpu.stat").get("usage_usec")
                return usage / 1e6 if usage is not None else None
            directory = self.dirs.get("cpuacct")  # often its own mount, else beside cpu ("cpu,cpuacct")
            if directory is None:
                return None
            return int((directory / "cpuacct.usage").read_text()) / 1e9
        except (OSError, ValueError):
            return None

    def oom_killed(self) -> bool:
        if self.v2:
            events = _read_keyed(self.dirs[""] / "memory.events")
            return events.get("oom_kill", 0) > 0 or events.get("oom_group_kill", 0) > 0
        control = _read_keyed(self.dirs["memory"] / "memory.oom_control")
        return control.get("oom_kill", 0) > 0 or control.get("under_oom", 0) > 0

    def pids_exhausted(self) -> bool:
        events = _read_keyed(self._dir("pids") / "pids.events")
        return events.get("max", 0) > 0

    def remove(self, timeout_s: float = 2.0) -> None:
        """Kill whatever is left and remove the run's cgroups (waiting for them to empty)."""
        for path in reversed(self._made):
            _kill_and_remove(path, "cgroup.procs", timeout_s)
        self._made.clear()

    def release(self) -> None:
        """Remove the cgroups in the background (the kernel may take a few ms to let go of them)."""
        paths, self._made = list(reversed(self._made)), []
        if paths:
            _cleaner.submit(paths)


class _Cleaner:
    """One daemon thread removing released run cgroups, so a result never waits for rmdir."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[list[Path]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._pending = 0
        self._idle = threading.Condition(self._lock)

    def submit(self, paths: list[Path]) -> None:
        with self._lock:
            self._pending += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="wasm-runner-cgroups", daemon=True)
                self._thread.start()
        self._queue.put(paths)

    def _loop(self) -> None:
        while True:
            paths = self._queue.get()
            try:
                for path in paths:
                    _kill_and_remove(path, "cgroup.procs")
            finally:
                with self._lock:
                    self._pending -= 1
                    self._idle.notify_all()

    def wait(self, timeout_s: float = 5.0) -> bool:
        """Block until every released cgroup is removed (tests, shutdown)."""
        with self._lock:
            return self._idle.wait_for(lambda: self._pending == 0, timeout_s)


_cleaner = _Cleaner()
atexit.register(_cleaner.wait, 3.0)


def wait_for_cleanup(timeout_s: float = 5.0) -> bool:
    """Wait until released run cgroups are gone; True when none is left."""
    return _cleaner.wait(timeout_s)


def remove_cgroup(path: Path, timeout_s: float = 2.0) -> None:
    """Kill what is left in the cgroup `path` and below it, then remove the tree."""
    _kill_and_remove(path, "cgroup.procs", timeout_s)


def _kill_and_remove(path: Path, procs: str, timeout_s: float = 2.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            pass
        try:  # a dead worker's cgroup still holds its native runs' cgroups: those go first
            children = [c for c in path.iterdir() if c.is_dir()]
        except OSError:
            children = []
        for child in children:
            _kill_and_remove(child, procs, max(deadline - time.monotonic(), 0.0))
        try:
            for pid in (path / procs).read_text().split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        except OSError:
            pass
        if time.monotonic() > deadline:
            log.warning("could not remove cgroup %s (still busy)", path)
            return
        time.sleep(0.002)


def _try_write(path: Path, value: str) -> bool:
    try:
        path.write_text(value)
        return True
    except OSError:
        return False


def _read_keyed(path: Path) -> dict[str, int]:
    values: dict[str, int] = {}
    try:
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            try:
                values[key] = int(value)
            except ValueError:
                continue
    except OSError:
        pass
    return values


# -- rlimit fallback ---------------------------------------------------------------------------


def rlimit_prefix(limits: RunLimits) -> list[str]:
    """A command prefix that sets rlimits *inside* the sandbox, after its user namespace exists.

    RLIMIT_NPROC counts processes per user per user namespace, so set inside the sandbox it
    bounds that sandbox alone (set before bubblewrap it would count every process of the
    service's user on the host). RLIMIT_DATA (private writable memory) stands in for a memory
    limit without breaking runtimes that reserve large address ranges (V8) as RLIMIT_AS would.
    Hard and soft limits are both set, so the guest cannot raise them again. The program runs
    at nice 10, the fallback for the missing CPU controller.
    """
    kib = max(limits.memory_bytes // 1024, 1)
    n = limits.max_processes
    # Without -H/-S both dash and bash set hard and soft; dash names RLIMIT_NPROC -p, bash -u.
    script = [f"ulimit -d {kib}", f"{{ ulimit -u {n} 2>/dev/null || ulimit -p {n}; }}"]
    if limits.cpu_seconds:
        script.append(f"ulimit -t {limits.cpu_seconds}")
    # No CPU controller: a lower priority keeps the host (and the service's own watchdog) responsive.
    runner = 'exec nice -n 10 "$@"' if os.path.exists("/usr/bin/nice") or os.path.exists("/bin/nice") else 'exec "$@"'
    return ["/bin/sh", "-c", " && ".join(script) + " && " + runner, "wasm-runner-limits"]


RESET_SIGNALS = (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP)
"""Signals a service started in the background (`&`, nohup) ignores, and would pass on ignored."""


def default_signals() -> list[str]:
    """A prefix that gives the sandbox default handling of the signals this process ignores.

    An ignored signal stays ignored across exec, so without it a program's answer to an INT
    (a background process's `signal`, Ctrl-C in a terminal) would depend on how the service
    was started. Empty when nothing is ignored, the usual case: no extra exec then.
    """
    names = [s.name.removeprefix("SIG") for s in RESET_SIGNALS if signal.getsignal(s) is signal.SIG_IGN]
    if not names or not _env_resets_signals():
        return []
    return ["/usr/bin/env", f"--default-signal={','.join(names)}"]


@functools.cache
def _env_resets_signals() -> bool:
    try:
        done = subprocess.run(["/usr/bin/env", "--default-signal=INT", "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        done = None
    if done is None or done.returncode != 0:
        log.warning("this process ignores SIGINT, SIGQUIT or SIGHUP and /usr/bin/env cannot reset them "
                    "(GNU coreutils 8.31 or later can): sandboxed programs inherit them ignored")
        return False
    return True


def launcher(cgroup: RunCgroup | None, file_bytes: int | None, *, identity: SandboxIdentity | None = None,
             mounts: list[tuple[str, str]] | None = None, propagation: str = "private") -> list[str]:
    """The host-side prefix that joins the run's cgroup and caps single-file size, then execs bwrap
    (as `identity` through the relay of `mounts` when that identity is a dropped one)."""
    drop = Drop(identity, mounts or [], propagation) if identity is not None and identity.dropped else None
    return launch_prefix(file_bytes=file_bytes, joins=cgroup.join_writes() if cgroup is not None else (), drop=drop)


def nested(support: CgroupSupport, parent: RunCgroup) -> CgroupSupport:
    """Support for cgroups made under `parent` (a session's cgroup bounding all its processes together)."""
    if support.enforcement == "cgroup-v2":
        wanted = [c for c in ("memory", "pids", "cpu") if c in _read_controllers(parent.dirs[""])]
        (parent.dirs[""] / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted))
    return CgroupSupport(support.enforcement, dict(parent.dirs))


def _read_controllers(path: Path) -> list[str]:
    try:
        return (path / "cgroup.controllers").read_text().split()
    except OSError:
        return []
