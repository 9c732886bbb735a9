"""Host side of the Python runtime: a componentize-py snapshot of CPython 3.14.

The component is built once from wasm_runner/_runtimes/python/guest (build key: the guest
sources and the builder version), then compiled once per engine settings.
A fresh execution instantiates the snapshot (about a millisecond); a kernel
keeps one instance, whose namespace persists between calls.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import importlib.util
import json
import logging
import os
import random
import shutil
import struct
import subprocess
import tempfile
import threading
from functools import partial
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import wasmtime
from wasmtime import component

from wasm_runner.capture import Capture
from wasm_runner.engine import EngineSettings, get_engine, load_compiled
from wasm_runner.engine.module_cache import cache_dir, compiled_path, load_file, sha256_file
from wasm_runner.errors import RuntimeUnavailableError
from wasm_runner.lowlevel.host_descriptors import HostDescriptors
from wasm_runner.lowlevel.string_call import StringCall
from wasm_runner.lowlevel.write_tracking import PAGE
from wasm_runner.manifests import load_manifest
from wasm_runner.providers.wasm import guest_http, guest_installs, guest_tools
from wasm_runner.providers.wasm.immortal_image import ImageSpan, ensure_immortal_copy, immortal_path
from wasm_runner.providers.wasm.kernel import Kernel, Runtime
from wasm_runner.providers.wasm.memory_reset import LinearMemory, instantiate_located, mapping_lock
from wasm_runner.providers.wasm.sandbox import (
    BASE_ENV,
    Call,
    Outcome,
    OutputRouter,
    View,
    close_later,
    engine_settings,
    guest_env,
    new_store,
    trap_outcome,
)
from wasm_runner.providers.wasm.spare_instances import SpareInstances, Unbound
from wasm_runner.snapshots.image import ImageRefused, KernelImage, SnapshotRefused, validity_key
from wasm_runner_protocol.execution import GuestError, Limits, RichOutput
from wasm_runner_protocol.guest import GUEST_WORKSPACE
from wasm_runner_protocol.packages import PACKAGES_GUEST_PATH

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger("wasm_runner")


class PythonRuntime(Runtime):
    language = "python"
    reuses_instances = True
    """A one-shot instance can be reset to new and serve again (see `PythonKernel.reset`)."""

    def __init__(self) -> None:
        self.manifest = load_manifest("python")
        self._lock = threading.Lock()
        self._built: tuple[Path, str] | None = None
        self._linkers: dict[EngineSettings, tuple[component.Linker, component.Component, Path]] = {}
        self._held_layouts: dict[EngineSettings, list[int] | None] = {}
        """Where the guest holds a call's output (see `HeldOutput`): the same in every instance."""
        self._spares = SpareInstances(self.new_instance)

    # -- preparation ---------------------------------------------------------

    def build(self) -> tuple[Path, str]:
        """Build the component (once per guest source), returning its path and sha256."""
        with self._lock:
            if self._built is None:
                self._built = self._build_locked()
            return self._built

    def _build_locked(self) -> tuple[Path, str]:
        guest = self.manifest.directory / self.manifest["guest"]
        builder_version = self.manifest["builder_version"]
        try:
            installed = version("componentize-py")
        except PackageNotFoundError:
            installed = None
        if installed != builder_version:
            raise RuntimeUnavailableError(
                f"the Python runtime needs componentize-py=={builder_version} (found {installed}); "
                "run `wasm-runner prepare` or `pip install --require-hashes -r wasm_runner/_runtimes/requirements.lock`"
            )
        tzdata = _tzdata_package(self.manifest["tzdata_version"])
        digest = hashlib.sha256(builder_version.encode() + json.dumps(BASE_ENV, sort_keys=True).encode()
                                + b"tzdata==" + self.manifest["tzdata_version"].encode())
        for path in sorted(guest.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(guest)).encode() + b"\0" + path.read_bytes())
        out = cache_dir() / f"python-{digest.hexdigest()[:24]}.wasm"
        sha_file = out.with_suffix(".sha256")
        with open(out.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one build across processes
            if not (out.exists() and sha_file.exists()):
                self._componentize(guest, out, sha_file, tzdata)
        return out, sha_file.read_text().strip()

    def _componentize(self, guest: Path, out: Path, sha_file: Path, tzdata: Path) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp) / "guest"
            shutil.copytree(guest, work, ignore=shutil.ignore_patterns("__pycache__"))
            # The driver keeps the time-zone database in the snapshot (zoneinfo reads it from there).
            shutil.copytree(tzdata, work / "tzdata", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            built = Path(tmp) / "python.wasm"
            exe = shutil.which("componentize-py") or "componentize-py"
            # A minimal environment: the snapshot keeps what the build's interpreter saw.
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": tmp, "LANG": "C.UTF-8",
                   "WASM_RUNNER_GUEST_ENV": json.dumps(BASE_ENV)}  # set in the snapshot, for runs to find
            proc = subprocess.run(
                [exe, "-d", "wit", "-w", self.manifest["world"], "componentize", "app", "-o", str(built)],
                cwd=work, capture_output=True, text=True, env=env,
            )
            if proc.returncode != 0:
                tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
                raise RuntimeError(f"building the Python runtime failed:\n{tail}")
            shutil.move(built, out.with_suffix(".tmp"))
            os.replace(out.with_suffix(".tmp"), out)
        # Builds are not byte-identical: the hash of *this* build pins what gets compiled.
        sha_file.write_text(sha256_file(out))

    def prepare(self, settings: EngineSettings | None = None) -> tuple[component.Linker, component.Component, Path]:
        """The linker, the compiled component and the file it is mapped from."""
        settings = settings or EngineSettings()
        with self._lock:
            ready = self._linkers.get(settings)
        if ready is not None:
            return ready
        wasm, sha = self.build()
        linker = component.Linker(get_engine(settings))
        linker.add_wasip2()
        with linker.root() as root:
            root.add_func(guest_installs.IMPORT_NAME, guest_installs.answer)
            root.add_func(guest_http.IMPORT_NAME, guest_http.answer)
            root.add_func(guest_tools.IMPORT_NAME, guest_tools.answer)
        plain = Path(os.path.realpath(compiled_path(sha, "component", settings)))
        immortal: Path | None = immortal_path(plain)
        if immortal is not None and not immortal.exists():
            original = load_compiled(wasm, sha, "component", settings)
            assert isinstance(original, component.Component)
            immortal = ensure_immortal_copy(plain, lambda: _snapshot_objects(linker, original, plain, settings))
        if immortal is not None:
            loaded, mapped_from = load_file(immortal, "component", settings), immortal
        else:
            loaded, mapped_from = load_compiled(wasm, sha, "component", settings), plain
        assert isinstance(loaded, component.Component)
        compiled = loaded
        layout = _ask_new_instance(linker, compiled, mapped_from, settings, {"held_layout": True})[0].get("held")
        with self._lock:
            self._held_layouts.setdefault(settings, layout)
            return self._linkers.setdefault(settings, (linker, compiled, mapped_from))

    def new_instance(self, settings: EngineSettings) -> Unbound:
        """A new instance, located, with no view yet (see `spare_instances`)."""
        linker, compiled, mapped_from = self.prepare(settings)
        store, interrupt = new_store(Limits(fuel=1 << 40) if settings.fuel else Limits(), settings)
        try:
            store.set_wasi(wasmtime.WasiConfig())
            interrupt.arm(store, 60.0)  # instantiation runs guest code too
            instance, located = instantiate_located(lambda: linker.instantiate(store, compiled), mapped_from)
        except BaseException:
            close_later(store, mapping_lock)
            raise
        return Unbound(store, interrupt, instance, located)

    def unbound_instance(self, settings: EngineSettings, restoring: bool = False) -> Unbound:
        """An instance to bind to a view: the one made ahead (for a restore: with the pages the
        last one laid written ahead), else a new one."""
        return self._spares.take(settings, restoring) or self.new_instance(settings)

    def spare_ready(self, settings: EngineSettings, restoring: bool = False) -> bool:
        """Whether the next kernel for these settings and this use starts on an instance made ahead."""
        return self._spares.ready(settings, restoring)

    def restores_laid(self, settings: EngineSettings, pages: np.ndarray) -> None:
        """A restore laid these pages (the next instances for restores write them ahead)."""
        self._spares.expect(settings, pages)

    def close(self) -> None:
        self._spares.close()

    def held_layout(self, settings: EngineSettings) -> list[int] | None:
        """(fill counts, stdout buffer, stderr buffer, size) in the guest's memory, once prepared."""
        with self._lock:
            return self._held_layouts.get(settings)

    # -- execution -----------------------------------------------------------

    def fresh(self, view: View, call: Call) -> Outcome:
        kernel = PythonKernel(self, view, call.limits)
        try:
            return kernel.run(call)
        finally:
            kernel.close()

    def new_kernel(self, view: View, limits: Limits, reusable: bool = False, restoring: bool = False) -> PythonKernel:
        """An instance; a `reusable` one can be reset to new after a one-shot run (one-shot runs
        have instances made ahead of their own, per scratch workspace: see `warm_pool`); a
        session's starts on a spare (see `spare_instances`)."""
        unbound = None if reusable else self.unbound_instance(engine_settings(limits), restoring)
        return PythonKernel(self, view, limits, reusable, unbound)


