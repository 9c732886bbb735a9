"""Execution profiles: layered limits within the maxima, the environment allowlist, config files."""

from __future__ import annotations

import pytest

from wasm_runner.profiles import BUILTIN_PROFILES, ProfileError, Profiles, ProfilesConfig, load_profiles
from wasm_runner_protocol.egress import EgressPolicy
from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_protocol.execution import ExecRequest, Limits
from wasm_runner_protocol.wire import LimitsPatch

CONFIG = ProfilesConfig.model_validate({
    "limits": {"default": {"timeout_s": 5}, "max": {"timeout_s": 20, "fuel": 10**9}},
    "profiles": {"small": {"language": "javascript", "limits": {"timeout_s": 2}, "env": {"MODE": "x"},
                           "env_allowlist": ["MY_*"]}},
})


def test_limits_are_the_defaults_then_the_profile_then_the_request():
    profiles = Profiles(CONFIG)
    _, small = profiles.get("small")
    assert profiles.limits(small, None).timeout_s == 2
    assert profiles.limits(profiles.get("python")[1], None).timeout_s == 5
    assert profiles.limits(small, LimitsPatch(timeout_s=7)).timeout_s == 7
    assert profiles.limits(small, None).memory_bytes == Limits().memory_bytes


def test_native_tool_profiles_get_memory_for_their_tools_within_the_operators_maximum():
    default = Profiles(ProfilesConfig())
    for name in ("bash", "node", "typescript-native", "bun"):
        assert default.limits(default.get(name)[1], None).memory_bytes == 1024 * 1024 * 1024, name
    assert default.limits(default.get("python")[1], None).memory_bytes == Limits().memory_bytes
    capped = Profiles(ProfilesConfig.model_validate({"limits": {"max": {"memory_bytes": 512 * 1024 * 1024}}}))
    assert capped.limits(capped.get("bash")[1], None).memory_bytes == 512 * 1024 * 1024


@pytest.mark.parametrize("patch, code", [
    (LimitsPatch(timeout_s=21), "limit_exceeds_maximum"),
    (LimitsPatch(fuel=None), "limit_exceeds_maximum"),  # unmetered, where fuel has a cap
    (LimitsPatch(memory_bytes=1), "invalid_limits"),
])
def test_what_the_maxima_refuse_is_an_error_with_its_code(patch, code):
    profiles = Profiles(CONFIG)
    with pytest.raises(ProfileError) as refused:
        profiles.limits(profiles.get("small")[1], patch)
    assert refused.value.code == code


def test_the_environment_is_the_profiles_plus_allowlisted_names():
    profiles = Profiles(CONFIG)
    _, small = profiles.get("small")
    assert profiles.env(small, {"MY_NAME": "1"}) == {"MODE": "x", "MY_NAME": "1"}
    with pytest.raises(ProfileError) as refused:
        profiles.env(small, {"HOME": "/"})
    assert refused.value.code == "env_not_allowed" and "MY_*" in refused.value.hint


def test_an_unknown_profile_lists_the_known_ones():
    with pytest.raises(ProfileError) as refused:
        Profiles(CONFIG).get("nope")
    assert refused.value.code == "unknown_profile"
    assert refused.value.hint == f"available: {', '.join(sorted({*BUILTIN_PROFILES, 'small'}))}"


def test_a_request_takes_the_profiles_language_and_provider():
    profiles = Profiles()
    _, bash = profiles.get("bash")
    request = profiles.request(bash, language=None, code="echo", command=None, stdin="", env={}, limits=None,
                               fresh=False, id=None)
    assert (request.language, request.provider) == ("bash", "native")
    command = profiles.request(profiles.get("python")[1], language=None, code=None, command=["ls"], stdin="",
                               env={}, limits=None, fresh=False, id=None)
    assert command.provider == "native"


