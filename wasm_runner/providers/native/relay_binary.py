"""The sandbox's egress relay compiled from C (egress_relay.c), once, into the cache.

A native run with a network socket starts its program behind the relay; the Python relay
(egress_relay.py) costs the system python3's start, 12-17 ms on this kind of machine, on every
such run. Where a C compiler is, `ensure_relay()` builds the C twin once (named by its source's
digest, so a changed source is built again) and runs use it; where none is, they keep the Python
relay. The build runs the system's `cc` with fixed arguments: nothing of a request reaches it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from wasm_runner.providers.native.toolchain import cache_root

SOURCE = Path(__file__).with_name("egress_relay.c")
log = logging.getLogger("wasm_runner.native")
_lock = threading.Lock()
_tried: dict[Path, Path | None] = {}


def relay_path() -> Path:
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    return cache_root() / "egress-relay" / f"egress-relay-{digest}"


def ensure_relay() -> Path | None:
    """The compiled relay (built on first use), or None where it cannot be built (no compiler):
    runs then use the Python relay. A failed build is tried once per process."""
    path = relay_path()
    with _lock:
        if path in _tried:
            return _tried[path]
        built = path if os.access(path, os.X_OK) else _build(path)
        _tried[path] = built
        return built


def _build(path: Path) -> Path | None:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        log.info("no C compiler: native runs use the Python egress relay")
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".egress-relay-")
    os.close(fd)
    try:
        done = subprocess.run([compiler, "-O2", "-o", temp, str(SOURCE)], capture_output=True, timeout=120,
                              check=False, env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
        if done.returncode != 0:
            log.warning("the C egress relay did not build (native runs use the Python one): %s",
                        done.stderr.decode(errors="replace").strip()[-500:])
            return None
        os.chmod(temp, 0o755)
        os.replace(temp, path)
        return path
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("the C egress relay did not build (native runs use the Python one): %s", exc)
        return None
    finally:
        if os.path.exists(temp):
            os.unlink(temp)
