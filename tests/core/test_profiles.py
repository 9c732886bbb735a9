"""Execution profiles: layered limits within the maxima, the environment allowlist, config files."""

from __future__ import annotations

import pytest

from wasm_runner.profiles import BUILTIN_PROFILES, ProfileError, Profiles, ProfilesConfig, load_profiles
from wasm_runner_protocol.execution import Limits
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
