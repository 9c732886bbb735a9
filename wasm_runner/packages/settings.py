"""The operator's package settings: where packages come from, the cache, and the limits of an install."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from wasm_runner_protocol.egress import EgressPolicy

PYPI_SIMPLE = "https://pypi.org/simple/"
PYPI_FILES = "files.pythonhosted.org"
NPM_REGISTRY = "https://registry.npmjs.org/"
GUEST_PYTHON_VERSION = "3.14"
"""The WebAssembly guest's CPython (componentize-py's build): wheels must accept it."""


@dataclass(frozen=True)
class PackageSettings:
    """Where installs resolve and download, and what bounds them (the Runner's, from the service config)."""

    python_index: str = PYPI_SIMPLE
    extra_indexes: tuple[str, ...] = ()
    file_hosts: tuple[str, ...] = (PYPI_FILES,)
    """Hosts the indexes link their files to (allowed with the indexes by the default policy)."""
    npm_registry: str = NPM_REGISTRY
    """Where npm and bun in native sandboxes install from by default."""
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
    """Names answered without DNS (name -> addresses), for pinned or private indexes."""

    def indexes(self, requested: str | None = None) -> tuple[str, ...]:
        return ((requested,) if requested else (self.python_index,)) + tuple(self.extra_indexes)

    def python_sources(self, requested_index: str | None = None) -> tuple[str, ...]:
        """Allow entries for the Python indexes and their file hosts, with the addresses pinned for them."""
        hosts = [_origin(url) for url in self.indexes(requested_index)] + list(self.file_hosts)
        return self._with_pinned(hosts)

    def npm_sources(self) -> tuple[str, ...]:
        """Allow entries for the npm registry, with the addresses pinned for it."""
        return self._with_pinned([_origin(self.npm_registry)])

    def default_policy(self, requested_index: str | None = None) -> EgressPolicy:
        """The policy installs follow when the caller gives none: the configured indexes and file hosts."""
        return EgressPolicy(mode="allowlist", allow=self.python_sources(requested_index))

    def install_policy(self, network: EgressPolicy) -> EgressPolicy:
        """What the host's installs for a session may reach: the configured indexes and file hosts whatever
        the session's mode (loopback or private ones included), plus what its own policy allows."""
        return _widened(network, self.python_sources())

    def sandbox_policy(self, network: EgressPolicy) -> EgressPolicy:
        """A native run's policy with the configured Python indexes and npm registry added, so that pip,
        uv, npm and bun in the sandbox install from them; `deny` stays deny (no way out at all)."""
        if network.mode == "deny":
            return network
        return _widened(network, self.python_sources() + self.npm_sources())

    def _with_pinned(self, hosts: list[str]) -> tuple[str, ...]:
        """`hosts` plus an address entry for each pinned address of theirs: a name alone never reaches a
        private or loopback address, an entry naming the address does."""
        entries = list(hosts)
        for host in hosts:
            parts = urlsplit(host if "://" in host else f"//{host}")
            name = (parts.hostname or "").lower()
            for address in self.resolver_overrides.get(name, ()):
                shown = f"[{address}]" if ":" in address else address
                entries.append(f"{shown}:{parts.port}" if parts.port else shown)
        return tuple(dict.fromkeys(entries))

    def to_config(self) -> dict[str, Any]:
        """As JSON (to a worker process)."""
        config = dataclasses.asdict(self)
        for name in ("cache_dir", "ca_bundle"):
            if config[name] is not None:
                config[name] = str(config[name])
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> PackageSettings:
        values = dict(config)
        for name in ("cache_dir", "ca_bundle"):
            if values.get(name) is not None:
                values[name] = Path(values[name])
        for name in ("extra_indexes", "file_hosts"):
            values[name] = tuple(values.get(name, ()))
        if values.get("uv") is not None:
            values["uv"] = tuple(values["uv"])
        values["resolver_overrides"] = {k: tuple(v) for k, v in values.get("resolver_overrides", {}).items()}
        return cls(**values)


def _origin(url: str) -> str:
    """scheme://host[:port] of a URL (its user information left out)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{host}:{parts.port}" if parts.port else f"{parts.scheme}://{host}"


def _widened(network: EgressPolicy, sources: tuple[str, ...]) -> EgressPolicy:
    allow = tuple(dict.fromkeys((*sources, *network.allow)))
    return EgressPolicy(mode="open" if network.mode == "open" else "allowlist", allow=allow)
