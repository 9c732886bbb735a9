"""Native kernels made ahead: sandboxes that already imported the data stack, bound to a session once.

Importing numpy, pandas and matplotlib takes about a second and a half; a session's first call
should not wait for it. So the provider keeps a few kernels started ahead, each in a sandbox of
its own whose /workspace, /tmp and /packages are empty *slot* directories, and gives one to the
first call of a session: the host then binds the session's directories onto the slots (its
package directory read-only), and the binds propagate into the running sandbox (the driver
changes into /workspace again at each call). A kernel made ahead serves one session only, for
its whole life, and is killed with it: no kernel ever sees two sessions' files, packages or state.

The binds happen in a mount namespace of the provider's own, held by a small process (the
*holder*, a slave of the host's mounts, so session directories made later are visible in it):
the slots are shared mounts there, each sandbox's launcher is a slave of it, and the host's
mount table is never touched. This needs root (a root service drops to its sandbox user
anyway); elsewhere kernels start on a session's first call.
"""

from __future__ import annotations

import logging
import os
import select
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from wasm_runner.errors import WasmRunnerError
from wasm_runner.packages.session_dir import SessionPackages
from wasm_runner.providers.native.identity import SandboxIdentity, helper
from wasm_runner.providers.native.kernel import KernelError, KernelKey, NativeKernel
from wasm_runner.providers.native.package_env import VENV_NAME
from wasm_runner.workspace.layout import Workspace
from wasm_runner.workspace.process_dirs import process_dir
from wasm_runner_protocol.guest import GUEST_WORKSPACE

log = logging.getLogger("wasm_runner.native")

MOUNT_TIMEOUT_S = 10.0


class MountError(WasmRunnerError):
    """A bind in the holder's namespace failed."""


class MountHolder:
    """A process holding the provider's own mount namespace; it ends when the provider's pipe closes."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [helper("unshare"), "--mount", "--propagation", "slave", "--", "/bin/sh", "-c", "echo ready && read -r _"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env={"PATH": "/usr/bin:/bin"}, close_fds=True)
        # Until `unshare` has made the namespace, /proc/PID/ns/mnt is the service's own: a bind
        # entered there would land in the host's mount table, never to be removed, and slow
        # down every later sandbox's start (each copies the whole table).
        assert self.proc.stdout is not None
        started = select.select([self.proc.stdout], [], [], MOUNT_TIMEOUT_S)[0]
        if not started or self.proc.stdout.readline() != b"ready\n" or not self._own_namespace():
            self.close()
            raise MountError("could not make the kernel pool's own mount namespace")

    def _own_namespace(self) -> bool:
        try:
            return os.readlink(self.namespace) != os.readlink("/proc/self/ns/mnt")
        except OSError:
            return False

    @property
    def namespace(self) -> str:
        return f"/proc/{self.proc.pid}/ns/mnt"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def enter(self) -> list[str]:
        """A command prefix that runs the rest of the command in the holder's namespace."""
        return [helper("nsenter"), f"--mount={self.namespace}", "--"]

    def run(self, script: str, *args: str) -> None:
        """Run a /bin/sh script (its arguments in "$@") in the holder's namespace."""
        done = subprocess.run([*self.enter(), "/bin/sh", "-c", script, "wasm-runner-mount", *args],
                              capture_output=True, timeout=MOUNT_TIMEOUT_S, env={"PATH": "/usr/bin:/bin"}, check=False)
        if done.returncode != 0:
            raise MountError(done.stderr.decode(errors="replace").strip() or f"exit status {done.returncode}")

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class Slot:
    """The empty /workspace, /tmp and /packages a kernel is made with, shared mounts in the holder's
    namespace (the packages one laid out as a session's, `SessionPackages`, so the sandbox mounts it
    as it mounts a session's)."""

    def __init__(self, holder: MountHolder, parent: Path, identity: SandboxIdentity) -> None:
        self.holder = holder
        self.workspace = Workspace(Path(tempfile.mkdtemp(prefix="slot-", dir=parent)))
        self.workspace.ensure()
        self.packages = SessionPackages(self.workspace.root)
        self.packages.ensure()
        self._read_only_source = self.workspace.root / "packages-source"
        """Where the session's package directory is first bound read-only (not shared): its bind onto
        the shared slot, and the copy that propagates into the sandbox, keep that flag."""
        self._read_only_source.mkdir()
        self.venv = self.workspace.internal / VENV_NAME
        """Where a session's venv is bound (the sandbox's GUEST_VENV)."""
        self.venv.mkdir(parents=True)
        for path in (self.workspace.root, self.workspace.files, self.workspace.tmp, self.packages.directory,
                     self.workspace.internal, self.venv):
            path.chmod(0o755)
        for path in (self.workspace.files, self.workspace.tmp, self.venv):
            os.chown(path, identity.uid, identity.gid)
        mount = helper("mount")
        holder.run(f'for d in "$@"; do {mount} --bind "$d" "$d" && {mount} --make-shared "$d" || exit 1; done',
                   str(self.workspace.files), str(self.workspace.tmp), str(self.packages.directory), str(self.venv))
        self.bound: Workspace | None = None

    def bind(self, workspace: Workspace, packages: Path | None = None, venv: Path | None = None) -> None:
        """Show `workspace`, read-only its `packages` directory, and its `venv`, in the sandbox made on
        this slot (once: a slot serves one session)."""
        assert self.bound is None
        mount = helper("mount")
        self.holder.run(f'{mount} --bind -- "$1" "$2" && {mount} --bind -- "$3" "$4"',
                        str(workspace.files), str(self.workspace.files), str(workspace.tmp), str(self.workspace.tmp))
        if packages is not None:
            self.holder.run(f'{mount} --bind -- "$1" "$2" && {mount} -o remount,bind,ro -- "$2" && '
                            f'{mount} --bind -- "$2" "$3"',
                            str(packages), str(self._read_only_source), str(self.packages.directory))
        if venv is not None:
            self.holder.run(f'{mount} --bind -- "$1" "$2"', str(venv), str(self.venv))
        self.bound = workspace

    def remove(self) -> None:
        """Unbind (in the holder's namespace) and remove the slot; in the service's own namespace
        the slot never showed a session's files, so removing it there touches none of them."""
        if self.holder.alive():
            try:
                self.holder.run(f'for d in "$@"; do while {helper("umount")} -l "$d" 2>/dev/null; do :; done; done',
                                str(self.workspace.files), str(self.workspace.tmp), str(self.packages.directory),
                                str(self._read_only_source), str(self.venv))
            except (MountError, OSError, subprocess.SubprocessError) as exc:
                log.warning("could not unmount a kernel slot: %s", exc)
        shutil.rmtree(self.workspace.root, ignore_errors=True)


