"""The one door to wasmtime-py's private API, the compiled C extensions and libc.

The extensions (page copy, output sink, held descriptors) are optional: each has a Python
fallback, chosen where it is imported (`pages`, `output`, `host_descriptors`).

Everything here relies on details wasmtime-py does not promise to keep: private modules,
attributes and raw C symbols (`REQUIRED` lists them). So the installed wasmtime is checked
once, at import, against the release this package was written for; a new release is taken
up by changing `WASMTIME_SUPPORTED` after `tests/core/lowlevel/test_wasmtime_contract.py`
passes with it.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from wasm_runner_protocol.errors import WasmRunnerError

WASMTIME_SUPPORTED = "50."
"""The wasmtime-py releases (a version prefix) whose private API this package uses."""


class IncompatibleWasmtimeError(WasmRunnerError, ImportError):
    """The installed wasmtime-py is missing, or a release this package was not written for."""

    def __init__(self, found: str | None) -> None:
        self.found = found
        installed = "is not installed" if found is None else f"{found} is installed"
        super().__init__(f"wasm_runner needs wasmtime {WASMTIME_SUPPORTED}x, but wasmtime {installed} "
                         f"(pip install 'wasmtime=={WASMTIME_SUPPORTED}*')")


def _installed_wasmtime() -> str:
    try:
        found = version("wasmtime")
    except PackageNotFoundError:
        raise IncompatibleWasmtimeError(None) from None
    if not found.startswith(WASMTIME_SUPPORTED):
        raise IncompatibleWasmtimeError(found)
    return found


WASMTIME_VERSION = _installed_wasmtime()
"""The installed wasmtime-py (part of every compiled module's cache key)."""

REQUIRED: tuple[tuple[str, str], ...] = (
    # Private modules and what is taken from them (capi.py).
    ("wasmtime._ffi", "dll"),
    ("wasmtime._ffi", "wasmtime_context_t"),
    ("wasmtime._ffi", "wasmtime_update_deadline_kind_t"),
    ("wasmtime._ffi", "wasmtime_store_epoch_deadline_callback"),
    ("wasmtime._ffi", "wasmtime_error_new"),
    ("wasmtime._ffi", "wasmtime_error_t"),
    ("wasmtime._ffi", "wasm_trap_t"),
    ("wasmtime._ffi", "wasmtime_trap_new"),
    ("wasmtime._ffi", "wasi_config_set_stdout_custom"),
    ("wasmtime._ffi", "wasi_config_set_stderr_custom"),
    ("wasmtime._ffi", "wasi_config_set_stdin_bytes"),
    ("wasmtime._ffi", "wasm_byte_vec_t"),
    ("wasmtime._ffi", "wasm_byte_t"),
    ("wasmtime._ffi", "wasm_byte_vec_new"),
    ("wasmtime._ffi", "wasm_byte_vec_new_uninitialized"),
    ("wasmtime._ffi", "wasm_byte_vec_delete"),
    ("wasmtime._ffi", "wasmtime_val_t"),
    ("wasmtime._ffi", "wasmtime_val_raw_t"),
    ("wasmtime._ffi", "wasmtime_extern_t"),
    ("wasmtime._ffi", "wasmtime_instance_export_get"),
    ("wasmtime._ffi", "WASMTIME_I32"),
    ("wasmtime._ffi", "WASMTIME_I64"),
    ("wasmtime._ffi", "wasmtime_component_val_t"),
    ("wasmtime._ffi", "WASMTIME_COMPONENT_STRING"),
    ("wasmtime._ffi", "wasmtime_component_func_call"),
    ("wasmtime._ffi", "wasmtime_component_val_delete"),
    ("wasmtime._extern", "wrap_extern"),
    ("wasmtime.component._enter", "enter_wasm"),
    # C symbols bound afresh, with plain-address signatures (capi.raw_function).
    ("wasmtime._ffi.dll", "wasmtime_memory_data"),
    ("wasmtime._ffi.dll", "wasmtime_memory_data_size"),
    ("wasmtime._ffi.dll", "wasmtime_caller_context"),
    ("wasmtime._ffi.dll", "wasmtime_func_call"),
    ("wasmtime._ffi.dll", "wasmtime_linker_define_func_unchecked"),
    # Private members of public classes; "()" marks an attribute of an instance.
    ("wasmtime.Store", "_context"),
    ("wasmtime.WasmtimeError", "_from_ptr"),
    ("wasmtime.Trap", "_from_ptr"),
    ("wasmtime.Func()", "_func"),
    ("wasmtime.Memory()", "_memory"),
    ("wasmtime.Instance()", "_instance"),
    ("wasmtime.component.Func()", "_func"),
)
"""Every (object, attribute) of wasmtime-py this package relies on beyond its public API."""