def test_a_config_file_gives_its_execution_sections_and_leaves_the_rest(tmp_path):
    path = tmp_path / "wasm-runner.toml"
    path.write_text('default_profile = "small"\n[server]\nport = 1\n[auth]\nenabled = false\n'
                    '[profiles.small]\nlanguage = "bash"\n')
    config = load_profiles(path)
    assert config.default_profile == "small" and config.all_profiles()["small"].language == "bash"
    assert load_profiles(None) == ProfilesConfig()


def network_profiles(network: object) -> Profiles:
    return Profiles(ProfilesConfig.model_validate({"profiles": {"net": {"language": "python", "network": network}}}))


def resolve_network(profiles: Profiles, network: EgressPolicy | None) -> ExecRequest:
    _, profile = profiles.get("net")
    return profiles.request(profile, language=None, code="", command=None, stdin="", env={}, limits=None,
                            fresh=False, id=None, network=network)


def test_profiles_deny_the_network_by_default_and_accept_the_mode_alone():
    assert Profiles().request(Profiles().get("python")[1], language=None, code="", command=None, stdin="", env={},
                              limits=None, fresh=False, id=None).egress == EgressPolicy(mode="deny")
    assert resolve_network(network_profiles("open"), None).egress == EgressPolicy(mode="open")


def test_a_request_narrows_its_profiles_network_and_cannot_widen_it():
    profiles = network_profiles({"mode": "allowlist", "allow": ["*.example.com", "127.0.0.1"]})
    narrowed = EgressPolicy(mode="allowlist", allow=("api.example.com",))
    assert resolve_network(profiles, narrowed).egress == narrowed
    with pytest.raises(ProfileError) as caught:
        resolve_network(profiles, EgressPolicy(mode="allowlist", allow=("evil.test",)))
    assert caught.value.code == ErrorCode.NETWORK_NOT_ALLOWED and "evil.test" in caught.value.message


@pytest.mark.parametrize(("network", "says"), [
    ({"mode": "allowlist"}, "at least one entry"),
    ({"mode": "deny", "allow": ["x.test"]}, "takes no allow entries"),
    ({"mode": "allowlist", "allow": ["ftp://x.test"]}, "scheme"),
    ({"mode": "open", "credentials": [{"destinations": ["x.test"]}]}, "exactly one of env or file"),
    ({"mode": "open", "credentials": [{"destinations": ["x.test"], "env": "T", "template": "Bearer"}]}, "{secret}"),
])
def test_malformed_network_settings_are_refused_at_load(network, says):
    with pytest.raises(ValueError, match=says):
        network_profiles(network)


def test_a_profiles_credentials_reach_the_request_as_references_only(monkeypatch):
    monkeypatch.setenv("NET_TOKEN", "never-in-the-request")
    profiles = network_profiles({"mode": "allowlist", "allow": ["api.github.test"],
                                 "credentials": [{"destinations": ["api.github.test"], "env": "NET_TOKEN"}]})
    request = resolve_network(profiles, None)
    assert request.credentials[0].env == "NET_TOKEN"
    assert "never-in-the-request" not in repr(request)


def test_a_profiles_policy_must_lie_within_its_session_max():
    with pytest.raises(ValueError, match="within session_max"):
        ProfilesConfig.model_validate({"profiles": {"p": {"network": {
            "mode": "allowlist", "allow": ["10.0.0.1"], "session_max": {"mode": "allowlist", "allow": ["10.0.0.2"]}}}}})
    one_line = ProfilesConfig.model_validate({"profiles": {"p": {"network": {"mode": "deny", "session_max": "open"}}}})
    profiles = Profiles(one_line)
    _, profile = profiles.get("p")
    assert profiles.egress(profile, None) == EgressPolicy(mode="deny")
    assert profiles.egress(profile, EgressPolicy(mode="open")) == EgressPolicy(mode="open")
    _, python = profiles.get("python")  # the built-ins: off until a session asks
    assert python.network.policy.mode == "deny" and python.network.ceiling.policy.mode == "open"
