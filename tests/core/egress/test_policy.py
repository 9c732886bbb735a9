"""The host's egress decisions: entries, private ranges, narrowing, resolution and credentials."""

import ipaddress

import pytest

from wasm_runner.egress import CredentialBroker, EgressRules, MissingSecretError, PolicyError, Resolver, parse_destination
from wasm_runner_protocol.egress import Credential, EgressPolicy


def rules(mode: str = "allowlist", *allow: str) -> EgressRules:
    return EgressRules(EgressPolicy(mode=mode, allow=allow))  # type: ignore[arg-type]


@pytest.mark.parametrize("entry", ["", "*", "a.*.b", "ftp://x.org", "x.org:0", "x.org:70000", "x.org:http", "[::1",
                                   "10.0.0.0/33", "a..b", "x.org/path"])
def test_malformed_entries_are_refused_with_the_entry_named(entry):
    with pytest.raises(PolicyError) as caught:
        parse_destination(entry)
    assert repr(entry) in str(caught.value) or "not a" in str(caught.value)


def test_names_wildcards_ports_and_schemes():
    r = rules("allowlist", "api.example.com", "*.cdn.example.net", "https://secure.example.org:8443")
    assert r.refusal("https", "API.Example.COM.", 443) is None
    assert r.refusal("http", "api.example.com", 80) is None
    assert r.refusal("https", "a.b.cdn.example.net", 443) is None
    assert r.refusal("https", "cdn.example.net", 443) is not None  # the wildcard is below the suffix only
    assert r.refusal("https", "evilapi.example.com", 443) is not None
    assert r.refusal("https", "secure.example.org", 8443) is None
    assert r.refusal("http", "secure.example.org", 8443) is not None
    assert r.refusal("https", "secure.example.org", 443) is not None
    assert "allowlist" in (r.refusal("https", "other.test", 443) or "")


def test_an_entry_without_a_port_allows_its_schemes_default_port_only():
    r = rules("allowlist", "api.example.com", "http://plain.example.com", "[2001:db8::1]", "203.0.113.0/24")
    assert r.refusal("https", "api.example.com", 443) is None and r.refusal("http", "api.example.com", 80) is None
    assert r.refusal("https", "api.example.com", 22) is not None  # CONNECT to SSH: not through this entry
    assert r.refusal("http", "api.example.com", 443) is not None
    assert r.refusal("http", "plain.example.com", 80) is None and r.refusal("http", "plain.example.com", 8080) is not None
    assert r.refusal("https", "2001:db8::1", 443) is None and r.refusal("https", "2001:db8::1", 5432) is not None
    assert r.refusal("https", "203.0.113.9", 443) is None and r.refusal("https", "203.0.113.9", 6379) is not None
    assert rules("open").refusal("https", "any.example", 22) is None  # open: any port of a public address


def test_a_star_port_allows_every_port_and_only_it_covers_them():
    r = rules("allowlist", "git.example.com:*", "[::1]:*")
    assert r.refusal("https", "git.example.com", 22) is None and r.refusal("http", "git.example.com", 9418) is None
    assert rules("allowlist", "127.0.0.1:*").address_refusal(ipaddress.ip_address("127.0.0.1"), 5432, "https") is None
    assert rules("allowlist", "127.0.0.1").address_refusal(ipaddress.ip_address("127.0.0.1"), 5432, "https") is not None
    assert rules("allowlist", "x.example.com:*").narrowed(EgressPolicy(mode="allowlist", allow=("x.example.com:22",)))
    with pytest.raises(PolicyError, match="not within"):
        rules("allowlist", "x.example.com").narrowed(EgressPolicy(mode="allowlist", allow=("x.example.com:*",)))
    with pytest.raises(PolicyError, match="not within"):
        rules("allowlist", "x.example.com").narrowed(EgressPolicy(mode="allowlist", allow=("x.example.com:22",)))
    with pytest.raises(PolicyError, match="not within"):  # :443 is http on 443 too, which the entry does not allow
        rules("allowlist", "x.example.com").narrowed(EgressPolicy(mode="allowlist", allow=("x.example.com:443",)))
    assert rules("allowlist", "x.example.com").narrowed(EgressPolicy(mode="allowlist", allow=("https://x.example.com:443",)))


