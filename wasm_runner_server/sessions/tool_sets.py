"""Session-bound tool sets: the tools a session's runs may use, chosen at its creation within its
profile's allowlist (narrowing only) and kept with the session, so a restart keeps them too."""

from __future__ import annotations

from collections.abc import Iterable

from wasm_runner.profiles import Profile
from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_protocol.tools import check_name
from wasm_runner_server.errors import ApiError

__all__ = ["run_allowlist", "session_tools"]


def session_tools(names: Iterable[str], profile_name: str, profile: Profile) -> list[str]:
    """The session's choice, checked: each a tool's name (422) within the profile's `tools` (403)."""
    chosen = sorted(set(names))
    for name in chosen:
        try:
            check_name(name)
        except ValueError as exc:
            raise ApiError(422, ErrorCode.VALIDATION_ERROR, f"tools: {exc}") from None
    if profile.tools is not None:
        wider = [name for name in chosen if name not in profile.tools]
        if wider:
            raise ApiError(403, ErrorCode.TOOL_NOT_ALLOWED,
                           f"the profile {profile_name!r} does not allow the tools {', '.join(wider)}",
                           f"choose among {', '.join(sorted(profile.tools)) or 'none'}, or use another profile")
    return chosen


def run_allowlist(profile: Profile, session_choice: list[str] | None) -> frozenset[str] | None:
    """The tool names a run of the session may use: the profile's allowlist narrowed by the session's
    choice (None: any)."""
    allowed = frozenset(profile.tools) if profile.tools is not None else None
    if session_choice is None:
        return allowed
    chosen = frozenset(session_choice)
    return chosen if allowed is None else chosen & allowed
