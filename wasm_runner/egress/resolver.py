"""Name resolution for egress, and the host's decision on one connection.

The host resolves every name itself and connects only to addresses it has checked (`plan`), so
what the guest names and where the host connects cannot differ. `overrides` answers chosen names
from a table instead of DNS (an operator's pinned names, like curl's --resolve; tests use it to
point invented names at loopback servers).
"""

from __future__ import annotations

import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from wasm_runner.egress.policy import EgressRules, IPAddress, ip_or_none, normalise_host


@dataclass(frozen=True)
class Plan:
    """The host's decision on one connection: the addresses it may use, or why none."""

    host: str
    port: int
    scheme: str
    addresses: tuple[IPAddress, ...] = ()
    refusal: str | None = None

    @property
    def allowed(self) -> bool:
        return self.refusal is None


class Resolver:
    """getaddrinfo, with names pinned by `overrides` (name -> addresses) answered from the table."""

    def __init__(self, overrides: Mapping[str, Sequence[str]] | None = None) -> None:
        self.overrides: dict[str, tuple[IPAddress, ...]] = {}
        for name, addresses in (overrides or {}).items():
            parsed = tuple(ip_or_none(a) for a in ([addresses] if isinstance(addresses, str) else addresses))
            if not parsed or None in parsed:
                raise ValueError(f"resolver override {name!r}: give IP addresses, not {addresses!r}")
            self.overrides[normalise_host(name)] = parsed  # type: ignore[assignment]

    def resolve(self, host: str, port: int) -> tuple[IPAddress, ...]:
        """The addresses of `host` (an address itself if it is one); OSError when the name has none."""
        host = normalise_host(host)
        literal = ip_or_none(host)
        if literal is not None:
            return (literal,)
        pinned = self.overrides.get(host)
        if pinned is not None:
            return pinned
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        found = dict.fromkeys(ip_or_none(str(info[4][0])) for info in infos)
        return tuple(a for a in found if a is not None)

    def plan(self, rules: EgressRules, scheme: str, host: str, port: int) -> Plan:
        """Whether `rules` let the host connect to `host:port`, and to which of its addresses."""
        scheme = scheme.lower()
        try:
            host = normalise_host(host)
        except ValueError as exc:
            return Plan(host, port, scheme, refusal=str(exc))
        refusal = rules.refusal(scheme, host, port)
        if refusal is not None:
            return Plan(host, port, scheme, refusal=refusal)
        try:
            addresses = self.resolve(host, port)
        except OSError as exc:
            return Plan(host, port, scheme, refusal=f"{host} does not resolve ({exc.strerror or exc})")
        allowed = tuple(a for a in addresses if rules.address_refusal(a, port, scheme) is None)
        if not allowed:
            reason = rules.address_refusal(addresses[0], port, scheme) if addresses else f"{host} has no address"
            return Plan(host, port, scheme, addresses=addresses[:1], refusal=reason)
        return Plan(host, port, scheme, addresses=allowed)