def _tzdata_package(pinned: str) -> Path:
    """The installed `tzdata` distribution's package directory, at the version the manifest pins."""
    try:
        installed: str | None = version("tzdata")
    except PackageNotFoundError:
        installed = None
    spec = importlib.util.find_spec("tzdata") if installed == pinned else None
    if spec is None or spec.origin is None:
        raise RuntimeUnavailableError(
            f"the Python runtime needs tzdata=={pinned} (found {installed}) for its time-zone database; "
            "run `wasm-runner prepare` or `pip install --require-hashes -r wasm_runner/_runtimes/requirements.lock`")
    return Path(spec.origin).parent


def _snapshot_objects(linker: component.Linker, compiled: component.Component, mapped_from: Path,
                      settings: EngineSettings) -> tuple[np.ndarray, ImageSpan] | None:
    """The addresses of the snapshot's objects (the guest lists them) and where its memory image lies."""
    import numpy as np  # prepare time only: a one-shot run does without it

    response, span = _ask_new_instance(linker, compiled, mapped_from, settings, {"snapshot_objects": True})
    if span is None:
        return None
    if "addresses" not in response:
        raise RuntimeError(f"the guest did not list its objects: {response.get('error')}")
    return np.frombuffer(base64.b64decode(response["addresses"]), "<u4"), span


