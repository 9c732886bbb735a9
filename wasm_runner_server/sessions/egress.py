"""A session's own network policy, and a call's: each stays within the one it lives under.

A session starts with its profile's policy; a creation request or a PATCH may give it another
within the profile's ceiling (its `session_max`, else its policy), or go back to the profile's with
null. A call may narrow its session's policy (or a one-shot run its profile's ceiling) for itself.
Wider than allowed is 403 network_not_allowed everywhere (the request is well formed: it asks for
more than it may have), naming the profiles whose policy would allow it where that helps; a
malformed policy is 422 validation_error.
"""

from __future__ import annotations

from collections.abc import Mapping

from wasm_runner.egress.policy import EgressRules, PolicyError
from wasm_runner.profiles import Profile
from wasm_runner_protocol.egress import EgressPolicy
from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_server.errors import ApiError


def body_policy(egress: EgressPolicy | str | None) -> EgressPolicy | None:
    """A request body's policy: decoding turns a mode given alone (`"open"`) into its policy already,
    so readers see one form (the object), as every answer gives it."""
    assert not isinstance(egress, str), "the wire expands an egress shorthand when it decodes a body"
    return egress


def check_shape(policy: EgressPolicy) -> None:
    """422 for a policy that is not one: a malformed entry, entries under deny, an empty allowlist."""
    try:
        EgressRules(policy)
    except PolicyError as exc:
        raise ApiError(422, ErrorCode.VALIDATION_ERROR, f"egress: {exc}",
                       'entries are host names, *.suffix, addresses or networks, optionally with :PORT') from None
    if policy.mode == "deny" and policy.allow:
        raise ApiError(422, ErrorCode.VALIDATION_ERROR, "egress: a deny policy takes no allow entries",
                       'use {"mode": "allowlist", "allow": [...]}, or {"mode": "deny"} alone')
    if policy.mode == "allowlist" and not policy.allow:
        raise ApiError(422, ErrorCode.VALIDATION_ERROR, "egress: an allowlist needs at least one entry in allow",
                       'e.g. {"mode": "allowlist", "allow": ["api.example.com:443"]}, or {"mode": "deny"}')


def within_profile(requested: EgressPolicy, profile_name: str, profile: Profile,
                   profiles: Mapping[str, Profile]) -> EgressPolicy:
    """`requested` if its shape is valid and it only narrows `profile`'s policy; else 422 (shape)
    or 403 saying what is wider and which of `profiles` allow it."""
    check_shape(requested)
    wider = profile.network.ceiling.wider_entries(requested)
    if wider is None:
        return requested
    allowing = allowing_profiles(profiles, requested)
    hint = (f"a session of a profile that allows it can: {', '.join(allowing)} (POST /v1/sessions with profile)"
            if allowing else "no profile on this server allows it; ask the operator for one")
    raise ApiError(403, ErrorCode.NETWORK_NOT_ALLOWED,
                   f"a session's network policy must stay within what its profile allows: {wider} "
                   f"(profile {profile_name!r})", hint)


def within_session(requested: EgressPolicy, session_policy: EgressPolicy) -> EgressPolicy:
    """`requested` (one call's policy) if its shape is valid and it only narrows the session's policy
    now; else 422 (shape) or 403 saying what is wider."""
    check_shape(requested)
    wider = EgressRules(session_policy).wider_entries(requested, "the session's")
    if wider is None:
        return requested
    raise ApiError(403, ErrorCode.NETWORK_NOT_ALLOWED, f"a call may only narrow its session's network policy: {wider}",
                   "GET /v1/sessions/{id} shows the session's policy; PATCH it (within its profile's) to widen it")


def allowing_profiles(profiles: Mapping[str, Profile], requested: EgressPolicy) -> list[str]:
    """The profiles whose network policy `requested` stays within, by name."""
    return sorted(name for name, profile in profiles.items() if profile.network.ceiling.wider_entries(requested) is None)


def at_start(built: EgressPolicy, current: EgressPolicy | None) -> EgressPolicy:
    """The policy a call runs under when it starts: the session's `current` one when it was changed
    while the call waited and stays within the one the call was `built` with (a narrowing reaches
    queued calls too); else the one it was built with."""
    if current is None or current == built:
        return built
    if EgressRules(built).wider_entries(current) is None:
        return current
    return built
