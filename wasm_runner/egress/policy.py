"""Egress decisions: whether a run may reach a destination, decided by the host.

`EgressRules` is a parsed `EgressPolicy` (entries checked once). A connection is allowed when its
scheme, host name and port pass the policy (`refusal`) and the address the host is about to
connect to passes it too (`address_refusal`): private, loopback, link-local and metadata
ranges only when an entry names an address or network containing them. Callers resolve first and
check the addresses they will use, so a name that changes its answer (DNS rebinding) gains nothing.
An entry without a port allows its scheme's default port only (80, 443; a CONNECT tunnel counts as
https), so an allowed host's other services (SSH, databases) are not reachable through a tunnel
unless an entry names their port or `:*`. `open` allows any port of a public address.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from functools import lru_cache

from wasm_runner.errors import InvalidRequestError
from wasm_runner_protocol.egress import EgressPolicy

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

RESTRICTED_NETWORKS: tuple[IPNetwork, ...] = tuple(ipaddress.ip_network(n) for n in (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
    "192.0.0.0/24", "192.168.0.0/16", "198.18.0.0/15", "224.0.0.0/4", "240.0.0.0/4",
    "::/96", "::1/128", "::ffff:0:0:0/96", "64:ff9b::/96", "64:ff9b:1::/48", "2001::/32", "2002::/16", "fc00::/7",
    "fe80::/10", "fec0::/10", "ff00::/8",
))
"""Reachable only when an entry names them: private, loopback, link-local (169.254.169.254, the
cloud metadata service, among them), shared, benchmarking, multicast and reserved ranges, and the
IPv6 ranges that carry an IPv4 address to a translator or relay (NAT64, SIIT's IPv4-translated
`::ffff:0:0:0/96`, 6to4, Teredo, IPv4-compatible), which could reach a private IPv4 address behind
it. (IPv4-mapped `::ffff:0:0/96` is checked as the IPv4 address it maps.) The documentation ranges are not among them:
routed nowhere on the internet, they are where some networks put the proxies of the services they
let through."""
SCHEMES = ("http", "https")
DEFAULT_PORTS = {"http": 80, "https": 443}


class PolicyError(InvalidRequestError):
    """An entry that is not a destination, or a policy wider than the one it must stay within."""


@dataclass(frozen=True)
class Destination:
    """One `allow` entry, parsed."""

    text: str
    scheme: str | None = None
    name: str | None = None
    """An exact host name (lower case), or a suffix when `wildcard`."""
    wildcard: bool = False
    network: IPNetwork | None = None
    port: int | None = None
    """The one port allowed; None: the scheme's default port (80 for http, 443 for https and
    CONNECT), or any port with `any_port`."""
    any_port: bool = False
    """Written `:*`: every port (an entry without a port would otherwise let CONNECT tunnel to,
    say, an allowed host's SSH port)."""

    def allows_port(self, scheme: str, port: int) -> bool:
        if self.any_port:
            return True
        if self.port is not None:
            return port == self.port
        return port == DEFAULT_PORTS.get(scheme)

    def port_pairs(self) -> frozenset[tuple[str, int]] | None:
        """The (scheme, port) pairs this entry allows; None: any port."""
        if self.any_port:
            return None
        schemes = (self.scheme,) if self.scheme is not None else SCHEMES
        return frozenset((s, self.port if self.port is not None else DEFAULT_PORTS[s]) for s in schemes)

    def matches_name(self, scheme: str, host: str, port: int) -> bool:
        if self.scheme is not None and scheme != self.scheme:
            return False
        if not self.allows_port(scheme, port):
            return False
        if self.network is not None:
            address = ip_or_none(host)
            return address is not None and address in self.network
        assert self.name is not None
        return host.endswith("." + self.name) if self.wildcard else host == self.name

    def covers(self, other: Destination) -> bool:
        """Everything `other` allows, this allows too."""
        if self.scheme is not None and other.scheme != self.scheme:
            return False
        mine, theirs = self.port_pairs(), other.port_pairs()
        if mine is not None and (theirs is None or not theirs <= mine):
            return False
        if self.network is not None:
            return other.network is not None and other.network.version == self.network.version \
                and other.network.subnet_of(self.network)  # type: ignore[arg-type]
        if other.network is not None or self.name is None or other.name is None:
            return False
        if not self.wildcard:
            return not other.wildcard and other.name == self.name
        return other.name.endswith("." + self.name) or (other.wildcard and other.name == self.name)


def ip_or_none(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None


def normalise_host(host: str) -> str:
    """Host names compare in lower case, without a final dot, IDNA-encoded."""
    host = host.strip().rstrip(".").lower()
    if ip_or_none(host) is not None:
        return str(ip_or_none(host))
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        raise PolicyError(f"{host!r} is not a valid host name") from None


@lru_cache(maxsize=4096)
def parse_destination(text: str) -> Destination:
    """An `allow` entry (see `wasm_runner_protocol.egress`), or PolicyError saying what is wrong."""
    rest, scheme = text.strip(), None
    if "://" in rest:
        scheme, rest = rest.split("://", 1)
        scheme = scheme.lower()
        if scheme not in SCHEMES:
            raise PolicyError(f"{text!r}: the scheme must be http or https")
        rest = rest.rstrip("/")
    if not rest or "/" in rest and ip_or_none(rest.split("/")[0]) is None:
        raise PolicyError(f"{text!r} is not a destination (a host name, *.suffix, an address or a network)")
    port_text: str | None = None
    if rest.startswith("["):  # [v6] or [v6]:port
        end = rest.find("]")
        if end < 0:
            raise PolicyError(f"{text!r}: unclosed [")
        host, tail = rest[1:end], rest[end + 1:]
        if tail:
            if not tail.startswith(":"):
                raise PolicyError(f"{text!r}: expected :PORT after ]")
            port_text = tail[1:]
    elif rest.count(":") == 1:
        host, port_text = rest.split(":")
    else:
        host = rest
    any_port = port_text == "*"
    port = parse_port(text, port_text) if port_text is not None and not any_port else None
    if "/" in host:
        try:
            return Destination(text, scheme, network=ipaddress.ip_network(host, strict=False), port=port,
                               any_port=any_port)
        except ValueError:
            raise PolicyError(f"{text!r}: not a network") from None
    address = ip_or_none(host)
    if address is not None:
        return Destination(text, scheme, network=ipaddress.ip_network(address), port=port, any_port=any_port)
    wildcard = host.startswith("*.")
    name = normalise_host(host[2:] if wildcard else host)
    if not name or "*" in name or not all(label and len(label) < 64 for label in name.split(".")):
        raise PolicyError(f"{text!r}: not a host name (a wildcard is only allowed as a leading '*.')")
    return Destination(text, scheme, name=name, wildcard=wildcard, port=port, any_port=any_port)


def parse_port(text: str, port_text: str) -> int:
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise PolicyError(f"{text!r}: the port must be a number from 1 to 65535, or * for any port")
    return int(port_text)


def restricted(address: IPAddress) -> bool:
    """Refused unless an entry names it: in RESTRICTED_NETWORKS."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in RESTRICTED_NETWORKS if network.version == address.version)


class EgressRules:
    """A policy with its entries parsed: the decisions for one run."""

    def __init__(self, policy: EgressPolicy) -> None:
        self.policy = policy
        self.entries = tuple(parse_destination(entry) for entry in policy.allow)

    @property
    def denies_all(self) -> bool:
        return self.policy.mode == "deny"

    def refusal(self, scheme: str, host: str, port: int) -> str | None:
        """Why the policy refuses this destination by its name (None: allowed so far)."""
        if scheme not in SCHEMES:
            return f"the scheme {scheme!r} is not allowed (http and https are)"
        if self.policy.mode == "deny":
            return "the network policy is deny"
        if self.policy.mode == "open":
            return None
        host = normalise_host(host)
        if any(entry.matches_name(scheme, host, port) for entry in self.entries):
            return None
        return f"{host}:{port} is not in the allowlist"

    def address_refusal(self, address: IPAddress, port: int, scheme: str) -> str | None:
        """Why the policy refuses connecting to this address for `scheme` (None: allowed)."""
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        named = any(entry.network is not None and address in entry.network and entry.allows_port(scheme, port)
                    and entry.scheme in (None, scheme) for entry in self.entries)
        if restricted(address) and not named:
            return f"{address} is a private, loopback or link-local address; an entry must name it to allow it"
        return None

    def narrowed(self, requested: EgressPolicy, whose: str = "the profile's") -> EgressPolicy:
        """`requested` if it allows nothing this policy does not; else PolicyError saying what is wider."""
        wider = self.wider_entries(requested, whose)
        if wider is not None:
            raise PolicyError(wider)
        return requested

    def wider_entries(self, requested: EgressPolicy, whose: str = "the profile's") -> str | None:
        """What `requested` allows beyond this policy, said for the caller (None: nothing); `whose`
        names this policy in the text ("the profile's", "the session's")."""
        rules = EgressRules(requested)  # parses: PolicyError on a malformed entry
        if requested.mode == "deny":
            return None
        if self.policy.mode == "deny":
            return f"{whose} network policy is deny: a request cannot open the network"
        if requested.mode == "open" and self.policy.mode != "open":
            return f"{whose} network policy is an allowlist: a request cannot make it open"
        for entry in rules.entries:
            if self.policy.mode == "open" and not names_restricted(entry):
                continue
            if not any(mine.covers(entry) for mine in self.entries):
                allowed = ", ".join(self.policy.allow) or "no entries"
                return f"{entry.text!r} is not within {whose} network policy ({allowed})"
        return None


def names_restricted(entry: Destination) -> bool:
    """The entry names an address or network overlapping a restricted range."""
    if entry.network is None:
        return False
    return any(entry.network.version == network.version and entry.network.overlaps(network)
               for network in RESTRICTED_NETWORKS)