def _ask_new_instance(linker: component.Linker, compiled: component.Component, mapped_from: Path,
                      settings: EngineSettings, request: dict[str, Any]) -> tuple[dict[str, Any], ImageSpan | None]:
    """The answer of a new instance, before any user code could run in it, to one call, and
    where its memory image lies (None where it is not located). Instantiated as every instance
    of the file is (`instantiate_located`), so that the others are still told apart."""
    store, interrupt = new_store(Limits(fuel=1 << 40) if settings.fuel else Limits(), settings)
    try:
        store.set_wasi(wasmtime.WasiConfig())
        interrupt.arm(store, 60.0)
        instance, memory = instantiate_located(lambda: linker.instantiate(store, compiled), mapped_from)
        func = instance.get_func(store, "run")
        assert func is not None, "the component exports run"
        run = StringCall(func, store)
        return json.loads(run(store, json.dumps(request))), memory.image_span if memory is not None else None
    finally:
        close_later(store, mapping_lock)


class HeldOutput:
    """The two buffers in which the guest holds a call's stdout and stderr (see the guest's
    standard streams), read from its linear memory once the call is over."""

    def __init__(self, memory: LinearMemory, fill: int, stdout: int, stderr: int, size: int) -> None:
        if not all(memory.holds(offset, length) for offset, length in ((fill, 8), (stdout, size), (stderr, size))):
            raise ValueError("the guest placed its held output outside its linear memory")
        self._memory, self._fill, self._buffers, self._size = memory, fill, (stdout, stderr), size

    def deliver(self, stdout: Capture, stderr: Capture) -> None:
        """Hand each capture what its buffer holds. The fill counts are the guest's (a run can
        rewrite them): read no further than the buffer, nor than the capture's room, which a
        guest that holds output honestly never passes."""
        fills = struct.unpack("<II", self._memory.read(self._fill, 8))
        for capture, buffer, fill in zip((stdout, stderr), self._buffers, fills, strict=True):
            length = min(fill, self._size, capture.room)
            if length:
                capture.write(self._memory.read(buffer, length))


def _held_output(memory: LinearMemory | None, layout: list[int] | None) -> HeldOutput | None:
    if memory is None or layout is None:
        return None
    try:
        return HeldOutput(memory, *layout)
    except (TypeError, ValueError):
        log.warning("the Python guest's held output is unusable; its output goes through WASI", exc_info=True)
        return None


MAX_REUSES = 1000
"""One-shot runs an instance serves before it is replaced, on average: a bound on whatever a
guest could leave on the host side unseen (none is known: the process's memory stays flat
over thousands of reuses of one instance). Each instance draws its own number between half
and one and a half times this, so that instances made together are not all replaced at
once (a new one costs 15-30 ms of a core under load, and the runs beside it wait)."""


