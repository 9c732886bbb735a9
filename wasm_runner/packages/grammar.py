"""The grammar of every package field a host tool reads: checked before it is stored and where it is used.

A lock, a requirement or an index URL comes from a tenant (an API body, a replayed lock, the guest's
`sandbox.install`, a state file written by older code). Each field is held to its own grammar
(PEP 508 names, PEP 440 versions, http(s) URLs, sha256 hex, PEP 427 wheel filenames) so that no
newline, option (`-e`, `-r`, `--find-links`), path or URL can reach uv's input or the cache's file
names. A field that does not fit is refused with the field named, never repaired.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from wasm_runner.packages.wheels import WheelRefused

NAME = re.compile(r"\A([A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9])\Z")
"""PEP 508's name (ASCII letters, digits, `.`, `_`, `-`, starting and ending alphanumeric)."""
VERSION_TEXT = re.compile(r"\A[A-Za-z0-9.!+_-]{1,128}\Z")
"""The characters of a PEP 440 version as written (packaging itself tolerates surrounding space)."""
SHA256 = re.compile(r"\A[0-9a-f]{64}\Z")
FILENAME = re.compile(r"\A[A-Za-z0-9._+!-]{1,255}\Z")
MAX_NAME = 200
MAX_URL = 4096
MAX_REQUIREMENT = 512
_CONTROL = re.compile(r"[\x00-\x1f\x7f\\]")

FIX_HINT = 'name a package by name and version, e.g. "requests==2.32.3", or replay a lock taken from a session'


def invalid(message: str, package: str | None = None) -> WheelRefused:
    return WheelRefused("invalid_request", message, FIX_HINT, package)


def checked_name(name: object) -> str:
    """A PEP 508 distribution name, as given."""
    if not isinstance(name, str) or len(name) > MAX_NAME or not NAME.match(name):
        raise invalid(f"not a package name: {_shown(name)} (PEP 508: letters, digits, '.', '_', '-')")
    return name


def checked_version(version: object, package: str | None = None) -> str:
    """A PEP 440 version, as given."""
    if not isinstance(version, str) or not VERSION_TEXT.match(version):
        raise invalid(f"not a version: {_shown(version)}", package)
    try:
        Version(version)
    except InvalidVersion:
        raise invalid(f"not a PEP 440 version: {_shown(version)}", package) from None
    return version


def checked_sha256(sha256: object, package: str | None = None) -> str:
    if not isinstance(sha256, str) or not SHA256.match(sha256):
        raise invalid(f"not a sha256 digest (64 lowercase hex digits): {_shown(sha256)}", package)
    return sha256


def checked_url(url: object, package: str | None = None, what: str = "URL") -> str:
    """An absolute http(s) URL with a host and no whitespace, control character or backslash."""
    if not isinstance(url, str) or not url or len(url) > MAX_URL or _CONTROL.search(url) or " " in url:
        raise invalid(f"not a {what}: {_shown(url)}", package)
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        raise invalid(f"not a {what}: {_shown(url)}", package) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise invalid(f"not an http(s) {what}: {_shown(url)}", package)
    return url


def checked_filename(filename: object, name: str, version: str) -> str:
    """A wheel filename (PEP 427) whose name and version are the pin's; a non-wheel is left to the
    caller's check (a source distribution is refused with its own hint)."""
    if not isinstance(filename, str) or not FILENAME.match(filename):
        raise invalid(f"not a file name: {_shown(filename)}", name)
    if not filename.endswith(".whl"):
        return filename
    try:
        wheel_name, wheel_version, _, _ = parse_wheel_filename(filename)
    except InvalidWheelFilename as exc:
        raise WheelRefused("unsafe_wheel", f"{name}: {exc}", package=name) from None
    if wheel_name != canonicalize_name(name) or wheel_version != Version(version):
        raise WheelRefused("unsafe_wheel", f"{filename} is not {name} {version}: the file names "
                           f"{wheel_name} {wheel_version}", "replay the lock as a session gave it", name)
    return filename


def checked_pin_fields(name: object, version: object, filename: object, url: object, sha256: object,
                       size: object) -> None:
    """Every field of one locked distribution (a lock's entry, a state file's, a resolver's answer)."""
    checked = checked_name(name)
    checked_version(version, checked)
    checked_sha256(sha256, checked)
    checked_url(url, checked)
    checked_filename(filename, checked, str(version))
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
        raise invalid(f"not a size: {_shown(size)}", checked)


def checked_requirement(text: object) -> Requirement:
    """A PEP 508 requirement by name (extras, specifiers, markers): no option, path or URL."""
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_REQUIREMENT or _CONTROL.search(text):
        raise invalid(f"not a requirement: {_shown(text)}")
    if text.lstrip().startswith(("-", ".", "/", "~")):
        raise invalid(f"{_shown(text)} is an option or a path: only requirements by name are installed "
                      "(no -e, -r, -c, --index-url, files or directories)")
    try:
        requirement = Requirement(text)
    except InvalidRequirement as exc:
        raise WheelRefused("not_found", f"not a requirement: {_shown(text)} ({exc})",
                           'e.g. "requests==2.32.3" or "pyyaml>=6"') from None
    if requirement.url:
        raise WheelRefused("index_not_allowed", f"{_shown(text)} names a URL: packages come from the configured index")
    checked_name(requirement.name)
    return requirement


def pinned_requirement(name: str, version: str) -> str:
    """`name==version` for uv's constraints, from checked fields only."""
    return f"{canonicalize_name(checked_name(name))}=={checked_version(version, name)}"


def _shown(value: object) -> str:
    """The value for a message: quoted, bounded, its control characters escaped."""
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
