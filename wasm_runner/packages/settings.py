"""The operator's package settings: where packages come from, the cache, and the limits of an install."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from wasm_runner_protocol.egress import EgressPolicy

PYPI_SIMPLE = "https://pypi.org/simple/"
PYPI_FILES = "files.pythonhosted.org"
GUEST_PYTHON_VERSION = "3.14"
"""The WebAssembly guest's CPython (componentize-py's build): wheels must accept it."""


@dataclass(frozen=True)
class PackageSettings:
    """Where installs resolve and download, and what bounds them (the Runner's, from the service config)."""

    python_index: str = PYPI_SIMPLE
    extra_indexes: tuple[str, ...] = ()
    file_hosts: tuple[str, ...] = (PYPI_FILES,)
    """Hosts the indexes link their files to (allowed with the indexes by the default policy)."""
    cache_dir: Path | None = None
    """The content-addressed cache (per workspace below it); None: the Runner's data directory."""
    cache_quota_bytes: int = 2 * 1024**3
    """A workspace's cache; the least recently used artifacts go first when it is over."""
    max_install_bytes: int = 256 * 1024**2
    """Bytes one install may download."""
    max_install_s: float = 120.0
    """Wall time of one install: resolution and downloads together."""
    max_packages: int = 200
    """Distributions one session may hold."""
    max_unpacked_bytes: int = 1024**3
    """Bytes one wheel may unpack to (a zip bomb stops here)."""
    uv: tuple[str, ...] | None = None
    """The resolver's command (default: `python -m uv` of this interpreter)."""
    ca_bundle: Path | None = None
    """An extra CA bundle to trust for index downloads (a test's or an operator's private index)."""
    resolver_overrides: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def indexes(self, requested: str | None = None) -> tuple[str, ...]:
        return ((requested,) if requested else (self.python_index,)) + tuple(self.extra_indexes)

    def default_policy(self, requested_index: str | None = None) -> EgressPolicy:
        """The policy installs follow when the caller gives none: the configured indexes and file hosts."""
        hosts = []
        for url in (*self.indexes(requested_index),):
            parts = urlsplit(url)
            hosts.append(f"{parts.scheme}://{parts.netloc}")
        hosts.extend(self.file_hosts)
        return EgressPolicy(mode="allowlist", allow=tuple(dict.fromkeys(hosts)))
