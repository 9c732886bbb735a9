"""Where a store's stdout/stderr writes go: a target's `write(stream, data)`, through C.

The writers are registered through the C API with one module-level trampoline and no
finalizer: wasmtime-py's `stdout_custom` finalizer can run during interpreter shutdown and
crash the process. With the compiled `_output_sink`, writes are kept in a C buffer (a
`Sink`) that the target empties when it likes, and reach the trampoline only when the sink
is told to forward them (a Python callback on wasmtime's I/O thread costs about 40 us a
write, and takes the interpreter lock).
"""

from __future__ import annotations

import ctypes
import itertools
import weakref
from typing import Any, Protocol

import wasmtime

from wasm_runner.lowlevel.capi import NO_FINALIZER, set_output_writer

try:
    from wasm_runner.lowlevel._output_sink import RELEASE as _SINK_RELEASE_ADDRESS
    from wasm_runner.lowlevel._output_sink import WRITE as _SINK_WRITE_ADDRESS
    from wasm_runner.lowlevel._output_sink import Sink as Sink
except ImportError:  # built without a C compiler: every write goes through a Python callback
    Sink = None


class OutputTarget(Protocol):
    def write(self, stream: int, data: bytes) -> None: ...


_targets: weakref.WeakValueDictionary[int, OutputTarget] = weakref.WeakValueDictionary()
_target_keys = itertools.count(1)


def _forward_output(key: int | None, buf: Any, size: int) -> int:  # buf: a ctypes pointer
    target = _targets.get((key or 0) // 2)
    if target is not None:
        try:
            target.write((key or 0) % 2, ctypes.string_at(buf, size))
        except Exception:  # noqa: BLE001 - an exception must not cross into wasmtime
            return -5  # EIO
    return size


# Wrapped by a call rather than a decorator: ctypes' CFUNCTYPE is untyped.
_write_output = ctypes.CFUNCTYPE(ctypes.c_ssize_t, ctypes.c_void_p, ctypes.POINTER(ctypes.c_ubyte),
                                 ctypes.c_size_t)(_forward_output)


if Sink is not None:
    _FORWARD = ctypes.cast(_write_output, ctypes.c_void_p).value
    _SINK_WRITE = type(_write_output)(_SINK_WRITE_ADDRESS)
    _SINK_RELEASE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(_SINK_RELEASE_ADDRESS)


def route_output(wasi: wasmtime.WasiConfig, target: OutputTarget) -> tuple[Sink, Sink] | None:
    """Send the guest's stdout (stream 0) and stderr (1) to `target` (held weakly).

    Returns the two compiled sinks the writes are kept in, or None where none was built
    (then every write calls `target.write`)."""
    key = next(_target_keys)
    _targets[key] = target
    if Sink is None:
        for stream in (0, 1):
            set_output_writer(wasi, stream, _write_output, key * 2 + stream, NO_FINALIZER)
        return None
    sinks = (Sink(_FORWARD, key * 2), Sink(_FORWARD, key * 2 + 1))
    for stream, sink in enumerate(sinks):
        set_output_writer(wasi, stream, _SINK_WRITE, sink.lend(), _SINK_RELEASE)
    return sinks
