"""wasmtime's C API where wasmtime-py has no public wrapper, or one too slow for a hot path.

The only importer of wasmtime-py's private modules (`lowlevel.REQUIRED` lists what is used).
Names are bound once, at import: the callers' per-call paths look up a module global where
they looked up an attribute of `_ffi`, and the accessors of private attributes
(`store_context`, `func_handle`, ...) are the unbound method or an `attrgetter`, so no Python
frame is added to a call.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from operator import attrgetter
from typing import Any

import wasmtime
from wasmtime import _ffi as ffi
from wasmtime._extern import wrap_extern
from wasmtime.component._enter import enter_wasm as enter_wasm  # offered to string_call

# -- private members of public classes ------------------------------------------------

store_context: Callable[[wasmtime.Store], Any] = wasmtime.Store._context
"""The store's `wasmtime_context_t *` (a ctypes pointer), as wasmtime-py's own calls pass it."""
func_handle: Callable[[Any], Any] = attrgetter("_func")
"""The `wasmtime_func_t` (or, of a component function, `wasmtime_component_func_t`) inside a Func:
keep the Func alive as long as its address is used."""
memory_handle: Callable[[wasmtime.Memory], Any] = attrgetter("_memory")
"""The `wasmtime_memory_t` inside a Memory."""


def context_address(store: wasmtime.Store) -> int:
    """The address of the store's context, for raw functions taking plain addresses."""
    return ctypes.cast(store_context(store), ctypes.c_void_p).value or 0


def take_error(address: int) -> wasmtime.WasmtimeError:
    """The error at `address`, returned by a C call; the object owns (and frees) it."""
    return wasmtime.WasmtimeError._from_ptr(ctypes.cast(address, ctypes.POINTER(ffi.wasmtime_error_t)))


def take_trap(address: int) -> wasmtime.Trap:
    """The trap at `address`, returned by a C call; the object owns (and frees) it."""
    return wasmtime.Trap._from_ptr(ctypes.cast(address, ctypes.POINTER(ffi.wasm_trap_t)))


def new_error(message: bytes) -> int:
    """A new `wasmtime_error_t` (its address), for a callback to return: wasmtime takes ownership."""
    return ctypes.cast(ffi.wasmtime_error_new(message), ctypes.c_void_p).value or 0


def new_trap(message: bytes) -> int:
    """A new `wasm_trap_t` (its address), for a host function to return: wasmtime takes ownership."""
    return ctypes.cast(ffi.wasmtime_trap_new(message, len(message)), ctypes.c_void_p).value or 0


# -- raw functions and values -------------------------------------------------------

def raw_function(name: str, restype: Any, *argtypes: Any) -> Any:
    """A private handle on a C API function taking and returning plain addresses (no wrapper costs)."""
    function = ffi.dll[name]  # a new function object: wasmtime-py's own is left as it is
    function.restype = restype
    function.argtypes = argtypes
    return function


Val = ffi.wasmtime_val_t
"""`wasmtime_val_t`: a typed value, as `wasmtime_func_call` takes and returns them."""
ValRaw = ffi.wasmtime_val_raw_t
"""`wasmtime_val_raw_t`: an untyped value, as an unchecked host function gets them."""
I32: int = ffi.WASMTIME_I32.value
I64: int = ffi.WASMTIME_I64.value


def export_get(context: Any, instance: wasmtime.Instance, name: str) -> Any:
    """The export `name` of a core instance (None if it has none); `context` is `store_context(store)`.

    wasmtime-py's `Instance.exports` builds a table of every export first."""
    raw = name.encode()
    item = ffi.wasmtime_extern_t()  # the wrapper keeps a view into it: one per export
    if not ffi.wasmtime_instance_export_get(context, ctypes.byref(instance._instance), raw, len(raw),
                                            ctypes.byref(item)):
        return None
    return wrap_extern(item)


# -- component functions taking a string (see string_call) ---------------------------

ComponentVal = ffi.wasmtime_component_val_t
COMPONENT_STRING = ffi.WASMTIME_COMPONENT_STRING
byte_vec_new_uninitialized = ffi.wasm_byte_vec_new_uninitialized
byte_vec_delete = ffi.wasm_byte_vec_delete
component_func_call = ffi.wasmtime_component_func_call
component_val_delete = ffi.wasmtime_component_val_delete
# `enter_wasm` (imported above) raises what a component call returned as an error.


# -- stores and WASI -----------------------------------------------------------------

EpochDeadlineCallback = ctypes.CFUNCTYPE(
    ctypes.c_size_t,  # a wasmtime_error_t * (0: go on)
    ctypes.POINTER(ffi.wasmtime_context_t),
    ctypes.c_void_p,
    ctypes.POINTER(ctypes.c_uint64),  # the next deadline, in ticks from now
    ctypes.POINTER(ffi.wasmtime_update_deadline_kind_t),
)
"""The callback run when a store's epoch deadline passes."""
DEADLINE_CONTINUE = 0
"""`WASMTIME_UPDATE_DEADLINE_CONTINUE`: the kind an epoch deadline callback sets to go on."""
_Finalizer = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
NO_FINALIZER = _Finalizer()
"""A null finalizer: wasmtime-py's finalizers can run during interpreter shutdown and crash it."""


def set_epoch_deadline_callback(store: wasmtime.Store, callback: Any) -> None:
    """Run `callback` (an `EpochDeadlineCallback`, kept alive by the caller) at the store's deadlines."""
    ffi.wasmtime_store_epoch_deadline_callback(store.ptr(), callback, None, NO_FINALIZER)


_OUTPUT_SETTERS = (ffi.wasi_config_set_stdout_custom, ffi.wasi_config_set_stderr_custom)


def set_output_writer(wasi: wasmtime.WasiConfig, stream: int, write: Any, data: Any, release: Any) -> None:
    """Send the guest's stdout (`stream` 0) or stderr (1) to the C function `write(data, buf, size)`;
    wasmtime calls `release(data)` when it drops the writer."""
    _OUTPUT_SETTERS[stream](wasi.ptr(), write, data, release)


def set_stdin_bytes(wasi: wasmtime.WasiConfig, data: bytes) -> None:
    """The guest's stdin: these bytes, then end of file."""
    vec = ffi.wasm_byte_vec_t()
    buffer = (ctypes.c_ubyte * len(data)).from_buffer_copy(data)
    ffi.wasm_byte_vec_new(ctypes.byref(vec), len(data), ctypes.cast(buffer, ctypes.POINTER(ffi.wasm_byte_t)))
    ffi.wasi_config_set_stdin_bytes(wasi.ptr(), ctypes.byref(vec))  # takes ownership of the bytes