def test_deny_refuses_everything_and_open_refuses_only_by_address():
    assert rules("deny").refusal("https", "example.com", 443) == "the network policy is deny"
    open_ = rules("open")
    assert open_.refusal("https", "anything.example", 443) is None
    assert open_.refusal("ftp", "anything.example", 21) is not None


@pytest.mark.parametrize("address", ["127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254",
                                     "::1", "fc00::1", "fe80::1", "::ffff:127.0.0.1", "0.0.0.0", "100.64.0.1",
                                     # IPv4 inside IPv6: NAT64 (well-known and local), 6to4, IPv4-compatible
                                     "64:ff9b::a9fe:a9fe", "64:ff9b:1::a00:1", "2002:a00:1::1", "::a00:1",
                                     "fec0::1", "198.18.0.1", "224.0.0.1", "ff02::1"])
def test_private_loopback_link_local_and_metadata_addresses_need_an_entry_naming_them(address):
    ip = ipaddress.ip_address(address)
    assert rules("open").address_refusal(ip, 80, "http") is not None
    assert rules("allowlist", "api.example.com").address_refusal(ip, 80, "http") is not None
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped else ip
    network = f"{mapped}/{mapped.max_prefixlen}"
    assert rules("allowlist", network).address_refusal(ip, 80, "http") is None
    with_port = f"[{mapped}]:81" if mapped.version == 6 else f"{mapped}:81"
    assert rules("allowlist", with_port).address_refusal(ip, 80, "http") is not None


def test_documentation_addresses_are_reachable_like_public_ones():
    """Routed nowhere on the internet; some networks put the proxies of the services they let through there."""
    for address in ("203.0.113.80", "198.51.100.7", "2001:db8::1"):
        assert rules("open").address_refusal(ipaddress.ip_address(address), 443, "https") is None


def test_an_open_profile_cannot_be_narrowed_into_naming_a_translated_or_restricted_range():
    for entry in ("64:ff9b::/96", "2002::/16", "100.64.0.0/10", "fec0::/10"):
        with pytest.raises(PolicyError, match="not within"):
            rules("open").narrowed(EgressPolicy(mode="open", allow=(entry,)))
    assert rules("open").narrowed(EgressPolicy(mode="open", allow=("93.184.215.0/24",)))


def test_public_addresses_pass_the_address_check():
    assert rules("open").address_refusal(ipaddress.ip_address("93.184.215.14"), 443, "https") is None
    assert rules("open").address_refusal(ipaddress.ip_address("2606:4700::1111"), 443, "https") is None


def test_resolution_is_checked_after_dns_so_a_name_cannot_reach_a_private_address():
    resolver = Resolver({"api.allowed.test": ["127.0.0.1"], "mixed.test": ["127.0.0.1", "93.184.215.14"]})
    plan = resolver.plan(rules("allowlist", "api.allowed.test:8080"), "http", "api.allowed.test", 8080)
    assert not plan.allowed and "127.0.0.1" in (plan.refusal or "")
    plan = resolver.plan(rules("allowlist", "api.allowed.test:8080", "127.0.0.1:8080"), "http", "api.allowed.test", 8080)
    assert plan.allowed and [str(a) for a in plan.addresses] == ["127.0.0.1"]
    plan = resolver.plan(rules("open"), "https", "mixed.test", 443)
    assert plan.allowed and [str(a) for a in plan.addresses] == ["93.184.215.14"]  # only the checked address
    plan = resolver.plan(rules("allowlist", "127.0.0.1"), "http", "evil.test", 80)
    assert not plan.allowed and "allowlist" in (plan.refusal or "")


def test_a_name_that_does_not_resolve_is_refused_with_the_reason():
    plan = Resolver().plan(rules("open"), "https", "no-such-name.invalid", 443)
    assert not plan.allowed and "does not resolve" in (plan.refusal or "")


def test_bad_resolver_overrides_are_refused():
    with pytest.raises(ValueError, match="IP addresses"):
        Resolver({"x.test": ["not-an-ip"]})


