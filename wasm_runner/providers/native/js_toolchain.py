"""The JavaScript/TypeScript toolchain: Node.js, bun, tsc, Biome and uv in one prefix, built once.

`ensure_js_toolchain()` downloads the artifacts pinned in
wasm_runner/_runtimes/native/js-toolchain.toml (wheels from PyPI through pip with
`--require-hashes`, tarballs from the npm registry checked against sha256), unpacks them into
one prefix with a `bin/` of relative links, and writes a marker naming the pin file's sha256
and each tool's version. Later calls return at once; nothing is downloaded at run time. The
sandbox mounts the prefix read-only at /opt/js-toolchain with its bin/ first on PATH.

Build it with `wasm-runner prepare`, or `python -m wasm_runner.providers.native prepare`.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wasm_runner.manifests import RUNTIMES_DIR
from wasm_runner.providers.native.toolchain import ToolchainError, cache_root

log = logging.getLogger("wasm_runner.native")

PINS = RUNTIMES_DIR / "native" / "js-toolchain.toml"
MARKER = ".wasm-runner-ready.json"
GUEST_JS_TOOLCHAIN = "/opt/js-toolchain"
NPM_REGISTRY = "https://registry.npmjs.org"
VERSION_ARGS = {"node": ["--version"], "bun": ["--version"], "tsc": ["--version"], "biome": ["--version"],
                "uv": ["--version"]}
DOWNLOAD_TIMEOUT_S = 120


@dataclass(frozen=True)
class JsToolchain:
    """A built toolchain: its prefix and the version of each tool."""

    path: Path
    versions: dict[str, str]

    def host_path(self, tool: str) -> Path:
        return self.path / "bin" / tool

    @staticmethod
    def guest_path(tool: str) -> str:
        return f"{GUEST_JS_TOOLCHAIN}/bin/{tool}"


def js_toolchain_dir() -> Path:
    """Where the prefix lives: $WASM_RUNNER_JS_TOOLCHAIN, else <cache>/js-toolchain."""
    explicit = os.environ.get("WASM_RUNNER_JS_TOOLCHAIN")
    return Path(explicit) if explicit else cache_root() / "js-toolchain"


def _pins(pins: Path = PINS) -> tuple[dict[str, Any], str]:
    data = pins.read_bytes()
    return tomllib.loads(data.decode("utf-8")), hashlib.sha256(data).hexdigest()


def find_js_toolchain(path: Path | None = None, pins: Path = PINS) -> JsToolchain | None:
    """The built toolchain if it is complete and matches the pins, else None."""
    path = path or js_toolchain_dir()
    try:
        marker = json.loads((path / MARKER).read_text())
        current = hashlib.sha256(pins.read_bytes()).hexdigest()  # the pins' digest alone: no parse per run
    except (OSError, ValueError):
        return None
    if marker.get("pins_sha256") != current:
        return None
    versions = marker.get("versions", {})
    if not all((path / "bin" / tool).exists() for tool in versions):
        return None
    return JsToolchain(path, versions)


def ensure_js_toolchain(*, path: Path | None = None, pins: Path = PINS, force: bool = False,
                        quiet: bool = True) -> JsToolchain:
    """Build the toolchain unless an up-to-date one exists; return it. Raises ToolchainError."""
    path = path or js_toolchain_dir()
    if not force:
        found = find_js_toolchain(path, pins)
        if found is not None:
            return found
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f".{path.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel builders build it once
        if not force:
            found = find_js_toolchain(path, pins)
            if found is not None:
                return found
        return _build(path, pins, quiet)


def _build(path: Path, pins: Path, quiet: bool) -> JsToolchain:
    spec, digest = _pins(pins)
    log.info("building the JavaScript toolchain in %s", path)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}-", dir=path.parent))
    try:
        requirements = staging / "requirements.txt"
        requirements.write_text("".join(f"{name}=={pin['version']} --hash=sha256:{pin['sha256']}\n"
                                        for name, pin in spec["pypi"].items()))
        pip = [sys.executable, "-m", "pip", "install", "--no-input", "--disable-pip-version-check", "--no-deps",
               "--only-binary", ":all:", "--require-hashes", "--target", str(staging / "pypi"), "-r", str(requirements)]
        if quiet:
            pip.append("--quiet")
        done = subprocess.run(pip, check=False, capture_output=True, text=True)
        if done.returncode != 0:
            tail = "\n".join(done.stderr.strip().splitlines()[-10:])
            raise ToolchainError(f"could not install the pinned wheels (needs access to PyPI):\n{tail}")
        for name, pin in spec["npm"].items():
            _unpack_npm(name, pin["version"], pin["sha256"], staging / "npm" / name)
        (staging / "bin").mkdir()
        for tool, target in spec["bin"].items():
            if not (staging / target).is_file():
                raise ToolchainError(f"the toolchain has no {target} for {tool}")
            (staging / target).chmod(0o755)
            os.symlink(os.path.join("..", target), staging / "bin" / tool)
        os.chmod(staging, 0o755)
        versions = {tool: _version(staging / "bin" / tool, staging / "bin") for tool in spec["bin"]}
        (staging / MARKER).write_text(json.dumps({"pins_sha256": digest, "versions": versions}))
        if path.exists():
            shutil.rmtree(path)
        os.replace(staging, path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    log.info("JavaScript toolchain ready in %s: %s", path, versions)
    return JsToolchain(path, versions)


def _unpack_npm(name: str, version: str, sha256: str, into: Path) -> None:
    """Download an npm package's tarball, check its sha256, unpack its `package/` into `into`."""
    url = f"{NPM_REGISTRY}/{name}/-/{name.rsplit('/', 1)[-1]}-{version}.tgz"
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:  # noqa: S310 - a fixed https URL
            data = response.read()
    except OSError as exc:
        raise ToolchainError(f"could not download {url} (needs access to the npm registry): {exc}") from exc
    actual = hashlib.sha256(data).hexdigest()
    if actual != sha256:
        raise ToolchainError(f"{url} has sha256 {actual}, expected {sha256}: not the pinned {name} {version}")
    into.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar.getmembers():
            if not member.name.startswith("package/") or not (member.isfile() or member.isdir()):
                continue  # npm tarballs hold package/ only; links are not followed or made
            member.name = member.name.removeprefix("package/")
            tar.extract(member, into, filter="data")


def _version(executable: Path, bin_dir: Path) -> str:
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": "/nonexistent"}
    try:
        done = subprocess.run([str(executable), *VERSION_ARGS.get(executable.name, ["--version"])], check=False,
                              capture_output=True, text=True, timeout=60, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolchainError(f"{executable} does not run here: {exc}") from exc
    text = (done.stdout or done.stderr).strip()
    if done.returncode != 0 or not text:
        raise ToolchainError(f"{executable} --version failed: {text[-500:]}")
    match = re.search(r"\d+(?:\.\d+)+", text)
    return match.group(0) if match else text.splitlines()[0][:80]
