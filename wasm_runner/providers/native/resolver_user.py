"""Where the resolver (uv) runs: inside bubblewrap, as the native sandboxes' unprivileged user.

uv reads index pages a tenant may choose, so it gets what a native sandbox gets and no more: the
system's /usr read-only, a minimal /etc, its own PID, IPC and UTS namespaces, no capabilities, and a
private directory (the requirements file the host wrote, its HOME and a copy of the CA bundle) as its
/workspace. A root service starts it as `wasm-runner-sandbox` through the relay the sandboxes use
(identity.py), so uv's binary is reachable while the service's data directory (mode 0700: the package
cache, session files, signing secrets) stays closed, and nothing else of the host is mounted. It shares
the host's network namespace to reach the install's proxy on loopback, and its every connection goes
through that proxy (the host's environment for uv has no NO_PROXY), under the install policy.

Without a usable bubblewrap uv runs as that user, or as the service itself when it is not root; a root
service on a machine without that user runs uv as root and says so in its log (scripts/install-native.sh
creates the user). The Runner gives `as_resolver_user` to its PackageInstaller (packages/ does not
import providers/).
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from wasm_runner.guest import Mount
from wasm_runner.providers.native import bwrap
from wasm_runner.providers.native.egress import SYSTEM_BUNDLES
from wasm_runner.providers.native.identity import RelayPlan, SandboxIdentity, sandbox_identity
from wasm_runner.providers.native.launch import Drop, launch_prefix
from wasm_runner_protocol.guest import GUEST_WORKSPACE

log = logging.getLogger("wasm_runner")
_warned: list[str] = []
_SANDBOX_TMP = ".tmp"
"""The sandbox's /tmp, inside the resolution's private directory (gone with it)."""


def resolver_identity() -> SandboxIdentity | None:
    """The user to drop to (None: run as the service itself: it is not root, or no such user exists)."""
    identity = sandbox_identity()
    if isinstance(identity, str):
        if not _warned:
            _warned.append(identity)
            log.warning("the package resolver runs as root: %s", identity)
        return None
    return identity if identity.dropped else None


def usable_bwrap(identity: SandboxIdentity | None) -> str | None:
    """bubblewrap, when it can make a sandbox here (as `identity` when given)."""
    path = bwrap.find_bwrap()
    if path is None or bwrap.probe(path, (identity.uid, identity.gid) if identity is not None else None) is not None:
        return None
    return path


def as_resolver_user(command: list[str], home: Path, env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """`command` (uv, its arguments naming files in `home`) and `env` as they run in the resolver's sandbox."""
    identity = resolver_identity()
    sandbox = usable_bwrap(identity)
    if sandbox is None:
        return _dropped_only(command, home, env, identity)
    if "SSL_CERT_FILE" not in env:  # the sandbox's /etc has no bundle: a copy of the system's
        system = next((b for b in SYSTEM_BUNDLES if os.path.isfile(b)), None)
        if system is not None:
            env = {**env, "SSL_CERT_FILE": str(shutil.copyfile(system, home / "ca-bundle.pem"))}
    tmp = home / _SANDBOX_TMP
    tmp.mkdir(exist_ok=True)
    if identity is not None:
        for path in (home, *home.iterdir()):
            os.chown(path, identity.uid, identity.gid)

    def inside(text: str) -> str:  # the private directory is the sandbox's /workspace
        return GUEST_WORKSPACE + text[len(str(home)):] if text.startswith(str(home)) else text

    program = command[0]
    policy = bwrap.SandboxPolicy(network=True, binds=(Mount(Path(program), program),))
    variables = bwrap.sandbox_env(python_data=False, extra={k: inside(v) for k, v in env.items() if k != "PATH"})
    plan = RelayPlan(identity) if identity is not None else None
    argv = bwrap.argv(sandbox, policy, workspace=home, tmp=tmp, env=variables, command=[inside(a) for a in command],
                      relay=plan.source if plan is not None else None)
    if plan is not None and identity is not None:
        argv = launch_prefix(drop=Drop(identity, plan.mounts)) + argv
    return argv, {"PATH": "/usr/bin:/bin"}


def _dropped_only(command: list[str], home: Path, env: dict[str, str],
                  identity: SandboxIdentity | None) -> tuple[list[str], dict[str, str]]:
    """No sandbox here: uv as the sandbox user (its binary relayed), or as the service itself."""
    if identity is None:
        return command, env
    for path in (home, *home.iterdir()):
        os.chown(path, identity.uid, identity.gid)
    plan = RelayPlan(identity)
    program = plan.source(command[0]) if os.path.isabs(command[0]) else command[0]
    return launch_prefix(drop=Drop(identity, plan.mounts)) + [program, *command[1:]], env
