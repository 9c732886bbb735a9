"""Which host user a native sandbox runs as, and the relay that lets that user reach its mounts.

bubblewrap maps the sandbox's uid to the uid that starts it. A service running as root would
make every guest root on the host (its files, its kernel keyring), so a root service starts
bwrap as a dedicated unprivileged system user instead (created by scripts/install-native.sh):
files a guest writes belong to that user on the host. A service that is not root already runs
as an unprivileged user and starts bwrap as itself.

That user may not traverse the directories above a session (a data directory of mode 0700, a
caller's private temporary directory): bwrap resolves every mount source as the user it runs
as. So a root service first enters a private mount namespace of its own (the host's mount
table is untouched), binds each closed directory above a source onto a mount point of a
world-traversable relay directory, and only then drops to the sandbox user and execs bwrap,
which mounts the sources through the relay. Nothing of the host's directory tree is made wider,
and nothing of the relay is left in the sandbox (bwrap unmounts the host's tree it came from).
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

from wasm_runner.workspace.process_dirs import process_dir

SANDBOX_ACCOUNT = "wasm-runner-sandbox"
"""The unprivileged system user a root service runs sandboxes as ($WASM_RUNNER_SANDBOX_USER overrides)."""

HELPERS = ("unshare", "mount", "setpriv")
"""util-linux programs the relay needs (a root service only), looked up in the system's directories."""
SYSTEM_PATH = "/usr/bin:/bin:/usr/sbin:/sbin"


@dataclass(frozen=True)
class SandboxIdentity:
    """The host uid/gid a sandbox's processes (and the files they write) have."""

    uid: int
    gid: int
    name: str
    dropped: bool
    """True when the service is root and starts bwrap as this other, unprivileged user."""

    def describe(self) -> str:
        if self.dropped:
            return (f"guests run as the unprivileged user {self.name} (uid {self.uid}, gid {self.gid}); "
                    "the service is root and drops to it before starting bubblewrap")
        return f"guests run as the service's own unprivileged user {self.name} (uid {self.uid})"


def account_name() -> str:
    return os.environ.get("WASM_RUNNER_SANDBOX_USER") or SANDBOX_ACCOUNT


def sandbox_identity() -> SandboxIdentity | str:
    """Who sandboxes run as here, or why no safe choice exists (the problem to report)."""
    euid = os.geteuid()
    if euid != 0:
        try:
            name = pwd.getpwuid(euid).pw_name
        except KeyError:
            name = str(euid)
        return SandboxIdentity(euid, os.getegid(), name, dropped=False)
    name = account_name()
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return (f"the service runs as root and the unprivileged user {name!r} that sandboxes run as does "
                "not exist: run scripts/install-native.sh as root (or: useradd --system --no-create-home "
                f"--home-dir /nonexistent --shell /usr/sbin/nologin --user-group {name})")
    if entry.pw_uid == 0 or entry.pw_gid == 0:
        return (f"the sandbox user {name!r} is privileged (uid {entry.pw_uid}, gid {entry.pw_gid}): "
                "use an unprivileged one")
    missing = [tool for tool in HELPERS if shutil.which(tool, path=SYSTEM_PATH) is None]
    if missing:
        return (f"a root service needs util-linux's {', '.join(missing)} to drop privileges "
                "(apt-get install util-linux mount)")
    return SandboxIdentity(entry.pw_uid, entry.pw_gid, name, dropped=True)


def helper(name: str) -> str:
    """The absolute path of a util-linux helper (sandbox_identity checked it exists)."""
    return shutil.which(name, path=SYSTEM_PATH) or name


class Relay:
    """Mount points in one world-traversable directory, made once per process and reused by
    every run (each run binds onto them in its own private mount namespace)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._root: Path | None = None

    def point(self, index: int, directory: bool) -> Path:
        with self._lock:
            if self._root is None or not self._root.is_dir():
                self._root = process_dir("relay", 0o755)
            path = self._root / f"{'d' if directory else 'f'}{index}"
            if not os.path.lexists(path):
                if directory:
                    path.mkdir(mode=0o755)
                else:
                    path.touch(mode=0o444)
            return path


relay = Relay()


class RelayPlan:
    """One run's relayed sources: each host path bwrap must mount, as a path the sandbox user
    can resolve. A path it can already reach is used as it is; else the highest directory
    above it from which the user can walk down to it is bound onto a relay point (one bind
    serves a workspace and its /tmp), or the path itself when even its parent is closed."""

    def __init__(self, identity: SandboxIdentity) -> None:
        self.identity = identity
        self.mounts: list[tuple[str, str]] = []
        """(host directory, relay point) for the launcher to bind."""
        self._points: dict[str, str] = {}

    def source(self, host: str) -> str:
        real = os.path.realpath(host)
        parent = os.path.dirname(real)
        if all(self._passable(d) for d in _ancestors(parent)):
            return real
        anchor = real
        if self._passable(parent):
            anchor = parent
            while anchor != "/" and self._passable(os.path.dirname(anchor)):
                anchor = os.path.dirname(anchor)
        point = self._points.get(anchor)
        if point is None:
            point = str(relay.point(len(self.mounts), os.path.isdir(anchor)))
            self._points[anchor] = point
            self.mounts.append((anchor, point))
        return point + real[len(anchor):]

    def _passable(self, directory: str) -> bool:
        """May the sandbox user (its own group, no other) search `directory`? (ACLs aside.)"""
        try:
            st = os.stat(directory)
        except OSError:
            return False
        if st.st_uid == self.identity.uid:
            return bool(st.st_mode & stat.S_IXUSR)
        if st.st_gid == self.identity.gid:
            return bool(st.st_mode & stat.S_IXGRP)
        return bool(st.st_mode & stat.S_IXOTH)


def _ancestors(directory: str) -> list[str]:
    """`directory` and every directory above it, up to /."""
    found = [directory]
    while directory != "/":
        directory = os.path.dirname(directory)
        found.append(directory)
    return found
