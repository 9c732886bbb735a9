"""Resolution on the host with uv (`uv pip compile`), for the guest's CPython, wheels only.

uv never builds here (`--no-build`: uv's `--only-binary :all:` that also runs no build backend to
read metadata; uv refuses both flags together): a package that has only a source distribution is
"not found" as a wheel and reported so. It runs with an environment of its own: no user
configuration, no cache of its own (the workspace cache is ours), no host secrets. Its input is a
file the host writes from checked fields only (grammar.py): the requested requirements and the
session's held pins, one PEP 508 requirement or `name==version` per line, so no
tenant text can become a requirement-file option (`-e`, `-r`, `-c`, `--find-links`). It runs as an
unprivileged user where the Runner gives `run_as` (providers/native/resolver_user.py), never root.
Its network is the install's egress proxy (`proxy`): every connection uv makes, to an index, a file
link or a redirect, is decided by the install policy. Its answer is a PEP 751 lock (pylock.toml):
names, versions, wheel URLs and sha256s, which the host checks field by field, then downloads,
checks and unpacks itself.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import tempfile
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

from wasm_runner.packages.grammar import checked_name, checked_pin_fields, checked_requirement, checked_url, invalid
from wasm_runner.packages.redaction import sanitized
from wasm_runner.packages.settings import GUEST_PYTHON_VERSION
from wasm_runner.packages.wheels import SDIST_HINT, WheelRefused

log = logging.getLogger("wasm_runner")

RunAs = Callable[[list[str], Path, dict[str, str]], tuple[list[str], dict[str, str]]]
"""How the resolver is started: (command, its private directory, environment) -> (command, environment)."""
"""(command, the resolution's directory, the executables in it to make reachable) -> the command to run:
how the resolver is started as another user (the Runner's: providers/native/resolver_user.py)."""

RESOLVER_PLATFORM = "x86_64-unknown-linux-gnu"
"""A platform whose wheels include native ones, so that a package that needs native code is found
and refused by name (with the hint) rather than reported missing."""


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    filename: str
    url: str
    sha256: str
    size: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "filename": self.filename, "url": self.url,
                "sha256": self.sha256, "size": self.size}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Pin:
        """A pin from stored data (a state file, a remembered resolution), its fields checked: data written
        before they were checked on the way in is refused here, where it would be used."""
        try:
            fields = (data["name"], data["version"], data["filename"], data["url"], data["sha256"], data.get("size"))
        except (KeyError, TypeError):
            raise invalid("a stored package entry lacks a field") from None
        checked_pin_fields(*fields)
        return cls(*fields)

    def checked(self) -> Pin:
        """This pin if every field fits its grammar (a lock's entry given by a caller); else WheelRefused."""
        checked_pin_fields(self.name, self.version, self.filename, self.url, self.sha256, self.size)
        return self


def parse_requirements(texts: tuple[str, ...] | list[str]) -> list[Requirement]:
    """PEP 508 requirements by name only: an option, a path or a URL would bypass the index."""
    return [checked_requirement(text) for text in texts]


def is_exact(requirement: Requirement) -> bool:
    """`name==version` (no wildcard, no marker): what it resolves to cannot change on the index... except
    for its dependencies' newer releases, which an exact request accepts as they were when first resolved."""
    specs = list(requirement.specifier)
    return (len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version
            and requirement.marker is None)


def resolve(requirements: list[Requirement], held: list[str], indexes: tuple[str, ...], *, timeout_s: float,
            proxy: str, uv: tuple[str, ...] | None = None, ca_bundle: str | None = None,
            run_as: RunAs | None = None) -> list[Pin]:
    """Pins for `requirements` (checked, by name) together with the `held` distributions (`name==version`
    made by `grammar.pinned_requirement`: what the session keeps must stay consistent with what it adds)
    from `indexes` (the first is the main index), every connection through the HTTP proxy at `proxy`;
    or WheelRefused."""
    for url in indexes:
        checked_url(url, what="index URL")
    with tempfile.TemporaryDirectory(prefix="wasm-runner-uv-") as home:
        wanted = os.path.join(home, "requirements.txt")
        _write_lines(wanted, [str(r) for r in requirements] + held)
        command = [*(uv or (_uv_binary(),)), "pip", "compile", wanted,
                   "--index-url", indexes[0], *(arg for extra in indexes[1:] for arg in ("--extra-index-url", extra)),
                   "--no-build", "--python-version", GUEST_PYTHON_VERSION,
                   "--python-platform", RESOLVER_PLATFORM, "--format", "pylock.toml", "--no-header",
                   "--no-annotate", "--no-cache", "--no-config", "--quiet", "--system-certs"]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "TMPDIR": home,
               "UV_PYTHON_DOWNLOADS": "never",
               "UV_NO_PROGRESS": "1", "NO_COLOR": "1", "UV_HTTP_TIMEOUT": str(max(1, int(timeout_s))),
               # every connection through the install's proxy, loopback ones included: no NO_PROXY
               "HTTP_PROXY": proxy, "HTTPS_PROXY": proxy, "ALL_PROXY": proxy,
               "http_proxy": proxy, "https_proxy": proxy, "all_proxy": proxy, "NO_PROXY": "", "no_proxy": ""}
        if ca_bundle:  # a copy: the resolver's user may not reach the operator's file
            env["SSL_CERT_FILE"] = shutil.copyfile(ca_bundle, os.path.join(home, "ca-bundle.pem"))
        for name in ("SSL_CERT_FILE", "SSL_CERT_DIR"):
            if name in os.environ and name not in env:  # the operator's trust
                env[name] = os.environ[name]
        if run_as is not None:
            command, env = run_as(command, Path(home), env)
        try:
            proc = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  env=env, timeout=timeout_s, cwd=home)
        except subprocess.TimeoutExpired:
            raise WheelRefused("timeout", f"resolving took longer than {timeout_s:g} s") from None
        except FileNotFoundError:
            raise WheelRefused("resolver_failed", "the resolver (uv) is not installed",
                               "pip install uv (see pyproject.toml)") from None
    if proc.returncode != 0:
        log.warning("uv pip compile failed (exit %s): %s", proc.returncode, proc.stderr[-4000:])
        raise _failure(sanitized(proc.stderr, home), [str(r) for r in requirements])
    return _pins(proc.stdout)


