"""Configuration of authentication, tenancy, presigned links and the audit log (the `[auth]` section).

    [auth]
    enabled = true                     # false only for local use: every caller is the "local" workspace
    public_paths = ["/healthz", "/readyz", "/metrics", "/openapi.json"]
    presign_secrets = ["new-secret", "old-secret"]   # the first signs; all verify (rotation overlap)
    rate_per_s = 50                    # per key: sustained requests per second ...
    burst = 100                        # ... and the burst above it
    first_run_key = true               # no keys at all at start: make one admin key, print it once
    [auth.quotas]                      # per workspace
    sessions = 100
    concurrent_executions = 8
    disk_bytes = 10737418240
    [auth.oauth]                       # apps acting for members (docs/guides/oauth.md)
    access_token_s = 3600
    refresh_token_s = 2592000
    [auth.disk_layout]                 # where a new session's /workspace is (docs/guides/disk-layouts.md)
    members = "member-disk"            # "session" (default): a directory per session
    apps = "end-user"                  # "session" (default): a directory per session
    guest_path = "/home/user/workspace"  # the disk shown there too, runs starting under it
    [auth.workspace_disk_layouts.acme] # one workspace's own choice, instead of [auth.disk_layout]
    members = "session"
    [auth.usage]
    flush_interval_s = 1               # usage counted in memory is written this often
    sample_interval_s = 300            # stored bytes sampled (byte-hours), processes' seconds counted
    [auth.budgets]                     # per workspace and UTC month, for every workspace (the admin
    executions = 100000                # API sets a workspace's own: PUT /v1/admin/workspaces/W/budgets)
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from wasm_runner_protocol.guest import GUEST_TMP, GUEST_WORKSPACE, check_guest_path
from wasm_runner_server.security.usage import Unit


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WorkspaceQuotas(_Model):
    sessions: Annotated[int, Field(ge=1)] = 100
    """Sessions a workspace may hold at once."""
    concurrent_executions: Annotated[int, Field(ge=1)] = 8
    """Executions (session, process, one-shot) a workspace may run at once."""
    disk_bytes: Annotated[int, Field(ge=0)] = 10 * 1024**3
    """Bytes of session files plus shared/ a workspace may hold; writes and runs past it get 429."""


class OAuthSettings(_Model):
    """`[auth.oauth]`: the lifetimes of what the OAuth authorization server issues."""

    access_token_s: Annotated[float, Field(gt=0)] = 3600
    """How long an access token acts (it cannot be refreshed in place: the app uses its refresh token)."""
    refresh_token_s: Annotated[float, Field(gt=0)] = 30 * 86400
    """How long an unused refresh token stays good (each use answers a new one and spends the old)."""
    code_s: Annotated[float, Field(gt=0, le=600)] = 600
    """How long an authorization code may wait for its exchange (RFC 6749 advises at most 10 minutes)."""


class DiskLayout(_Model):
    """Where a new session's /workspace is, by the kind of key creating it (the session keeps it)."""

    members: Literal["session", "member-disk"] = "session"
    """Member and admin keys: "session", a directory of the session's own; "member-disk", the
    member's whole disk (`members/<member>` of the workspace), the session working in
    `<agent>/<session id>` inside it, seen at once by the member's other sessions."""
    apps: Literal["session", "end-user"] = "session"
    """App keys: "session", a directory of the session's own; "end-user", the root of this session
    among its end user's (`end_users/<end user>/session-roots/<session id>`), `end_user` required."""
    guest_path: str | None = None
    """Another absolute path the sandbox shows a layout's disk at (a member's disk, an end user's root),
    e.g. "/home/user/workspace", the session's runs starting under it (`<agent>/<session>` for a
    member's) and a member's `shared/` inside it; the disk stays at /workspace too. None: /workspace only.
    Sessions on a directory of their own are not changed."""

    @field_validator("guest_path")
    @classmethod
    def _a_guest_path(cls, value: str | None) -> str | None:
        if value is None:
            return None
        path = check_guest_path(value)
        if any(path == p or path.startswith(p + "/") for p in (GUEST_WORKSPACE, GUEST_TMP)):
            raise ValueError(f"guest_path is a path outside {GUEST_WORKSPACE} and {GUEST_TMP} (got {value!r})")
        return path


class UsageSettings(_Model):
    flush_interval_s: Annotated[float, Field(gt=0)] = 1.0
    """How often usage counted in memory is written to the ledger (a kill loses at most this much)."""
    sample_interval_s: Annotated[float, Field(gt=0)] = 300.0
    """How often stored bytes are sampled into byte-hours and running processes' seconds counted."""


class AuthSettings(_Model):
    enabled: bool = True
    """Require `Authorization: Bearer <key>`. Off only for local use (logged loudly at start)."""
    public_paths: list[str] = ["/healthz", "/readyz", "/metrics", "/openapi.json"]
    """Paths served without a key (presigned links are always served without one)."""
    presign_secrets: list[Annotated[str, Field(min_length=16)]] = []
    """HMAC secrets for presigned links: the first signs, every one verifies. Empty: one is
    generated and kept in <data_dir>/presign.secret (a cluster's nodes: in their shared database)."""
    presign_get_default_s: Annotated[float, Field(gt=0)] = 3600
    presign_get_max_s: Annotated[float, Field(gt=0)] = 7 * 86400
    presign_put_default_s: Annotated[float, Field(gt=0)] = 600
    presign_put_max_s: Annotated[float, Field(gt=0)] = 3600
    console_session_s: Annotated[float, Field(gt=0)] = 8 * 3600
    """How long a console sign-in lasts (its cookie and server-side session), at most."""
    rate_per_s: Annotated[float, Field(gt=0)] = 50.0
    burst: Annotated[float, Field(ge=1)] = 100.0
    quotas: WorkspaceQuotas = WorkspaceQuotas()
    oauth: OAuthSettings = OAuthSettings()
    first_run_key: bool = True
    """At a start with no keys at all, create one admin key for the `local` workspace and print it once,
    with the console's address (only its hash is stored). Turn off for deployments."""
    audit_retention_days: Annotated[float, Field(gt=0)] | None = 90
    """Audit rows older than this are pruned (at start and daily); null keeps them forever."""
    disk_layout: DiskLayout = DiskLayout()
    """Where new sessions' /workspace is (see DiskLayout); today's directory per session by default."""
    workspace_disk_layouts: dict[Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")], DiskLayout] = {}
    """A workspace's own layout, by workspace name, instead of `disk_layout`."""
    audit_code_bytes: Annotated[int, Field(ge=0)] = 64 * 1024
    audit_output_bytes: Annotated[int, Field(ge=0)] = 16 * 1024
    usage: UsageSettings = UsageSettings()
    budgets: dict[Unit, Annotated[float, Field(ge=0)]] = {}
    """Every workspace's budget per unit over the UTC month (a workspace's own, set through the admin
    API, replaces it); with one spent, executions are refused with 402 budget_exhausted."""
