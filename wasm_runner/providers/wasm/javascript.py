"""Host side of the JavaScript runtime: QuickJS-NG as a WASI preview1 reactor module.

The pinned artifact (`qjs-wasi-reactor.wasm` 0.17.0) exports only `qjs_init_argv`,
`qjs_get_context` and `qjs_destroy`: enough to start an interpreter and evaluate one
script, but not to evaluate again, nor to run the event loop (timers, promises) after
it. So the host derives a module from it (`derive_module`, deterministic, checked
against the name section): a few of QuickJS's own functions exported (`JS_Eval`,
`js_std_await`, ...) and four small functions added (run all pending jobs; report a
callback's error to the driver; a promise rejection tracker; stdout/stderr writes to
the host). Debug sections are dropped.

It then starts that module once (`qjs --std -e wasm_runner/_runtimes/javascript/driver.js`) and
keeps the result as a pre-initialised snapshot (`snapshot_module`, like Wizer: memory
image and globals become the module's data), cached next to the compiled modules.
Every instance starts from the snapshot: instantiation is copy-on-write, and a fresh
`console.log(1+1)` takes about 2 ms end to end.

Each execution is one *turn*: the host evaluates `__wasm_runner.turn(<request>)` and
awaits the returned promise with `js_std_await`, QuickJS's event loop. Promise jobs
all run before the next timer; the turn ends when no job, timer or I/O is left.

The host implements WASI's `poll_oneoff` (the rest is wasmtime's WASI): it sleeps at
most until the call's deadline, so a guest blocked in `os.sleep`, or waiting for a far
timer, still ends there (`limit="timeout"`); it tells the driver when the program is
idle; and it receives stdout/stderr writes, which land synchronously in the call's
captures (wasmtime's custom stdout callbacks run on its own threads, and
wasmtime-py's registration of them crashed about one process exit in three here).

A fresh execution is a new instance per call; a kernel keeps one instance, whose
global scope persists between calls: top-level `let`/`const`/`class`/`var`/`function`
of script cells (a cell cannot redeclare a `let`/`const` name: SyntaxError, the
kernel lives on). Cells with `import`/`export` run as modules, whose top-level
bindings are module-scoped and do not persist (assign to `globalThis` to keep them).
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import json
import os
import struct
import threading
import time
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import wasmtime

from wasm_runner.capture import Capture
from wasm_runner.engine import EngineSettings, get_engine, load_compiled
from wasm_runner.engine.module_cache import cache_dir
from wasm_runner.errors import RuntimeUnavailableError
from wasm_runner.lowlevel import WASMTIME_VERSION
from wasm_runner.lowlevel.capi import (
    I32,
    I64,
    Val,
    ValRaw,
    context_address,
    export_get,
    func_handle,
    memory_handle,
    new_trap,
    raw_function,
    set_stdin_bytes,
    store_context,
    take_error,
    take_trap,
)
from wasm_runner.lowlevel.write_tracking import PAGE
from wasm_runner.manifests import load_manifest
from wasm_runner.providers.wasm import guest_http, guest_tools
from wasm_runner.providers.wasm.kernel import Kernel, Runtime
from wasm_runner.providers.wasm.quickjs_module import (
    DERIVE_VERSION,
    EXPORTED_FUNCTIONS,
    HOOKS,
    HOOKS_SIZE,
    HTTP_FD,
    JS_TAG_EXCEPTION,
    JS_TAG_UNINITIALIZED,
    JS_UNDEFINED,
    STACK_POINTER,
    STDIO_WRITE,
    derive_module,
    snapshot_module,
)
from wasm_runner.providers.wasm.sandbox import (
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
from wasm_runner.snapshots.image import ImageRefused, KernelImage, SnapshotRefused, validity_key
from wasm_runner_protocol.execution import GuestError, Limits
from wasm_runner_protocol.guest import GUEST_WORKSPACE

if TYPE_CHECKING:
    import numpy as np

# ----------------------------------------------------------------------------
# Guest ABI constants.

HOST_FD = 1_000_000
"""Descriptor the driver polls for readability; only the host's poll_oneoff knows it."""

ERRNO_SUCCESS, ERRNO_BADF, ERRNO_FAULT, ERRNO_INVAL, ERRNO_IO = 0, 8, 21, 28, 29
EVENTTYPE_CLOCK, EVENTTYPE_FD_READ, EVENTTYPE_FD_WRITE = 0, 1, 2
SUBSCRIPTION_SIZE = 48
CLOCK_REALTIME, SUBSCRIPTION_CLOCK_ABSTIME = 0, 1
U32 = 0xFFFFFFFF

