"""Compile a WebAssembly module or component once, then memory-map it.

Compiling CPython takes tens of seconds; `deserialize_file` of the cached form
takes about a millisecond and keeps copy-on-write memory initialisation. The
cache key is (artifact sha256, wasmtime version, engine settings): a compiled
artifact never loads into an engine it was not made for.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import threading
from pathlib import Path
from typing import Literal

import wasmtime
from wasmtime import component

from wasm_runner.engine.engines import EngineSettings, get_engine
from wasm_runner.lowlevel import WASMTIME_VERSION

Kind = Literal["module", "component"]
Compiled = wasmtime.Module | component.Component

_loaded: dict[tuple[str, EngineSettings], Compiled] = {}
_lock = threading.Lock()


def cache_dir() -> Path:
    """Where compiled artifacts live: $WASM_RUNNER_CACHE or ~/.cache/wasm-runner."""
    root = os.environ.get("WASM_RUNNER_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "wasm-runner"
    )
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def compiled_path(sha256: str, kind: Kind, settings: EngineSettings | None = None) -> Path:
    settings = settings or EngineSettings()
    """Where the compiled form of the artifact with this hash is cached (and mapped from)."""
    return cache_dir() / f"{sha256[:32]}-{kind}-wasmtime{WASMTIME_VERSION}-{settings.cache_key()}.cwasm"


def load_compiled(wasm: Path, sha256: str, kind: Kind, settings: EngineSettings | None = None) -> Compiled:
    """Return the compiled form of `wasm` for the engine of `settings`, compiling at most once.

    `sha256` is the pinned hash of `wasm`; a mismatch raises before anything runs.
    """
    settings = settings or EngineSettings()
    key = (sha256, settings)
    with _lock:
        if key in _loaded:
            return _loaded[key]
        engine = get_engine(settings)
        cwasm = compiled_path(sha256, kind, settings)
        loader = component.Component if kind == "component" else wasmtime.Module
        if not cwasm.exists():
            _compile_to(cwasm, wasm, sha256, loader, engine)
        compiled = loader.deserialize_file(engine, str(cwasm))
        _loaded[key] = compiled
        return compiled


def load_file(cwasm: Path, kind: Kind, settings: EngineSettings | None = None) -> Compiled:
    """A compiled file this wasmtime made for the engine of `settings` (a derived copy of one
    `load_compiled` made), mapped once per process."""
    settings = settings or EngineSettings()
    key = (str(cwasm), settings)
    with _lock:
        if key not in _loaded:
            loader = component.Component if kind == "component" else wasmtime.Module
            _loaded[key] = loader.deserialize_file(get_engine(settings), str(cwasm))
        return _loaded[key]


def _compile_to(cwasm: Path, wasm: Path, sha256: str,
                loader: type[wasmtime.Module] | type[component.Component], engine: wasmtime.Engine) -> None:
    # A file lock so that parallel processes (test workers, servers) compile once.
    with open(cwasm.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if cwasm.exists():
            return
        actual = sha256_file(wasm)
        if actual != sha256:
            raise RuntimeError(
                f"{wasm} has sha256 {actual}, expected {sha256}: the artifact is not the pinned one; "
                "reinstall it with `wasm-runner prepare`"
            )
        compiled = loader.from_file(engine, str(wasm))
        tmp = cwasm.with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(compiled.serialize())
        os.replace(tmp, cwasm)
