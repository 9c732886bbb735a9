"""The host-side prefix of a native run: it joins the run's cgroups, caps single-file size and,
for a root service, relays the mounts and drops to the sandbox user (identity.py), then execs
the rest of the command (bwrap).

One process where the C launcher (launch.c, built by c_helpers.py) is; a shell chain (sh,
unshare, mount per bind, setpriv) where no compiler could build it. Both do the same steps in
the same order and end with status 125 and a message when one fails.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from wasm_runner.providers.native.c_helpers import ensure_launcher
from wasm_runner.providers.native.identity import SandboxIdentity, helper

SETUP_GUARD = ' || { echo "wasm-runner: could not set up the run\'s limits" >&2; exit 125; }'


@dataclass(frozen=True)
class Drop:
    """A root service's drop to `identity` in a mount namespace of the run's own (with that
    `propagation`), after binding each (source, relay point) of `mounts`."""

    identity: SandboxIdentity
    mounts: Sequence[tuple[str, str]]
    propagation: str = "private"


def launch_prefix(*, file_bytes: int | None = None, joins: Sequence[tuple[str, str]] = (),
                  drop: Drop | None = None) -> list[str]:
    """The prefix (empty when there is nothing to do). `joins` are the cgroup files and the
    shell's values written into them (`RunCgroup.join_writes`)."""
    # ulimit -f counts 512-byte blocks: the same limit either way.
    blocks = max(file_bytes // 512 + 1, 1) if file_bytes is not None else None
    compiled = ensure_launcher()
    if compiled is not None:
        argv = [str(compiled)]
        if blocks is not None:
            argv += ["--fsize", str(blocks * 512)]
        for path, _ in joins:
            argv += ["--join", path]
        if drop is not None:
            argv += ["--mount-ns", drop.propagation]
            for source, point in drop.mounts:
                argv += ["--bind", source, point]
            argv += ["--user", str(drop.identity.uid), str(drop.identity.gid)]
        return argv + ["--"] if len(argv) > 1 else []
    setup = [f"ulimit -f {blocks}"] if blocks is not None else []
    setup += [f"echo {value} > {_quoted(path)}" for path, value in joins]
    if drop is not None:
        return _dropping_shell(setup, drop)
    if not setup:
        return []
    return ["/bin/sh", "-c", "{ " + " && ".join(setup) + "; }" + SETUP_GUARD + ' ; exec "$@"', "wasm-runner-launch"]


def _dropping_shell(setup: list[str], drop: Drop) -> list[str]:
    """Made anew for each run, so it shows the host's mounts as they are then; the binds are
    recursive, so a filesystem mounted below a source (a session's own) comes along.
    Propagation "slave" lets later binds onto a source reach the running sandbox (kernel slots)."""
    steps = []
    if setup:
        steps.append("{ " + " && ".join(setup) + "; }" + SETUP_GUARD)
    steps += ['n=$1; shift',
              f'while [ "$n" -gt 0 ]; do {helper("mount")} -n --rbind -- "$1" "$2" || {{ echo "wasm-runner: '
              'could not bind $1 for the sandbox" >&2; exit 125; }; shift 2; n=$((n-1)); done',
              f'exec {helper("setpriv")} --reuid={drop.identity.uid} --regid={drop.identity.gid} --clear-groups -- "$@"']
    args = [str(len(drop.mounts))]
    for source, point in drop.mounts:
        args += [source, point]
    return [helper("unshare"), "--mount", "--propagation", drop.propagation, "--",
            "/bin/sh", "-c", "; ".join(steps), "wasm-runner-launch", *args]


def _quoted(path: str) -> str:
    return "'" + path.replace("'", "'\\''") + "'"