SNAPSHOT_VERSION = "1"
"""Bump when what a snapshot contains changes (the driver's source is hashed in already)."""
SLEEP_SLICE_S = 0.02
"""A sleeping guest notices cancellation (or an output stop) within this time."""
MAX_VALUE_CHARS = 100_000
"""Longest `Outcome.value` kept (the REPL view of the last expression)."""

_tls = threading.local()

_memory_data = raw_function("wasmtime_memory_data", ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_memory_data_size = raw_function("wasmtime_memory_data_size", ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p)
_caller_context = raw_function("wasmtime_caller_context", ctypes.c_void_p, ctypes.c_void_p)
_func_call = raw_function("wasmtime_func_call", ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                          ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)


def _tag(value: int) -> int:
    return value >> 32  # NaN-boxed JSValue: the tag is the (signed) high word


class _Fault(Exception):
    """A guest pointer outside its memory."""


class _DriverFailed(Exception):
    """The driver's turn itself threw (the error is on stderr)."""


class _Fn:
    """A guest export called straight through the C API (wasmtime-py's `Func.__call__` costs ~10 µs).

    Called with the address of a store context: the store's own, or a caller's
    (from inside a host function).
    """

    __slots__ = ("_handle", "_kinds", "_params", "_results", "_trap", "_call_args", "_nresults", "_result_i64", "_guest")

    def __init__(self, guest: _Guest, func: wasmtime.Func, params: tuple[str, ...], results: tuple[str, ...]) -> None:
        self._guest = guest
        self._handle = func_handle(func)  # kept alive: the call below uses its address
        self._kinds = tuple(kind == "i64" for kind in params)
        self._params = (Val * max(1, len(params)))()
        for i, is_i64 in enumerate(self._kinds):
            self._params[i].kind = I64 if is_i64 else I32  # type: ignore[assignment]  # (ctypes takes the int)
        self._results = (Val * max(1, len(results)))()
        self._trap = ctypes.c_void_p()
        self._call_args = (ctypes.addressof(self._handle), ctypes.addressof(self._params), len(params),
                           ctypes.addressof(self._results), len(results), ctypes.addressof(self._trap))
        self._nresults = len(results)
        self._result_i64 = results == ("i64",)

    def __call__(self, cx: int, *args: int) -> int:
        """The export's result (0 for one without a result)."""
        params = self._params
        for i, arg in enumerate(args):
            if self._kinds[i]:
                params[i].of.i64 = arg
            else:
                params[i].of.i32 = arg
        self._trap.value = None
        error = _func_call(cx, *self._call_args)
        if error or self._trap.value:
            self._guest.raise_failure(error, self._trap.value)
        if self._nresults:
            return int(self._results[0].of.i64 if self._result_i64 else self._results[0].of.i32)
        return 0


@dataclass(frozen=True)
class _Layout:
    """Where the started interpreter keeps what the host needs (the same in every instance of a snapshot)."""

    ctx: int
    rt: int
    scratch: int
    """16 bytes the host may use."""
    filename: int
    on_uncaught: int
    """JSValue of the driver's `onUncaught`."""


def _page_array(base: int, size: int) -> np.ndarray:
    """The memory at `base` as an array of host pages (a view: no copy)."""
    import numpy as np

    return np.frombuffer(memoryview((ctypes.c_char * size).from_address(base)).cast("B"), np.uint8).reshape(-1, PAGE)


# ----------------------------------------------------------------------------
# The runtime.


class _Prepared:
    """A compiled module linked with WASI (and the host's `poll_oneoff`), for one engine."""

    def __init__(self, settings: EngineSettings, module: wasmtime.Module, layout: _Layout | None) -> None:
        self.settings = settings
        engine = get_engine(settings)
        self.module = module
        self.layout = layout
        self.linker = wasmtime.Linker(engine)
        self.linker.define_wasi()
        self.linker.allow_shadowing = True
        i32 = wasmtime.ValType.i32()
        poll = wasmtime.FuncType([i32, i32, i32, i32], [i32])
        # Through the C API directly: wasmtime-py's own trampoline costs ~30 µs a call
        # (and parks exceptions in a process-wide slot).
        module_name, name = b"wasi_snapshot_preview1", b"poll_oneoff"
        error = _define_func_unchecked(
            ctypes.cast(self.linker.ptr(), ctypes.c_void_p), module_name, len(module_name), name, len(name),
            ctypes.cast(poll.ptr(), ctypes.c_void_p), _POLL_ONEOFF, None, None)
        if error:
            raise take_error(error)
        self.pre = self.linker.instantiate_pre(module)


class JavaScriptRuntime(Runtime):
    language = "javascript"
    reuses_instances = False

    def __init__(self) -> None:
        self.manifest = load_manifest("javascript")
        self._lock = threading.Lock()
        self._snapshot: tuple[Path, str, _Layout] | None = None
        self._prepared: dict[EngineSettings, _Prepared] = {}

    # -- preparation ---------------------------------------------------------

    def artifact(self) -> Path:
        """The pinned `qjs-wasi-reactor.wasm`, as installed by its PyPI package."""
        package, pinned = self.manifest["package"], self.manifest["version"]
        try:
            dist = distribution(package)
        except PackageNotFoundError:
            dist = None
        if dist is None or dist.version != pinned:
            found = dist.version if dist is not None else None
            raise RuntimeUnavailableError(
                f"the JavaScript runtime needs {package}=={pinned} (found {found}); "
                "run `wasm-runner prepare` or `pip install --require-hashes -r wasm_runner/_runtimes/requirements.lock`"
            )
        for file in dist.files or ():
            if str(file) == self.manifest["artifact"]:
                return Path(str(file.locate()))
        raise RuntimeUnavailableError(f"{package} does not contain {self.manifest['artifact']}")

    def driver_source(self) -> bytes:
        return (self.manifest.directory / "driver.js").read_bytes()

    def driver_identity(self) -> bytes:
        """What names the driver in the snapshot's cache key (cheaper to make than the source itself)."""
        return self.driver_source()

    def snapshot(self) -> tuple[Path, str, _Layout]:
        """The pre-initialised module (built once per artifact and driver), its sha256 and layout."""
        with self._lock:
            if self._snapshot is None:
                self._snapshot = self._snapshot_locked()
            return self._snapshot

    def _snapshot_locked(self) -> tuple[Path, str, _Layout]:
        pinned = self.manifest["sha256"]
        driver = self.driver_identity()
        # The builder's environment is baked into the snapshot's libc (see `_Guest.env`).
        inputs = f"{pinned}/{DERIVE_VERSION}/{SNAPSHOT_VERSION}/{WASMTIME_VERSION}/{json.dumps(guest_env({}))}/"
        key = hashlib.sha256(inputs.encode() + driver).hexdigest()[:20]
        out = cache_dir() / f"qjs-snapshot-{key}.wasm"
        meta = out.with_suffix(".json")
        if not meta.exists():
            with open(out.with_suffix(".lock"), "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # parallel processes build it once
                if not meta.exists():
                    self._build_snapshot(out, meta, self.driver_source())
        fields = json.loads(meta.read_text())
        return out, fields.pop("sha256"), _Layout(**fields)

    def _build_snapshot(self, out: Path, meta: Path, driver: bytes) -> None:
        source = self.artifact()
        original = source.read_bytes()
        pinned = self.manifest["sha256"]
        actual = hashlib.sha256(original).hexdigest()
        if actual != pinned:
            raise RuntimeUnavailableError(
                f"{source} has sha256 {actual}, expected {pinned}: the artifact is not the pinned one; "
                "reinstall it with `wasm-runner prepare`"
            )
        derived, where = derive_module(original)
        settings = EngineSettings()
        builder = _Prepared(settings, wasmtime.Module(get_engine(settings), derived), None)
        guest = _Guest(builder, None, Limits(), {})
        try:
            layout = guest.boot(driver, where["tracker_slot"])
            store = guest.store
            memory = bytes(guest.memory.read(store, 0, guest.memory.data_len(store)))
            mutable_globals = {0: guest.export(STACK_POINTER).value(store) & U32,
                               where["hooks_global"]: guest.export(HOOKS).value(store) & U32}
        finally:
            guest.close()
        snapshot = snapshot_module(derived, memory, mutable_globals)
        tmp = out.with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(snapshot)
        os.replace(tmp, out)
        fields = dict(layout.__dict__, sha256=hashlib.sha256(snapshot).hexdigest())
        tmp = meta.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(fields))
        os.replace(tmp, meta)

    def prepare(self, settings: EngineSettings | None = None) -> _Prepared:
        settings = settings or EngineSettings()
        with self._lock:
            ready = self._prepared.get(settings)
        if ready is not None:
            return ready
        wasm, sha, layout = self.snapshot()
        module = load_compiled(wasm, sha, "module", settings)
        assert isinstance(module, wasmtime.Module)  # (what the "module" kind loads)
        prepared = _Prepared(settings, module, layout)
        with self._lock:
            return self._prepared.setdefault(settings, prepared)

    # -- execution -----------------------------------------------------------

    def fresh(self, view: View, call: Call) -> Outcome:
        guest = _Guest(self.prepare(engine_settings(call.limits)), view, call.limits, call.env,
                       stdin=call.stdin.encode("utf-8", "surrogateescape"))
        try:
            try:
                guest.start()
            except Exception as exc:  # a limit hit while instantiating
                return guest.failure(exc, call)
            return guest.run(call)
        finally:
            guest.close()

    def new_kernel(self, view: View, limits: Limits, reusable: bool = False, restoring: bool = False) -> JavaScriptKernel:
        return JavaScriptKernel(self, view, limits)  # not reusable: a new one is cheap


class JavaScriptKernel(Kernel):
    """One live QuickJS context; calls run one at a time and share its global scope."""

    def __init__(self, runtime: JavaScriptRuntime, view: View, limits: Limits) -> None:
        self.settings = engine_settings(limits)
        self._lock = threading.Lock()
        self.language = runtime.language  # TypeScript kernels are this class too
        self.key = validity_key(self.language, runtime.snapshot()[1], self.settings.cache_key(), view.preopens)
        self._guest = _Guest(runtime.prepare(self.settings), view, limits, {})
        try:
            self._guest.start()
        except BaseException:
            self._guest.close()
            raise
        self.usable = True

    def accepts(self, limits: Limits) -> bool:
        return self.usable and engine_settings(limits) == self.settings

    def run(self, call: Call) -> Outcome:
        with self._lock:
            if not self.usable:
                raise RuntimeError("this JavaScript kernel was closed or lost its instance; start a new one")
            outcome = self._guest.run(call, stdin_in_driver=True)
            if outcome.instance_lost:
                self.usable = False
            return outcome

    def close(self) -> None:
        with self._lock:
            self.usable = False
            self._guest.close()

    # -- snapshots -----------------------------------------------------------

    def capture(self) -> KernelImage:
        """The kernel's state at rest: its memory's non-zero pages and its two mutable globals (the
        stack pointer, back at its start between turns, and the driver's hooks). QuickJS holds no
        other state outside its memory; between turns no timer or job is pending (a turn ends
        when none is left), and WASI's descriptors past the preopens are not carried: a file a
        cell opened with `std.open` and kept is closed in a restored kernel."""
        import numpy as np

        with self._lock:
            if not self.usable:
                raise SnapshotRefused("this JavaScript kernel was closed or lost its instance")
            guest = self._guest
            base, size = guest.memory_view(guest.cx)
            pages = _page_array(base, size)
            keep = np.flatnonzero(pages.view(np.uint64).any(axis=1))
            mutable = {name: guest.export(name).value(guest.store) & U32 for name in (STACK_POINTER, HOOKS)}
            return KernelImage(self.language, self.key, size, keep, pages[keep], PAGE, mutable, {"env": guest.env})

    def checkpoint(self, probe: bool = False) -> KernelImage:
        return self.capture()  # its pages are copied anyway (the memory is small)

    def restore(self, image: KernelImage) -> None:
        """Become the kernel `image` was taken of (a new instance, before any turn)."""
        import numpy as np

        if image.key != self.key:
            raise ImageRefused("the snapshot was made for another runtime or view")
        with self._lock:
            guest = self._guest
            store, memory = guest.store, guest.memory
            missing = image.memory_size - memory.data_len(store)
            if missing > 0:
                try:
                    memory.grow(store, -(-missing // 65536))
                except wasmtime.WasmtimeError:
                    raise ImageRefused(f"the snapshot needs {image.memory_size >> 20} MiB of memory, more than "
                                       "this kernel's limit: restore it under a larger limits.memory_bytes") from None
            base, size = guest.memory_view(guest.cx)
            pages = _page_array(base, size)
            wanted = np.zeros(len(pages), bool)
            wanted[image.pages] = True
            pages[np.flatnonzero(pages.view(np.uint64).any(axis=1) & ~wanted)] = 0
            pages[image.pages] = image.data
            for name, value in image.globals.items():
                guest.export(name).set_value(store, wasmtime.Val.i32(value))
            guest.env = dict(image.host.get("env", guest.env))
            guest.turns = 0  # the next turn seeds Math.random anew: a fork's children differ


class _Guest:
    """One QuickJS instance in its own store. Calls into it run on the calling thread."""

    def __init__(self, prepared: _Prepared, view: View | None, limits: Limits, env: dict[str, str],
                 stdin: bytes = b"") -> None:
        self.prepared = prepared
        self.limits = limits
        self.store, self.interrupt = new_store(limits, prepared.settings)
        wasi = wasmtime.WasiConfig()
        wasi.argv = ["qjs"]
        wasi.env = list(guest_env(env).items())
        if view is not None:
            view.configure(wasi)
        if stdin:
            set_stdin_bytes(wasi, stdin)
        # Output does not go through wasmtime's stdout/stderr (see `derive_module`):
        # the host's stdio write lands in the capture the router holds during a call.
        self.router = OutputRouter()
        self.store.set_wasi(wasi)
        self.cx = context_address(self.store)
        self.turns = 0
        # The environment the guest's libc holds: the snapshot's (its builder had no
        # extra variables) until a turn's request makes the driver change it.
        self.env = guest_env({})
        self.failure_in_nested: BaseException | None = None
        self.http_reply = b""
        """The host's answer to the driver's last HTTP request, until the driver takes it."""
        self.closed = False

    # -- plumbing ------------------------------------------------------------

    def _become_current(self) -> _Guest | None:
        previous = getattr(_tls, "guest", None)
        _tls.guest = self
        return previous

    def raise_failure(self, error: int | None, trap: int | None) -> NoReturn:
        """A call into the guest failed: raise what made it fail."""
        error_obj = take_error(error) if error else None  # these own (and free) what the C API returned
        trap_obj = take_trap(trap) if trap else None
        nested = self.failure_in_nested
        if nested is not None:
            # The host's poll_oneoff trapped because its own call into the guest failed.
            self.failure_in_nested = None
            raise nested
        if error_obj is not None:
            raise error_obj
        assert trap_obj is not None  # (a failed call returns an error or a trap)
        raise trap_obj

    def memory_view(self, cx: int) -> tuple[int, int]:
        """Base address and size of the guest's memory (both can change when it grows)."""
        return _memory_data(cx, self.memory_address) or 0, _memory_data_size(cx, self.memory_address)

    def read(self, cx: int, ptr: int, length: int, view: tuple[int, int] | None = None) -> bytes:
        base, size = view or self.memory_view(cx)
        ptr &= U32
        if length < 0 or ptr + length > size:
            raise _Fault()
        return ctypes.string_at(base + ptr, length)

    def write(self, cx: int, ptr: int, data: bytes, view: tuple[int, int] | None = None) -> None:
        base, size = view or self.memory_view(cx)
        ptr &= U32
        if ptr + len(data) > size:
            raise _Fault()
        ctypes.memmove(base + ptr, data, len(data))

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> None:
        """Instantiate the snapshot: the interpreter and driver are already running in it."""
        layout = self.prepared.layout
        assert layout is not None, "only a snapshot can be started"
        self.interrupt.arm(self.store, self.limits.timeout_s)
        self._instantiate()
        self.layout = layout

    def _instantiate(self) -> None:
        store = self.store
        instance = self.prepared.pre.instantiate(store)
        context = store_context(store)

        def export(name: str) -> Any:
            item = export_get(context, instance, name)
            if item is None:
                raise RuntimeError(f"the QuickJS module exports no {name}")
            return item

        def fn(name: str, params: tuple[str, ...], results: tuple[str, ...]) -> _Fn:
            return _Fn(self, export(name), params, results)

        self.export = export
        self.memory = export("memory")
        self.memory_address = ctypes.addressof(memory_handle(self.memory))
        self.js_eval = fn("JS_Eval", *EXPORTED_FUNCTIONS["JS_Eval"])
        self.js_await = fn("js_std_await", *EXPORTED_FUNCTIONS["js_std_await"])
        self.js_free_value = fn("JS_FreeValue", *EXPORTED_FUNCTIONS["JS_FreeValue"])
        self.js_to_cstring = fn("JS_ToCStringLen2", *EXPORTED_FUNCTIONS["JS_ToCStringLen2"])
        self.js_free_cstring = fn("JS_FreeCString", *EXPORTED_FUNCTIONS["JS_FreeCString"])
        self.js_get_exception = fn("JS_GetException", *EXPORTED_FUNCTIONS["JS_GetException"])
        self.js_call = fn("JS_Call", *EXPORTED_FUNCTIONS["JS_Call"])
        self.js_dump_error = fn("js_std_dump_error", *EXPORTED_FUNCTIONS["js_std_dump_error"])
        self.malloc = fn("malloc", ("i32",), ("i32",))
        self.free = fn("free", ("i32",), ())

    def boot(self, driver: bytes, tracker_slot: int) -> _Layout:
        """Start the interpreter and the driver (`qjs --std -e driver.js config`); used to build the snapshot."""
        store, cx = self.store, self.cx
        self.interrupt.arm(store, 60.0)
        errors = Capture("stderr", 64 * 1024)
        self.router.stderr = errors
        previous = self._become_current()
        try:
            self._instantiate()
            _Fn(self, self.export("_initialize"), (), ())(cx)
            config = json.dumps({"host_fd": HOST_FD, "http_fd": HTTP_FD, "max_value_chars": MAX_VALUE_CHARS,
                                 "workspace": GUEST_WORKSPACE})
            args = [b"qjs", b"--std", b"-e", driver, config.encode(), b"<wasm-runner>"]
            # One block: the argv strings, the argv array, then 16 bytes of scratch space.
            strings = b"".join(a + b"\0" for a in args)
            block = self.malloc(cx, len(strings) + 4 * len(args) + 32) & U32
            offsets, at = [], block
            for a in args:
                offsets.append(at)
                at += len(a) + 1
            argv = (at + 7) & ~7
            scratch = argv + 4 * len(args)
            self.write(cx, block, strings)
            self.write(cx, argv, struct.pack(f"<{len(args) - 1}I", *offsets[:-1]) + b"\0\0\0\0")
            status = _Fn(self, self.export("qjs_init_argv"), ("i32", "i32"), ("i32",))(cx, len(args) - 1, argv)
            if status != 0:
                raise RuntimeError(f"the JavaScript driver failed to start:\n{errors.text()[-2000:]}")
            ctx = _Fn(self, self.export("qjs_get_context"), (), ("i32",))(cx) & U32
            rt = _Fn(self, self.export("JS_GetRuntime"), ("i32",), ("i32",))(cx, ctx) & U32
            self.layout = _Layout(ctx=ctx, rt=rt, scratch=scratch, filename=offsets[-1], on_uncaught=0)
            on_uncaught = self._eval(cx, b"__wasm_runner.onUncaught")
            on_rejection = self._eval(cx, b"__wasm_runner.onRejection")
            hooks = self.malloc(cx, HOOKS_SIZE) & U32
            self.write(cx, hooks, struct.pack("<qq", on_uncaught, on_rejection) + bytes(HOOKS_SIZE - 16))
            self.export(HOOKS).set_value(store, wasmtime.Val.i32(hooks))
            set_tracker = _Fn(self, self.export("JS_SetHostPromiseRejectionTracker"), ("i32",) * 3, ())
            set_tracker(cx, rt, tracker_slot, hooks)
            self.layout = _Layout(ctx=ctx, rt=rt, scratch=scratch, filename=offsets[-1], on_uncaught=on_uncaught)
            return self.layout
        finally:
            _tls.guest = previous
            self.router.stderr = None

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            close_later(self.store)

    # -- one execution -------------------------------------------------------

    def run(self, call: Call, stdin_in_driver: bool = False) -> Outcome:
        """One turn. A kernel's WASI stdin is fixed, so with `stdin_in_driver` the driver
        makes `std.in` read this call's stdin instead."""
        limits, store = call.limits, self.store
        self.router.stdout, self.router.stderr = call.stdout, call.stderr
        store.set_limits(memory_size=limits.memory_bytes)
        if limits.fuel is not None:
            store.set_fuel(limits.fuel)
        request: dict[str, Any] = {"code": call.code, "filename": call.filename or "<input>", "value": True}
        if stdin_in_driver:
            request["stdin"] = call.stdin
        request["cwd"] = call.cwd
        env = guest_env(call.env)
        if env != self.env:
            request["env"] = self.env = env
        if self.turns == 0:
            request["seed"] = list(struct.unpack("<4I", os.urandom(16)))
        self.turns += 1
        source = f"__wasm_runner.turn({json.dumps(request)})".encode()
        call.bind(self.interrupt, store)
        call.collect = self.router.flush
        previous = self._become_current()
        try:
            outcome = _outcome(json.loads(self._turn(self.cx, source)))
        except Exception as exc:
            outcome = self.failure(exc, call)
        finally:
            _tls.guest = previous
            self.router.stdout = self.router.stderr = None
        if limits.fuel is not None:
            outcome.fuel_used = limits.fuel - store.get_fuel()
        outcome.memory_peak_bytes = self.memory.data_len(store)
        return outcome

    def _eval(self, cx: int, source: bytes) -> int:
        layout = self.layout
        ptr = self.malloc(cx, len(source) + 1) & U32
        if ptr == 0:
            raise _DriverFailed("out of memory")
        try:
            self.write(cx, ptr, source + b"\0")
            value = self.js_eval(cx, layout.ctx, ptr, len(source), layout.filename, 0)
        finally:
            self.free(cx, ptr)
        if _tag(value) == JS_TAG_EXCEPTION:
            self.js_dump_error(cx, layout.ctx)
            raise _DriverFailed("evaluating the turn failed")
        return value

    def _turn(self, cx: int, source: bytes) -> str:
        ctx, scratch = self.layout.ctx, self.layout.scratch
        promise = self._eval(cx, source)
        result = self.js_await(cx, ctx, promise)  # the event loop; consumes `promise`
        if _tag(result) == JS_TAG_EXCEPTION:
            self.js_dump_error(cx, ctx)
            raise _DriverFailed("the turn failed")
        try:
            text = self.js_to_cstring(cx, ctx, scratch, result, 0) & U32
            if text == 0:
                raise _DriverFailed("out of memory")
            (length,) = struct.unpack("<I", self.read(cx, scratch, 4))
            data = self.read(cx, text, length)
            self.js_free_cstring(cx, ctx, text)
        finally:
            self.js_free_value(cx, ctx, result)
        return data.decode("utf-8", "replace")

    def failure(self, exc: Exception, call: Call) -> Outcome:
        """The outcome of a call that did not return a result."""
        if isinstance(exc, wasmtime.ExitTrap):  # std.exit(n): the process is gone
            return Outcome(exit_code=exc.code, instance_lost=True)
        if isinstance(exc, _DriverFailed):
            stderr = call.stderr.text()
            if "out of memory" in stderr[-4000:] or "out of memory" in str(exc):
                return Outcome(exit_code=1, limit="memory", instance_lost=True,
                               error=GuestError(type="InternalError", message="out of memory"))
            return Outcome(exit_code=134, instance_lost=True,
                           error=GuestError(type="GuestCrash", message=f"the JavaScript driver failed: {exc}",
                                            traceback=stderr[-4000:]))
        if isinstance(exc, (wasmtime.Trap, wasmtime.WasmtimeError)):
            return trap_outcome(exc, self.interrupt)
        raise exc

    # -- the event loop's hooks (called from poll_oneoff) ----------------------

    def loop_step(self, cx: int) -> bool:
        """Hand an error a callback left pending to the driver. True if JS ran.

        (Promise jobs never wait here: the event loop runs all of them before it polls.)
        """
        exc = self.js_get_exception(cx, self.layout.ctx)
        if _tag(exc) == JS_TAG_UNINITIALIZED:
            return False
        self._uncaught(cx, exc)
        return True

    def _uncaught(self, cx: int, exc: int) -> None:
        ctx, argv = self.layout.ctx, self.layout.scratch + 8
        self.write(cx, argv, struct.pack("<q", exc))
        result = self.js_call(cx, ctx, self.layout.on_uncaught, JS_UNDEFINED, 1, argv)
        if _tag(result) == JS_TAG_EXCEPTION:
            self.js_dump_error(cx, ctx)
        else:
            self.js_free_value(cx, ctx, result)
        self.js_free_value(cx, ctx, exc)

    def sleep_until(self, wake_at: float) -> None:
        """Block until `wake_at` (monotonic), the call's deadline, or a stop, whichever is first."""
        interrupt = self.interrupt
        end = min(wake_at, interrupt.deadline)
        while interrupt.reason is None:
            left = end - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(left, SLEEP_SLICE_S))
        interrupt.expired()  # past the deadline: the guest traps at its next epoch check


def _outcome(result: dict[str, Any]) -> Outcome:
    outcome = Outcome(exit_code=result.get("exit_code", 0), value=result.get("value"))
    error = result.get("error")
    if error is not None:
        outcome.error = GuestError(type=error["type"], message=error["message"], traceback=error.get("traceback", ""),
                                   line=error.get("line"), source=error.get("source"))
        if "out of memory" in error["message"] and error["type"] in ("InternalError", "RangeError"):
            outcome.limit = "memory"
    return outcome


# ----------------------------------------------------------------------------
# The host's `poll_oneoff`. It runs on the guest's thread and finds its instance
# through `_tls`. It must not raise: it returns an errno, or a trap when its own
# call into the guest failed (which must end the outer call too).


class _NestedFailure(Exception):
    pass


_UncheckedCallback = ctypes.CFUNCTYPE(ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p,
                                      ctypes.POINTER(ValRaw), ctypes.c_size_t)


_define_func_unchecked = raw_function(
    "wasmtime_linker_define_func_unchecked", ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
    ctypes.c_char_p, ctypes.c_size_t, ctypes.c_void_p, _UncheckedCallback, ctypes.c_void_p, ctypes.c_void_p)


def _poll_oneoff_callback(_env: int | None, caller: int, values: Any, _count: int) -> int:
    guest: _Guest | None = getattr(_tls, "guest", None)
    if guest is None:
        values[0].i32 = ERRNO_BADF
        return 0
    try:
        args = (values[0].i32 & U32, values[1].i32 & U32, values[2].i32 & U32, values[3].i32 & U32)
        values[0].i32 = _poll_oneoff(guest, _caller_context(caller), *args)
    except _Fault:
        values[0].i32 = ERRNO_FAULT
    except _NestedFailure:
        message = b"wasm-runner: a call from poll_oneoff into the guest failed"
        return new_trap(message)
    except BaseException:  # a bug here must not take the process down
        values[0].i32 = ERRNO_IO
    return 0


def _poll_oneoff(guest: _Guest, cx: int, subs_ptr: int, events_ptr: int, nsubs: int, nevents_ptr: int) -> int:
    if nsubs & STDIO_WRITE:
        return _stdio_write(guest, cx, events_ptr, subs_ptr, nsubs & ~STDIO_WRITE, nevents_ptr)
    if nsubs <= 0 or nsubs > 4096:
        return ERRNO_INVAL
    raw = guest.read(cx, subs_ptr, SUBSCRIPTION_SIZE * nsubs)
    now = time.monotonic()
    clocks: list[tuple[float, int]] = []  # (wake_at, userdata)
    fds: list[tuple[int, int]] = []  # (userdata, event type)
    host: int | None = None
    for i in range(nsubs):
        at = SUBSCRIPTION_SIZE * i
        userdata, tag = struct.unpack_from("<QB", raw, at)
        if tag == EVENTTYPE_CLOCK:
            clock_id, timeout, _precision, flags = struct.unpack_from("<I4xQQH", raw, at + 16)
            if flags & SUBSCRIPTION_CLOCK_ABSTIME:
                # Only the realtime clock's origin is known here; others count as due.
                delay = (timeout - time.time_ns()) / 1e9 if clock_id == CLOCK_REALTIME else 0.0
            else:
                delay = timeout / 1e9
            clocks.append((now + max(0.0, delay), userdata))
        elif tag in (EVENTTYPE_FD_READ, EVENTTYPE_FD_WRITE):
            (fd,) = struct.unpack_from("<I", raw, at + 16)
            if fd == HOST_FD and tag == EVENTTYPE_FD_READ:
                host = userdata
            else:
                fds.append((userdata, tag))
        else:
            return ERRNO_INVAL
    events: list[tuple[int, int]] = []  # (userdata, event type)
    if fds:
        events = fds  # files and stdin never block
    elif host is not None and _loop_step(guest, cx):
        pass  # a callback's error went to the driver: let the loop look again
    elif clocks:
        wake_at, first = min(clocks)
        guest.sleep_until(wake_at)
        due = time.monotonic()
        events = [(userdata, EVENTTYPE_CLOCK) for when, userdata in clocks if when <= due] or [(first, EVENTTYPE_CLOCK)]
    elif host is not None:
        events = [(host, EVENTTYPE_FD_READ)]  # nothing left to do: tell the driver
    view = guest.memory_view(cx)
    out = b"".join(struct.pack("<QHBx4xQH6x", userdata, 0, kind, 1 if kind else 0, 0) for userdata, kind in events)
    if out:
        guest.write(cx, events_ptr, out, view)
    guest.write(cx, nevents_ptr, struct.pack("<I", len(events)), view)
    return ERRNO_SUCCESS


def _loop_step(guest: _Guest, cx: int) -> bool:
    try:
        return guest.loop_step(cx)
    except (wasmtime.Trap, wasmtime.WasmtimeError) as exc:
        guest.failure_in_nested = exc
        raise _NestedFailure() from exc


def _stdio_write(guest: _Guest, cx: int, fd: int, iovs: int, iovs_len: int, nwritten_ptr: int) -> int:
    """fd_write to stdout/stderr: into the call's capture (the capture enforces the output limit)."""
    memory = guest.memory_address
    base = _memory_data(cx, memory)
    size = _memory_data_size(cx, memory)
    if iovs_len > 1024 or iovs + 8 * iovs_len > size or nwritten_ptr + 4 > size:
        return ERRNO_FAULT if iovs_len <= 1024 else ERRNO_INVAL
    vecs = struct.unpack_from(f"<{2 * iovs_len}I", ctypes.string_at(base + iovs, 8 * iovs_len))
    chunks = []
    for k in range(0, 2 * iovs_len, 2):
        ptr, length = vecs[k], vecs[k + 1]
        if ptr + length > size:
            return ERRNO_FAULT
        chunks.append(ctypes.string_at(base + ptr, length))
    if fd == HTTP_FD + 1:  # the driver's buffer for the answer to its last request
        reply, guest.http_reply = guest.http_reply, b""
        at = 0
        for k in range(0, 2 * iovs_len, 2):
            piece = reply[at:at + vecs[k + 1]]
            ctypes.memmove(base + vecs[k], piece, len(piece))
            at += len(piece)
        ctypes.c_uint32.from_address(base + nwritten_ptr).value = at
        return ERRNO_SUCCESS
    data = chunks[0] if iovs_len == 1 else b"".join(chunks)
    if fd == HTTP_FD:  # a request: answered by the host now; its length is what the write returns
        guest.http_reply = (guest_tools.answer_binary(data) if guest_tools.is_tool_message(data)
                            else guest_http.answer_binary(data))
        ctypes.c_uint32.from_address(base + nwritten_ptr).value = len(guest.http_reply)
        return ERRNO_SUCCESS
    capture = guest.router.stdout if fd == 1 else guest.router.stderr
    if capture is not None:
        try:
            capture.write(data)
        except Exception:  # a failing listener must not fail the guest's write
            pass
    ctypes.c_uint32.from_address(base + nwritten_ptr).value = len(data)
    return ERRNO_SUCCESS


_POLL_ONEOFF = _UncheckedCallback(_poll_oneoff_callback)
"""The host's poll_oneoff as a C callback, alive as long as the module."""