@pytest.mark.parametrize(("profile", "requested"), [
    (("allowlist", "api.example.com"), ("deny",)),
    (("allowlist", "*.example.com"), ("allowlist", "https://api.example.com:443", "*.cdn.example.com")),
    (("allowlist", "10.0.0.0/8"), ("allowlist", "10.1.0.0/16", "10.2.3.4")),
    (("allowlist", "api.example.com"), ("allowlist", "https://api.example.com")),
    (("open",), ("allowlist", "anything.example")),
    (("open", "127.0.0.0/8"), ("open", "127.0.0.1")),
])
def test_a_request_may_narrow_its_profile(profile, requested):
    policy = EgressPolicy(mode=requested[0], allow=requested[1:])
    assert rules(*profile).narrowed(policy) == policy


@pytest.mark.parametrize(("profile", "requested", "says"), [
    (("deny",), ("allowlist", "api.example.com"), "deny"),
    (("allowlist", "api.example.com"), ("open",), "cannot make it open"),
    (("allowlist", "api.example.com:443"), ("allowlist", "api.example.com"), "not within"),
    (("allowlist", "*.example.com"), ("allowlist", "example.com"), "not within"),
    (("allowlist", "https://api.example.com"), ("allowlist", "api.example.com"), "not within"),
    (("allowlist", "10.0.0.0/16"), ("allowlist", "10.0.0.0/8"), "not within"),
    (("open",), ("allowlist", "127.0.0.1"), "not within"),
])
def test_a_request_cannot_widen_its_profile(profile, requested, says):
    with pytest.raises(PolicyError, match=says):
        rules(*profile).narrowed(EgressPolicy(mode=requested[0], allow=requested[1:]))


def test_credentials_are_added_only_for_their_destinations_and_redacted(monkeypatch, tmp_path):
    monkeypatch.setenv("TEST_TOKEN", "s3cr3t-value")
    (tmp_path / "key").write_text("file-secret\n")
    broker = CredentialBroker([
        Credential(destinations=("api.github.test",), env="TEST_TOKEN"),
        Credential(destinations=("https://*.store.test",), header="X-Api-Key", template="{secret}", file=str(tmp_path / "key")),
    ])
    assert broker.headers_for("https", "api.github.test", 443) == {"Authorization": "Bearer s3cr3t-value"}
    assert broker.headers_for("http", "api.github.test", 80) == {}  # no scheme named: never in cleartext
    assert broker.headers_for("https", "eu.store.test", 443) == {"X-Api-Key": "file-secret"}
    assert broker.headers_for("http", "eu.store.test", 80) == {}
    assert broker.headers_for("https", "evil.test", 443) == {}
    assert broker.redact("token s3cr3t-value and file-secret") == "token [redacted] and [redacted]"
    monkeypatch.delenv("TEST_TOKEN")
    with pytest.raises(MissingSecretError, match="TEST_TOKEN"):
        broker.headers_for("https", "api.github.test", 443)


def test_a_credential_goes_over_plain_http_only_to_a_destination_that_says_http():
    cleartext = CredentialBroker([Credential(destinations=("http://api.local.test",), env="PATH")])
    assert "Authorization" in cleartext.headers_for("http", "api.local.test", 80)
    assert cleartext.headers_for("https", "api.local.test", 443) == {}  # the scheme named is the only one


@pytest.mark.parametrize("address", [
    "::ffff:0:a01:203",  # SIIT (IPv4-translated) of 10.1.2.3
    "::ffff:0:7f00:1",  # SIIT of 127.0.0.1
    "2001:0:4136:e378:8000:63bf:3fff:fdd2",  # Teredo
    "2002:a01:203::1",  # 6to4 embedding 10.1.2.3
    "2002:7f00:1::1",  # 6to4 embedding 127.0.0.1
    "64:ff9b::a01:203",  # NAT64 of 10.1.2.3
    "64:ff9b::a9fe:a9fe",  # NAT64 of the metadata address 169.254.169.254
])
def test_ipv6_ranges_that_carry_an_ipv4_address_are_refused_unless_named(address):
    assert rules("open").address_refusal(ipaddress.ip_address(address), 443, "https") is not None
    assert rules("allowlist", f"[{address}]").address_refusal(ipaddress.ip_address(address), 443, "https") is None
