"""The user the resolver (uv) runs as: never root.

A root service runs uv as the native sandboxes' unprivileged user (`wasm-runner-sandbox`), in a
private mount namespace through the same relay the sandboxes use (identity.py):
the interpreter and uv, below a directory that user cannot enter, are bound onto a world-traversable
relay point; the resolution's own directory is given to that user. The service's data directory
(mode 0700: the package cache, session files, signing secrets) stays closed to it. A service that
is not root runs uv as itself. A root service on a machine without that user runs uv as root and
says so in its log (scripts/install-native.sh creates the user).

The Runner gives `as_resolver_user` to its PackageInstaller (packages/ does not import providers/).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from wasm_runner.providers.native.identity import RelayPlan, SandboxIdentity, dropping_launcher, sandbox_identity

log = logging.getLogger("wasm_runner")
_warned: list[str] = []


def resolver_identity() -> SandboxIdentity | None:
    """The user to drop to (None: run as the service itself: it is not root, or no such user exists)."""
    identity = sandbox_identity()
    if isinstance(identity, str):
        if not _warned:
            _warned.append(identity)
            log.warning("the package resolver runs as root: %s", identity)
        return None
    return identity if identity.dropped else None


def as_resolver_user(command: list[str], home: Path, programs: frozenset[str]) -> list[str]:
    """`command` run as the sandbox user (when the service is root), with `home` (and what is in it) given
    to that user and the arguments in `programs` (the executables: uv, the interpreter it asks) made
    reachable through the relay; no other path is relayed. `command` itself when there is no one to drop to."""
    identity = resolver_identity()
    if identity is None:
        return command
    for path in (home, *home.iterdir()):
        os.chown(path, identity.uid, identity.gid)
    plan = RelayPlan(identity)
    argv = [plan.source(arg) if arg in programs and os.path.isabs(arg) else arg for arg in command]
    return dropping_launcher([], plan.mounts, identity) + argv