def _uv_binary() -> str:
    """uv's own executable (the `uv` package's): run directly, not through `python -m uv`, so that the
    resolver's user needs no view of this interpreter's site-packages."""
    try:
        from uv import find_uv_bin
    except ImportError:
        return shutil.which("uv") or "uv"
    return find_uv_bin()


def _write_lines(path: str, lines: list[str]) -> None:
    for line in lines:  # made from checked fields; checked again as the file's own grammar
        if not line or line.startswith("-") or any(c in line for c in "\r\n\x00\\"):
            raise invalid(f"not a requirement line: {line[:120]!r}")
    with open(path, "w", encoding="utf-8") as out:
        out.write("".join(f"{line}\n" for line in lines))


def _pins(pylock: str) -> list[Pin]:
    try:
        data = tomllib.loads(pylock)
    except tomllib.TOMLDecodeError:
        raise WheelRefused("resolver_failed", "the resolver gave an answer that is not a pylock.toml") from None
    pins = []
    for package in data.get("packages", []):
        name, version = checked_name(package.get("name")), package.get("version", "?")
        wheels = package.get("wheels") or []
        if not wheels:  # only an sdist (uv would have needed a build)
            sdist = package.get("sdist") or {}
            raise WheelRefused("sdist_only", f"{name} {version}: no wheel, only a source distribution "
                               f"({sdist.get('name') or sdist.get('url') or 'sdist'})", SDIST_HINT, name)
        pure = [w for w in wheels if _is_pure_url(w["url"])]
        wheel = (pure or wheels)[0]
        filename = wheel.get("name") or wheel["url"].rsplit("/", 1)[-1].split("#")[0]
        sha = (wheel.get("hashes") or {}).get("sha256")
        if not sha:
            raise WheelRefused("hash_mismatch", f"the index gave no sha256 for {filename}",
                               "use an index that publishes hashes (PEP 503 #sha256= fragments)")
        pins.append(Pin(name, version, filename, wheel["url"], sha, wheel.get("size")).checked())
    return pins


def _is_pure_url(url: str) -> bool:
    return url.split("#")[0].endswith("-none-any.whl")


_NOT_FOUND = re.compile(r"Because (\S+) was not found in the package registry")
_NO_WHEEL = re.compile(r"Wheels are required for `([^`]+)`|Because ([^\s=<>!~]+)\S* has no usable wheels")


def _failure(stderr: str, requirements: list[str]) -> WheelRefused:
    text = "\n".join(line for line in stderr.strip().splitlines() if not line.startswith("warning:"))
    short = text[-1500:]
    found = _NOT_FOUND.search(text)
    if found:
        return WheelRefused("not_found", f"{found.group(1)} was not found on the index", package=found.group(1))
    if "no wheels" in text or "has no usable wheels" in text or "only source distributions" in text.lower() \
            or "--only-binary" in text or "Building source distributions is disabled" in text:
        named = _NO_WHEEL.search(text)
        package = (named.group(1) or named.group(2)) if named else None
        return WheelRefused("no_compatible_wheel", f"no wheel{f' of {package}' if package else ''} for CPython "
                            f"{GUEST_PYTHON_VERSION} (a source distribution is never built on the host): {short}",
                            "use a version that ships a py3-none-any wheel, or `pip install` it in a native session "
                            "(profile `python-data`), which builds it inside the sandbox", package)
    if "timed out" in text or "operation timed out" in text.lower():
        return WheelRefused("timeout", f"the index did not answer in time: {short}")
    if "Failed to fetch" in text or "error sending request" in text or "Connection refused" in text:
        return WheelRefused("download_failed", f"the index could not be reached: {short}")
    if "No solution found" in text:
        return WheelRefused("not_found", f"no versions satisfy {', '.join(requirements)}: {short}")
    return WheelRefused("resolver_failed", f"resolving {', '.join(requirements)} failed: {short}")
