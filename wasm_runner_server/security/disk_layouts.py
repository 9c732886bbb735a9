"""Disk layouts: where a new session's /workspace is, decided once when it is created.

`[auth.disk_layout]` (or a workspace's own `[auth.workspace_disk_layouts.<name>]`) chooses, by the
kind of key creating the session:
- "session" (the default for both): a directory of the session's own;
- members "member-disk": the member's whole disk, `members/<member>` of the workspace's directory,
  the session working in `<agent>/<session id>` inside it; every session of that member sees the
  same host directory, so a file one writes is there for the others at once;
- apps "end-user": `end_users/<end user>/session-roots/<session id>`, this session's alone.
Every part of those paths is one checked name (1-64 letters, digits, '-' or '_'), never '..' or '/'.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_protocol.guest import NAME_PATTERN
from wasm_runner_protocol.wire import SessionCreate
from wasm_runner_server.errors import ApiError
from wasm_runner_server.http.policy import Principal
from wasm_runner_server.security.settings import DiskLayout

DEFAULT_AGENT = "default"
RESERVED_AGENTS = frozenset({"shared"})
"""/workspace/shared is the workspace's shared/ directory: no agent may work there."""
MEMBERS_DIR = "members"
END_USERS_DIR = "end_users"
_SEGMENT = re.compile(NAME_PATTERN)


@dataclass(frozen=True)
class Placement:
    disk: str = ""
    """The session's /workspace relative to its workspace's directory ("" for its own directory)."""
    workdir: str = ""
    """The guest's working directory under /workspace."""


OWN = Placement()


def segment(value: str, what: str) -> str:
    """`value` if it is one safe path part; a 422 naming `what` otherwise."""
    if not isinstance(value, str) or not _SEGMENT.match(value):
        raise ApiError(422, ErrorCode.VALIDATION_ERROR, f"{what} must be 1-64 letters, digits, '-' or '_' "
                       f"(got {value!r})", f"choose a {what} that is a plain name, e.g. 'analyst'")
    return value


def owned_by(disk: str) -> bool:
    """Whether the directory at `disk` goes with its session (an end user's session root does; a
    member's disk does not)."""
    return not disk.startswith(MEMBERS_DIR + "/")


def place(layout: DiskLayout, principal: Principal, body: SessionCreate, session_id: str) -> Placement:
    """Where a session `principal` creates with `body` keeps its /workspace; ApiError 4xx when the
    layout cannot place it (the answer says what to change). A temporary session starts from nothing:
    a directory of its own, whatever the layout."""
    if body.temporary or body.ephemeral:
        if body.agent is not None or body.end_user is not None:
            raise ApiError(422, ErrorCode.TEMPORARY_SESSION, "a temporary session starts from nothing: it is on "
                           "no member's disk and no end user's root", "leave `agent` and `end_user` out")
        return OWN
    placed = _place(layout, principal, body, session_id)
    if placed.disk and (body.template is not None or body.starter is not None):
        # a template or starter fills a directory of the session's own, which this session has not
        raise ApiError(422, ErrorCode.VALIDATION_ERROR, "a session on a member's disk or an end user's root "
                       "starts from what is there, not from a template or a starter",
                       "leave `template` and `starter` out (copy files in through the file API)")
    return placed


def _place(layout: DiskLayout, principal: Principal, body: SessionCreate, session_id: str) -> Placement:
    if principal.kind == "app":
        if body.agent is not None:
            raise ApiError(422, ErrorCode.VALIDATION_ERROR, "`agent` places a session on a member's disk; "
                           "app keys' sessions have none", "leave `agent` out")
        if layout.apps != "end-user":
            if body.end_user is not None:
                raise ApiError(422, ErrorCode.VALIDATION_ERROR, "`end_user` places a session among its end "
                               "user's, and this workspace gives app sessions each a directory of their own",
                               "leave `end_user` out")
            return OWN
        if body.end_user is None:
            raise ApiError(422, ErrorCode.VALIDATION_ERROR, "this workspace keeps each end user's sessions apart: "
                           "a session made with an app key names its `end_user`", 'add "end_user": "<id>" to the body')
        end_user = segment(body.end_user, "end_user")
        return Placement(f"{END_USERS_DIR}/{end_user}/session-roots/{segment(session_id, 'session id')}")
    if body.end_user is not None:
        raise ApiError(422, ErrorCode.VALIDATION_ERROR, "`end_user` is for sessions made with app keys",
                       "leave `end_user` out")
    if layout.members != "member-disk":
        if body.agent is not None:
            raise ApiError(422, ErrorCode.VALIDATION_ERROR, "this workspace gives each session a directory of its "
                           "own, not a member's disk with agents' directories", "leave `agent` out")
        return OWN
    if principal.member is None:
        raise ApiError(403, ErrorCode.MEMBER_REQUIRED, "this workspace keeps a disk per member, and this key "
                       "names no member", "create the key with `wasm-runner keys create --member <id>` "
                       "(POST /v1/admin/keys with \"member\") and use that one")
    agent = segment(body.agent if body.agent is not None else DEFAULT_AGENT, "agent")
    if agent in RESERVED_AGENTS:
        raise ApiError(422, ErrorCode.VALIDATION_ERROR, f"agent {agent!r} would work in /workspace/{agent}, the "
                       "workspace's shared directory", "choose another agent name")
    member = segment(principal.member, "member")
    return Placement(f"{MEMBERS_DIR}/{member}", f"{agent}/{segment(session_id, 'session id')}")