KernelFactory = Callable[[Workspace, KernelKey, MountHolder, Callable[[], None]], NativeKernel]
"""Starts a kernel on a slot's workspace (its package directory at /packages) for a key, in the
holder's namespace, calling the last argument once the kernel is closed (the provider's sandbox
command)."""


class KernelPool:
    """Keeps `size` kernels made ahead for the key of the last call that wanted one."""

    def __init__(self, size: int, identity: SandboxIdentity, make: KernelFactory) -> None:
        self.size = size
        self.identity = identity
        self._make = make
        self._lock = threading.Lock()
        self._ready: list[tuple[NativeKernel, Slot]] = []
        self._making = 0
        self._want: KernelKey | None = None
        self._holder: MountHolder | None = None
        self._parent: Path | None = None
        self.broken: str | None = None
        """Why kernels cannot be made ahead here (then sessions start theirs on first call)."""
        self._closed = False

    def fill(self, key: KernelKey) -> None:
        """Make kernels for `key` in the background until `size` are ready."""
        with self._lock:
            if self._closed or self.broken is not None:
                return
            if key != self._want:
                self._want = key
                stale, self._ready = self._ready, []
            else:
                stale = []
            missing = self.size - len(self._ready) - self._making
            self._making += max(missing, 0)
        for kernel, _ in stale:
            kernel.close()
        for _ in range(max(missing, 0)):
            threading.Thread(target=self._make_one, args=(key,), name="wasm-runner-kernel-ahead", daemon=True).start()

    def ready_count(self) -> int:
        with self._lock:
            return len(self._ready)

    def take(self, key: KernelKey, workspace: Workspace, packages: Path | None = None,
             venv: Path | None = None) -> NativeKernel | None:
        """A ready kernel for `key`, bound to `workspace`, its `packages` directory and its `venv`
        (None: none ready, start one now)."""
        with self._lock:
            found = next((pair for pair in self._ready if pair[0].key == key and not pair[0].closed), None)
            if found is not None:
                self._ready.remove(found)
        kernel = found[0] if found is not None else None
        if found is not None and kernel is not None:
            try:
                found[1].bind(workspace, packages, venv)
                if not _shows(kernel, workspace.files):
                    raise MountError("its sandbox does not show the session's files after the bind")
            except (MountError, OSError, subprocess.SubprocessError) as exc:
                log.warning("could not bind a session to a kernel made ahead (one is started for it): %s", exc)
                kernel.close()
                kernel = None
        self.fill(key)
        return kernel

    def _make_one(self, key: KernelKey) -> None:
        kernel: NativeKernel | None = None
        slot: Slot | None = None
        try:
            holder, parent = self._namespace()
            slot = Slot(holder, parent, self.identity)
            kernel = self._make(slot.workspace, key, holder, slot.remove)
        except (KernelError, MountError, OSError, subprocess.SubprocessError) as exc:
            with self._lock:
                closing = self._closed  # the pool's namespace went away under it: nothing to report
                if not closing:
                    self.broken = str(exc)
            if not closing:
                log.warning("could not make a native kernel ahead: %s", exc)
            if slot is not None:
                slot.remove()
        finally:
            with self._lock:
                self._making -= 1
                keep = kernel is not None and slot is not None and not self._closed and key == self._want
                if keep and kernel is not None and slot is not None:
                    self._ready.append((kernel, slot))
        if kernel is not None and not keep:
            kernel.close()

    def _namespace(self) -> tuple[MountHolder, Path]:
        with self._lock:
            if self._holder is None or not self._holder.alive():
                self._holder = MountHolder()
            if self._parent is None:
                self._parent = process_dir("slots", 0o755)
            return self._holder, self._parent

    def close(self) -> None:
        with self._lock:
            self._closed = True
            ready, self._ready = self._ready, []
        for kernel, _ in ready:
            kernel.close()
        if self._holder is not None:
            self._holder.close()
        if self._parent is not None:
            shutil.rmtree(self._parent, ignore_errors=True)


def _shows(kernel: NativeKernel, files: Path) -> bool:
    """Whether the kernel's sandbox has `files` at /workspace, as the host sees it through the
    sandbox's root (the driver's word is not needed, nor trusted)."""
    if kernel.init_pid is None:
        return False
    try:
        inside, own = os.stat(f"/proc/{kernel.init_pid}/root{GUEST_WORKSPACE}"), os.stat(files)
    except OSError:
        return False
    return (inside.st_dev, inside.st_ino) == (own.st_dev, own.st_ino)
