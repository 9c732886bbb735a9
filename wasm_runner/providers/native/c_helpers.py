"""The native tier's two small C programs, compiled once into the cache where a C compiler is.

- the egress relay (egress_relay.c) inside a sandbox with a network socket: the Python relay
  (egress_relay.py) costs the system python3's start, 12-17 ms on this kind of machine;
- the launcher (launch.c) on the host side of every sandboxed run: cgroup join, file-size cap,
  mount namespace, relay binds and the drop to the sandbox user in one process, where the shell
  chain (identity.py) runs five programs.

Each is named by its source's digest, so a changed source is built again; where none can be
built, runs keep the Python relay and the shell chain. The build runs the system's `cc` with
fixed arguments: nothing of a request reaches it.

The launcher runs with the service's privileges (root, for the native tier's sandboxes): a helper
is used only while it, its directory and the cache's root are this user's (or root's) and no one
else can write to them; another user who could replace it would run as the service.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import stat
import subprocess
import tempfile
import threading
from pathlib import Path

from wasm_runner.providers.native.toolchain import cache_root

RELAY_SOURCE = Path(__file__).with_name("egress_relay.c")
LAUNCH_SOURCE = Path(__file__).with_name("launch.c")
log = logging.getLogger("wasm_runner.native")
_lock = threading.Lock()
_tried: dict[Path, Path | None] = {}


def ensure_relay() -> Path | None:
    """The compiled egress relay (egress_relay.c), or None: runs then use the Python relay."""
    return ensure_compiled(RELAY_SOURCE)


def ensure_launcher() -> Path | None:
    """The compiled launcher (launch.c), or None: runs then start through the shell chain."""
    return ensure_compiled(LAUNCH_SOURCE)


def ensure_compiled(source: Path) -> Path | None:
    """`source` compiled (built on first use, named by its digest), or None where it cannot be
    built (no compiler). Looked for, and a failed build tried, once per process: every native
    run asks for the launcher."""
    with _lock:
        if source not in _tried:
            name = source.stem.replace("_", "-")
            path = cache_root() / name / f"{name}-{hashlib.sha256(source.read_bytes()).hexdigest()[:16]}"
            found = path if os.access(path, os.X_OK) else _build(source, path)
            _tried[source] = found if found is None or _trusted(found) else None
        return _tried[source]


def _trusted(path: Path) -> bool:
    """Whether only this user (or root) can change `path`, its directory and the cache's root (which
    may be a link to where the cache is; the helper and its directory may not)."""
    for each, st in ((path, os.lstat(path)), (path.parent, os.lstat(path.parent)), (cache_root(), os.stat(cache_root()))):
        if stat.S_ISLNK(st.st_mode) or st.st_uid not in (os.geteuid(), 0) or st.st_mode & 0o022:
            log.warning("%s is not used: %s can be changed by another user (owner uid %d, mode %o); native runs "
                        "use its fallback until only the service's user can write there", path.name, each,
                        st.st_uid, stat.S_IMODE(st.st_mode))
            return False
    return True


def _build(source: Path, path: Path) -> Path | None:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        log.info("no C compiler: native runs use the Python egress relay and the shell launcher")
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o755)  # whatever the umask: only this user writes where the helper lives
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.parent.name}-")
    os.close(fd)
    try:
        done = subprocess.run([compiler, "-O2", "-o", temp, str(source)], capture_output=True, timeout=120,
                              check=False, env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
        if done.returncode != 0:
            log.warning("%s did not build (native runs use its fallback): %s", source.name,
                        done.stderr.decode(errors="replace").strip()[-500:])
            return None
        os.chmod(temp, 0o755)
        os.replace(temp, path)
        return path
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("%s did not build (native runs use its fallback): %s", source.name, exc)
        return None
    finally:
        if os.path.exists(temp):
            os.unlink(temp)
