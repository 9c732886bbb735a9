"""The operator's package sources as egress policies: what installs and native sandboxes may reach."""

from wasm_runner.egress.policy import EgressRules
from wasm_runner.packages import PackageSettings
from wasm_runner_protocol.egress import EgressPolicy

SETTINGS = PackageSettings(python_index="http://pypi.internal:8080/simple/", file_hosts=("files.internal",),
                           npm_registry="https://npm.internal/", resolver_overrides={"pypi.internal": ("10.0.0.5",)})


def allowed(policy: EgressPolicy, scheme: str, host: str, port: int, address: str) -> bool:
    import ipaddress

    rules = EgressRules(policy)
    return rules.refusal(scheme, host, port) is None and \
        rules.address_refusal(ipaddress.ip_address(address), port, scheme) is None


def test_a_sandbox_under_deny_gets_no_registry():
    assert SETTINGS.sandbox_policy(EgressPolicy()) == EgressPolicy()


def test_a_sandbox_allowlist_gains_the_configured_indexes_file_hosts_and_npm_registry():
    policy = SETTINGS.sandbox_policy(EgressPolicy(mode="allowlist", allow=("api.example.com",)))
    assert policy.mode == "allowlist"
    assert allowed(policy, "https", "api.example.com", 443, "93.184.216.34")
    assert allowed(policy, "https", "npm.internal", 443, "93.184.216.34")
    assert allowed(policy, "https", "files.internal", 443, "93.184.216.34")
    assert allowed(policy, "http", "pypi.internal", 8080, "10.0.0.5")  # its pinned private address
    assert not allowed(policy, "http", "pypi.internal", 8080, "10.0.0.6")  # not pinned: private stays refused
    assert not allowed(policy, "https", "evil.example.com", 443, "93.184.216.34")


def test_an_open_policy_stays_open_and_reaches_the_pinned_private_index():
    for policy in (SETTINGS.sandbox_policy(EgressPolicy(mode="open")), SETTINGS.install_policy(EgressPolicy(mode="open"))):
        assert policy.mode == "open"
        assert allowed(policy, "https", "anything.example.com", 443, "93.184.216.34")
        assert allowed(policy, "http", "pypi.internal", 8080, "10.0.0.5")
        assert not allowed(policy, "http", "other.internal", 80, "10.0.0.7")


def test_installs_by_the_host_reach_the_python_sources_only():
    policy = SETTINGS.install_policy(EgressPolicy())
    assert policy.mode == "allowlist"
    assert allowed(policy, "http", "pypi.internal", 8080, "10.0.0.5")
    assert not allowed(policy, "https", "npm.internal", 443, "93.184.216.34")


def test_settings_cross_to_a_worker_process_unchanged():
    import json

    assert PackageSettings.from_config(json.loads(json.dumps(SETTINGS.to_config()))) == SETTINGS
