"""The operator's egress settings: how the host resolves names, what it trusts, how much a run may move.

They belong to whoever runs guests (the Runner, the service's config), never to a request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wasm_runner.egress.resolver import Resolver

MiB = 1024 * 1024


@dataclass(frozen=True)
class EgressSettings:
    """Host-side egress settings shared by every run of a provider."""

    resolver: Resolver = field(default_factory=Resolver)
    """Name resolution, with the operator's pinned names (`Resolver(overrides=...)`)."""
    extra_ca_file: Path | None = None
    """A PEM bundle trusted besides the system's (an internal CA); native sandboxes trust it too,
    since they verify their own TLS through the proxy's tunnels."""
    max_bytes: int = 256 * MiB
    """Bytes a run may move through the network, both ways together; a transfer past it is cut."""
    connect_timeout_s: float = 10.0
    """How long the host waits for a destination to accept a connection (within the run's deadline)."""

    def __post_init__(self) -> None:
        if self.max_bytes < 0:
            raise ValueError("max_bytes must not be negative")
        if self.connect_timeout_s <= 0:
            raise ValueError("connect_timeout_s must be positive")
        if self.extra_ca_file is not None and not Path(self.extra_ca_file).is_file():
            raise ValueError(f"extra_ca_file {self.extra_ca_file} is not a file")

    def to_config(self) -> dict[str, Any]:
        """JSON-ready fields, for a worker process to rebuild the same settings (`from_config`)."""
        return {"resolver_overrides": {name: [str(a) for a in addresses]
                                       for name, addresses in self.resolver.overrides.items()},
                "extra_ca_file": None if self.extra_ca_file is None else str(self.extra_ca_file),
                "max_bytes": self.max_bytes, "connect_timeout_s": self.connect_timeout_s}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> EgressSettings:
        ca = config.get("extra_ca_file")
        return cls(resolver=Resolver(config.get("resolver_overrides") or {}),
                   extra_ca_file=None if ca is None else Path(ca), max_bytes=int(config["max_bytes"]),
                   connect_timeout_s=float(config["connect_timeout_s"]))
