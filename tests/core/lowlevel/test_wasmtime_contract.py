"""The installed wasmtime-py still has every private attribute `wasm_runner.lowlevel` relies on.

Run this first when moving to a new wasmtime release: each failure names what went missing.
Needs no compiled runtime: the instances are made from a few lines of WebAssembly text."""

import importlib
import subprocess
import sys

import pytest
import wasmtime
from wasmtime import component

from wasm_runner.lowlevel import REQUIRED, WASMTIME_SUPPORTED, WASMTIME_VERSION, IncompatibleWasmtimeError

_CORE = '(module (memory (export "memory") 1) (func (export "f")))'
_COMPONENT = ('(component (core module $m (func (export "f"))) (core instance $i (instantiate $m))'
              ' (func (export "f") (canon lift (core func $i "f"))))')


def _instances() -> dict[str, object]:
    """One instance of each class whose instances' private attributes are used."""
    engine = wasmtime.Engine()
    store = wasmtime.Store(engine)
    instance = wasmtime.Instance(store, wasmtime.Module(engine, _CORE), [])
    exports = instance.exports(store)
    component_instance = component.Linker(engine).instantiate(store, component.Component(engine, _COMPONENT))
    return {"wasmtime.Func": exports["f"], "wasmtime.Memory": exports["memory"], "wasmtime.Instance": instance,
            "wasmtime.component.Func": component_instance.get_func(store, "f")}


def _resolve(path: str) -> object:
    """The module, or the object inside one, that a dotted path names."""
    parts = path.split(".")
    for split in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for name in parts[split:]:
            found = getattr(found, name)
        return found
    raise ImportError(path)


@pytest.fixture(scope="module")
def instances() -> dict[str, object]:
    return _instances()


@pytest.mark.parametrize(("owner", "attribute"), REQUIRED, ids=[f"{o}.{a}" for o, a in REQUIRED])
def test_wasmtime_has_what_lowlevel_relies_on(owner, attribute, instances):
    if owner.endswith("()"):
        target = instances[owner[:-2]]
    else:
        try:
            target = _resolve(owner)
        except (ImportError, AttributeError) as exc:
            pytest.fail(f"wasmtime {WASMTIME_VERSION} has no {owner} (needed for {attribute}): {exc}")
    assert hasattr(target, attribute), f"wasmtime {WASMTIME_VERSION}: {owner} has no attribute {attribute!r}"


def test_the_installed_wasmtime_is_the_supported_release():
    assert WASMTIME_VERSION.startswith(WASMTIME_SUPPORTED)


def test_an_unsupported_wasmtime_is_refused_with_both_versions_named():
    error = IncompatibleWasmtimeError("51.0.0")
    assert isinstance(error, ImportError)
    assert "51.0.0" in str(error) and WASMTIME_SUPPORTED in str(error)
    assert "not installed" in str(IncompatibleWasmtimeError(None))


def test_importing_lowlevel_with_another_wasmtime_release_fails_clearly():
    script = ("import importlib.metadata as m\n"
              "m.version = lambda name: '51.0.0' if name == 'wasmtime' else m.distribution(name).version\n"
              "try:\n"
              "    import wasm_runner.lowlevel\n"
              "except ImportError as exc:\n"
              "    print(type(exc).__name__, exc)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.startswith("IncompatibleWasmtimeError") and "51.0.0" in out and WASMTIME_SUPPORTED in out, out
