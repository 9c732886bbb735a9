"""Network policy on the wire: what a run may reach, and what it did reach.

A policy is `deny` (no network: the default), `allowlist` (only the destinations in `allow`)
or `open` (any public destination). An `allow` entry is one destination:

    api.example.com          an exact host name, on the default ports (80 for http, 443 for https)
    *.example.com            any name below example.com (not example.com itself)
    api.example.com:8443     one port only
    api.example.com:*        any port (a tunnel to any service of the host: name it only on purpose)
    https://api.example.com  one scheme only (http or https), optionally with a port
    203.0.113.7, 10.0.0.0/8  an address or a network (IPv6 in brackets with a port: [::1]:8080)

A CONNECT tunnel (how native tools reach https://) counts as https: without a port it reaches 443
only. `open` allows any port of any public address.

Private, loopback, link-local and cloud-metadata addresses are refused under every policy, even
`open`, unless an entry names an address or network that contains them: a name that resolves
to one is not enough. The host checks the address it actually connects to, after DNS, on every
connection and every redirect.
"""

from __future__ import annotations

from typing import Literal

import msgspec

EgressMode = Literal["deny", "allowlist", "open"]


class EgressPolicy(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Where a run may connect (see the module's doc for the entry syntax)."""

    mode: EgressMode = "deny"
    allow: tuple[str, ...] = ()
    """The destinations of an `allowlist`; with `open`, private addresses named here are reachable too."""


DENY = EgressPolicy()


class Credential(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """A secret the host adds to requests bound for `destinations`; the guest never sees it.

    The value is read by the host from its own environment (`env`) or a file (`file`) when a request
    is sent, never from a request. `template` places it in the header (`{secret}`). A destination
    without a scheme receives it over https only; `http://host` sends it in cleartext, explicitly."""

    destinations: tuple[str, ...]
    header: str = "Authorization"
    template: str = "Bearer {secret}"
    env: str | None = None
    file: str | None = None


class NetworkEvent(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One egress decision of a run: a connection or request, allowed or refused."""

    allowed: bool
    host: str
    port: int
    scheme: str = "https"
    method: str | None = None
    """For requests the host made or relayed as HTTP (not for tunnels, whose content it does not see)."""
    address: str | None = None
    """The address connected to (or the one refused), after DNS."""
    status: int | None = None
    bytes_sent: int = 0
    bytes_received: int = 0
    duration_ms: float = 0.0
    reason: str | None = None
    """Why it was refused, or what stopped it (a cap, an error)."""
    credential: bool = False
    """A brokered credential was added by the host."""
