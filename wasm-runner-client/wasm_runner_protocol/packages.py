"""Packages on the wire: what a session asks to install, what was installed, and its lock.

An install is resolved and unpacked by the host; the guest sees the result read-only at
`PACKAGES_GUEST_PATH`. A failure is a result (`InstallResult.error`), never an exception.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

PACKAGES_GUEST_PATH = "/packages"
"""Where a WebAssembly guest sees its session's Python packages (read-only, on sys.path)."""

Source = Literal["cache", "download"]
# Patterns use \A...\Z: `$` would accept a trailing newline. A host tool reads these fields (uv, the
# cache's file names), so no control character, option or path gets past the wire.
Requirement = Annotated[str, Meta(min_length=1, max_length=512, pattern=r"\A[^\x00-\x1f\x7f\\\-./~][^\x00-\x1f\x7f\\]*\Z")]
"""A PEP 508 requirement by name: no control character, and not an option (`-e`, `-r`) or a path."""
Sha256 = Annotated[str, Meta(pattern=r"\A[0-9a-f]{64}\Z")]
Url = Annotated[str, Meta(min_length=1, max_length=4096, pattern=r"\Ahttps?://[^\s\\]+\Z")]
PackageName = Annotated[str, Meta(min_length=1, max_length=200,
                                  pattern=r"\A([A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9])\Z")]
PackageVersion = Annotated[str, Meta(min_length=1, max_length=128, pattern=r"\A[A-Za-z0-9.!+_-]+\Z")]
FileName = Annotated[str, Meta(min_length=1, max_length=255, pattern=r"\A[A-Za-z0-9._+!-]+\Z")]
MAX_REQUIREMENTS = 64

PackageErrorKind = Literal["not_found", "no_compatible_wheel", "native_code", "sdist_only", "denied_by_policy",
                           "index_not_allowed", "quota", "too_large", "timeout", "too_many_packages",
                           "hash_mismatch", "unsafe_wheel", "resolver_failed", "download_failed",
                           "unsupported_ecosystem", "invalid_request"]


class LockedPackage(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One distribution as installed: enough to fetch exactly it again."""

    name: PackageName
    version: PackageVersion
    filename: FileName
    sha256: Sha256
    size: Annotated[int, Meta(ge=0)]
    url: Url


class PackageLock(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A session's installed Python distributions, in install order; replayable in a new session."""

    python: Annotated[tuple[LockedPackage, ...], Meta(max_length=10_000)] = ()
    index: Url | None = None
    """The index the packages were resolved on (informational: replay fetches by url and hash)."""


class PackageRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """POST /v1/sessions/{id}/packages: requirement strings (`requests==2.32.3`, `pyyaml>=6`), or a lock."""

    python: Annotated[tuple[Requirement, ...], Meta(max_length=MAX_REQUIREMENTS)] = ()
    npm: Annotated[tuple[Requirement, ...], Meta(max_length=MAX_REQUIREMENTS)] = ()
    lock: PackageLock | None = None
    index: Url | None = None
    """Another Python index (a PEP 503 simple URL): only where the session's profile allows it."""


class InstalledPackage(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    name: str
    version: str
    sha256: str
    size: int
    source: Source
    filename: str


class PackageError(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    kind: PackageErrorKind
    message: str
    hint: str | None = None
    package: str | None = None


class InstallResult(msgspec.Struct, kw_only=True):
    """What an install did: the distributions now in the session (or why none were added)."""

    ok: bool
    installed: list[InstalledPackage] = msgspec.field(default_factory=list)
    error: PackageError | None = None
    duration_ms: float = 0.0
    index_requests: int = 0
    """Resolutions run on the index plus files downloaded for this install (0: all from the cache)."""
    lock: PackageLock = PackageLock()
