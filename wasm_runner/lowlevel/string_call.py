"""Calling a component export `run(string) -> string` through the C API directly.

wasmtime-py's `Func.__call__` reads the function's type on every call and makes a
new ctypes array type for every string length it passes (about 20 us each), all
while holding the GIL that the event loop and other workers wait for. The
signature is checked once here instead; the call, the string lowering and the
result's release are the same C calls `Func.__call__` makes.
"""

from __future__ import annotations

import ctypes
from ctypes import byref

import wasmtime
from wasmtime import component

from wasm_runner.lowlevel.capi import (
    COMPONENT_STRING,
    ComponentVal,
    byte_vec_delete,
    byte_vec_new_uninitialized,
    component_func_call,
    component_val_delete,
    enter_wasm,
    func_handle,
    store_context,
)


class StringCall:
    def __init__(self, func: component.Func, store: wasmtime.Store) -> None:
        signature = func.type(store)
        params = [type(ty) for _, ty in signature.params]
        if params != [component.String] or not isinstance(signature.result, component.String):
            raise TypeError(f"expected an export of type func(string) -> string, found {params} -> {signature.result}")
        self._func = func
        self._handle = func_handle(func)

    def __call__(self, store: wasmtime.Store, text: str) -> str:
        data = text.encode()
        param = ComponentVal()
        param.kind = COMPONENT_STRING
        byte_vec_new_uninitialized(byref(param.of.string), len(data))
        ctypes.memmove(param.of.string.data, data, len(data))
        result = ComponentVal()
        try:
            enter_wasm(lambda: component_func_call(
                byref(self._handle), store_context(store), byref(param), 1, byref(result), 1))
        finally:
            component_val_delete(byref(param))
        returned = result.of.string
        try:
            return ctypes.string_at(returned.data, returned.size).decode()
        finally:
            byte_vec_delete(byref(returned))

    def post_return(self, store: wasmtime.Store) -> None:
        self._func.post_return(store)