class PythonKernel(Kernel):
    """One live interpreter instance; calls run one at a time."""

    runs_tests = True
    """A call may carry the check harness's tests: the guest runs them after the program."""

    def __init__(self, runtime: PythonRuntime, view: View, limits: Limits, reusable: bool = False,
                 unbound: Unbound | None = None) -> None:
        self.settings = engine_settings(limits)
        self._runtime = runtime
        _, _, mapped_from = runtime.prepare(self.settings)
        if unbound is None:
            unbound = runtime.new_instance(self.settings)
        self.store, self.interrupt, instance, located = unbound.store, unbound.interrupt, unbound.instance, unbound.located
        self.store.set_limits(memory_size=limits.memory_bytes)
        if limits.fuel is not None:
            self.store.set_fuel(limits.fuel)
        self.router = OutputRouter()
        wasi = wasmtime.WasiConfig()
        wasi.argv = ["python"]
        wasi.env = list(guest_env({}).items())
        self.router.attach(wasi)
        view.configure(wasi)
        self.store.set_wasi(wasi)  # bound now: the guest has not asked for its resources yet
        self._located = located
        """The linear memory, where it was found (snapshots need it)."""
        self.key = validity_key("python", mapped_from.name, self.settings.cache_key(), view.preopens)
        self._reseed = False
        """The next call reseeds the guest's `random` (the first after a restore)."""
        self._memory = located if reusable else None
        """The memory to reset after a one-shot run (None: not reused)."""
        self._scratch = HostDescriptors((view.workspace, view.tmp)) if self._memory is not None else None
        """What the process holds open below the scratch directories, seen from the host."""
        self._held = _held_output(located, runtime.held_layout(self.settings))
        """Where the guest holds a call's output for the host (None: it writes through WASI)."""
        self._holding: Call | None = None
        """The call whose output the held buffers are, while it runs (under `_holding_lock`)."""
        self._holding_lock = threading.Lock()
        func = instance.get_func(self.store, "run")
        assert func is not None, "the Python component exports no `run`"
        self._run = StringCall(func, self.store)
        self._fd_base = 5 + len(view.mounts)  # stdio, workspace, tmp, mounts: the guest's first free descriptor
        self._packages = next((m.host for m in view.mounts if m.guest == PACKAGES_GUEST_PATH), None)
        """The session's package directory, whose version (mtime) each call passes to the guest."""
        self.usable = True
        self.reuses = 0
        self._retire_after = random.randint(MAX_REUSES // 2, MAX_REUSES * 3 // 2)
        self.warmed = False
        """Calls start warm: `warm` ran, and resets restore the state it left."""
        self._descriptors_changed = True
        """The last run may have opened or closed a descriptor (what a one-shot reset checks)."""
        self._probe_due = True
        """A run may have changed the descriptors since a probe last found none held open (what a
        snapshot checks: a file held open stays held across later runs that report no change)."""
        self._untouched = True
        """No user code ran since instantiation or the last reset."""

    @property
    def keeps_warmth(self) -> bool:
        """Whether a warm-up lasts for every run the instance serves (resets restore it)."""
        return self._memory is not None

    def warm(self) -> None:
        """Do the first call's set-up now (page faults, preopens, caches) so that a later
        call is quick; a reusable instance keeps the state it leaves as the one to reset to."""
        self.interrupt.arm(self.store, 10.0)
        self._run(self.store, json.dumps({"warm": True, "env": guest_env({}), "fd_base": self._fd_base}))
        self._run.post_return(self.store)
        if self._memory is not None and self._untouched:
            try:
                self._memory.keep()
            except OSError:
                log.warning("could not keep a warmed-up Python instance's state; it will not be reused",
                            exc_info=True)
                self._memory = None
        self.warmed = True

    def accepts(self, limits: Limits) -> bool:
        return self.usable and engine_settings(limits) == self.settings

    def reset(self) -> bool:
        """Make the instance as new for another one-shot run: its memory is restored to the
        state after instantiation (or after `warm`). False (and the instance must be closed)
        when it cannot be: the run trapped, grew memory, left a file open (one removed from the
        scratch directories is told by the host's own descriptors, one still there by the
        workspace's scan) or closed a standard stream or preopen (the guest reports it: a
        reason not to reuse, never one to), or the instance has served enough."""
        if (not self.usable or self._descriptors_changed or self._memory is None or self._scratch is None
                or self.reuses >= self._retire_after):
            return False
        try:
            # The host's own view of what the run left open, after the reset: the scan costs
            # less then than right after a run (a refusal, rare, wastes the reset). The handle
            # probe runs the restored driver, so its own writes are restored once more: the
            # next run starts from the warmed-up state exactly.
            if (not self._memory.reset() or self._scratch.hold_removed() or not self._handles_intact()
                    or not self._memory.reset()):
                return False
        except OSError:
            log.warning("could not reset a Python instance; instances will not be reused", exc_info=True)
            self._memory = None
            return False
        self.reuses += 1
        self._descriptors_changed = True  # until the next run reports otherwise
        self._untouched = True
        return True

    def _handles_intact(self) -> bool:
        """After a reset, the restored driver touches the streams and preopens: a run that closed
        or replaced one (whatever its own driver reported) leaves a handle that traps or differs."""
        self.interrupt.arm(self.store, 5.0)
        try:
            raw = self._run(self.store, json.dumps({"probe_descriptors": self._fd_base}))
            self._run.post_return(self.store)
        except Exception:  # noqa: BLE001 - a trap: the handle is gone, the instance with it
            self.usable = False
            return False
        return json.loads(raw).get("intact") is True

    def run(self, call: Call) -> Outcome:
        limits = call.limits
        self.router.stdout, self.router.stderr = call.stdout, call.stderr
        self.store.set_limits(memory_size=limits.memory_bytes)
        if limits.fuel is not None:
            self.store.set_fuel(limits.fuel)
        request = {"code": call.code, "stdin": call.stdin, "env": guest_env(call.env), "timeout_s": limits.timeout_s}
        if self._memory is not None or self.warmed:  # the guest reports the descriptors a run changed
            request["fd_base"] = self._fd_base
        if self._packages is not None:
            try:
                request["packages"] = [PACKAGES_GUEST_PATH, os.stat(self._packages).st_mtime_ns]
            except OSError:
                pass
        if call.filename:
            request["filename"] = call.filename
        if call.cwd != GUEST_WORKSPACE:  # (the driver goes back to /workspace when none is named)
            request["cwd"] = call.cwd
        if call.tests is not None:
            request["tests"] = call.tests
        if self._reseed:
            request["reseed"], self._reseed = True, False
        held = self._held if not (call.stdout.streams or call.stderr.streams) else None
        if held is not None:
            request["hold"] = [call.stdout.room, call.stderr.room]
        call.bind(self.interrupt, self.store)
        call.collect = self.router.flush if held is None else partial(self._collect_held, held, call)
        self._holding = call
        self._untouched = False
        try:
            raw = self._run(self.store, json.dumps(request))
            self._run.post_return(self.store)
        except Exception as exc:  # a trap: deadline, fuel, stack, crash
            self.usable = False
            outcome = trap_outcome(exc, self.interrupt)
        else:
            response = json.loads(raw)
            self._descriptors_changed = response.get("descriptors_changed", True)
            self._probe_due = self._probe_due or self._descriptors_changed
            outcome = _outcome(response)
        finally:
            self.router.stdout = self.router.stderr = None
            if held is not None:  # after what reached the host during the call
                with self._holding_lock:
                    held.deliver(call.stdout, call.stderr)
                    self._holding = None
        if limits.fuel is not None:
            outcome.fuel_used = limits.fuel - self.store.get_fuel()
        return outcome

    def _collect_held(self, held: HeldOutput, call: Call) -> None:
        """What a call given up has printed: through WASI, and held in the guest's memory. Once the
        call is over its held output was delivered, and the memory may be reset, reused or unmapped
        (a watchdog that gave the call up reads no further than this check)."""
        self.router.flush()
        with self._holding_lock:
            if self._holding is call:
                held.deliver(call.stdout, call.stderr)

    def close(self) -> None:
        self.usable = False
        close_later(self.store, mapping_lock)

    # -- snapshots -----------------------------------------------------------

    def capture(self) -> KernelImage:
        """The kernel's state at rest: the memory pages that differ from a new instance's. The
        interpreter keeps no state outside its linear memory that a restore must bring back:
        at rest its stack pointer is back at its start and its other globals are fixed at
        build time (the restore tests check a restored kernel against its original), and its
        host resources are the standard streams and preopens, which a new instance of the same
        view obtains in the same order (the warm-up call). A descriptor a cell left open is
        not such a resource: the capture is refused, naming it."""
        import numpy as np

        image = self.checkpoint(probe=True)
        order = np.argsort(image.pages)  # the checkpoint's in no order; the copies in page order
        return KernelImage(image.language, image.key, image.memory_size, image.pages[order], image.data[order],
                           image.page_size)

    def checkpoint(self, probe: bool = False) -> KernelImage:
        """`capture` without copying (valid until the next call): what a call that fails is rolled
        back to. Open descriptors are probed when a run may have changed them since the last probe
        that found none held (that record answers `probe` too: a probe is a guest call, 1 ms)."""
        if not self.usable or self._located is None:
            raise SnapshotRefused("this kernel's memory cannot be read (it was lost, or not located)")
        if self._probe_due:
            self.interrupt.arm(self.store, 5.0)
            raw = self._run(self.store, json.dumps({"open_descriptors": self._fd_base}))
            self._run.post_return(self.store)
            held = json.loads(raw).get("open", [])
            if held:
                named = ", ".join("a standard stream or preopen was closed" if fd < 0 else str(fd) for fd in held)
                raise SnapshotRefused(f"the kernel holds files open (descriptors {named}), which a snapshot "
                                      "cannot carry: close them (`with open(...)`) and the next one can be taken")
            self._probe_due = False
        size, pages, data = self._located.checkpoint()
        return KernelImage("python", self.key, size, pages, data, PAGE)

    def restore(self, image: KernelImage) -> None:
        """Become the kernel `image` was taken of (on a new instance, before any call)."""
        if image.key != self.key:
            raise ImageRefused("the snapshot was made for another runtime or view")
        if self._located is None:
            raise ImageRefused("this instance's memory was not located: it cannot take a snapshot")
        if not self.warmed:  # the streams and preopens, obtained as the original's warm-up did (only that)
            self.interrupt.arm(self.store, 10.0)
            self._run(self.store, json.dumps({"warm": True, "handles_only": True, "env": guest_env({}),
                                              "fd_base": self._fd_base}))
            self._run.post_return(self.store)
            self.warmed = True  # the pages laid next are the original's warmed-up state
        for _ in range(8):  # grown by the guest's own allocator: the host cannot grow a component's memory
            missing = image.memory_size - self._located.current_size()
            if missing <= 0:
                break
            self.interrupt.arm(self.store, 10.0)
            raw = self._run(self.store, json.dumps({"code": f"_wasm_runner_grow = [bytearray({missing})]",
                                                    "env": guest_env({})}))
            self._run.post_return(self.store)
            if json.loads(raw).get("error"):
                raise ImageRefused(f"the snapshot needs {image.memory_size >> 20} MiB of memory, more than "
                                   "this kernel's limit: restore it under a larger limits.memory_bytes")
        else:
            raise ImageRefused("the kernel's memory could not be grown to the snapshot's size")
        self._located.restore(image.pages, image.data)
        self._runtime.restores_laid(self.settings, image.pages)
        self._located.adopt_checkpoint(self._located.current_size(), image.pages, image.data)
        # The pages hold the original's record of its preopens (their host inodes): in another directory
        # (a fork's, a session moved to another node) they differ, and the first file a cell opened would
        # make every later capture refused as "a preopen was closed". The warm-up's first step takes that
        # record again, from this instance's own descriptors (its handles are the ones obtained already),
        # after the checkpoint is adopted, so that the pages it writes count as written since.
        self.interrupt.arm(self.store, 10.0)
        self._run(self.store, json.dumps({"warm": True, "handles_only": True, "fd_base": self._fd_base}))
        self._run.post_return(self.store)
        self._probe_due = False  # the image was taken with none held
        self._reseed = True


def _outcome(response: dict[str, Any]) -> Outcome:
    error = response.get("error")
    outcome = Outcome(exit_code=response.get("exit_code", 0), value=response.get("value"), phase=response.get("phase"))
    outputs = response.get("outputs")
    if outputs:
        try:
            outcome.outputs = msgspec.convert(outputs, list[RichOutput])
        except msgspec.ValidationError:
            pass  # the guest's own report, malformed: the call's outputs are left out
    if error is not None:
        outcome.error = GuestError(type=error["type"], message=error["message"], traceback=error.get("traceback", ""),
                                   line=error.get("line"), source=error.get("source"))
        if error["type"] == "MemoryError":
            outcome.limit = "memory"
    return outcome
