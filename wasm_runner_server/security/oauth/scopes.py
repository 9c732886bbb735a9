"""The OAuth scopes and the API routes each one opens: the one place that says what a token may call.

A route that is not listed here is closed to OAuth tokens (403 insufficient_scope), whatever the
token's scopes: the admin API, the audit log, the shared files, the OAuth grants themselves and the
MCP endpoint are reachable with API keys only. `tests/server/security/test_oauth_scopes.py` walks the
application's route table, so a new route must be placed here or in `KEY_ONLY` deliberately.
"""

from __future__ import annotations

from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_server.errors import ApiError

SCOPES: dict[str, str] = {
    "sessions:read": "see your sessions (list them, read their state, tools and packages)",
    "sessions:write": "create, change, fork, hibernate and delete your sessions",
    "exec": "run code and commands in your sessions (and one-shot runs and batches)",
    "files:read": "read, search, download and list the files of your sessions",
    "files:write": "write, edit, upload and delete the files of your sessions",
    "processes": "start, watch, signal and stop background processes, terminals and preview ports",
}
"""Each scope and what the consent page says it lets the app do."""

_S = "/v1/sessions/{id}"
ROUTE_SCOPES: dict[tuple[str, str], str] = {
    # sessions
    ("GET", "/v1/sessions"): "sessions:read",
    ("POST", "/v1/sessions"): "sessions:write",
    ("GET", _S): "sessions:read",
    ("PATCH", _S): "sessions:write",
    ("DELETE", _S): "sessions:write",
    ("POST", _S + "/cancel"): "exec",
    ("POST", _S + ":hibernate"): "sessions:write",
    ("POST", _S + ":fork"): "sessions:write",
    ("GET", "/v1/profiles"): "sessions:read",
    ("GET", "/v1/starters"): "sessions:read",
    ("GET", "/v1/templates"): "sessions:read",
    ("GET", "/v1/templates/{name}"): "sessions:read",
    ("POST", "/v1/templates"): "sessions:write",
    ("DELETE", "/v1/templates/{name}"): "sessions:write",
    ("GET", _S + "/tools"): "sessions:read",
    ("GET", _S + "/packages"): "sessions:read",
    ("POST", _S + "/packages"): "exec",
    # running code
    ("POST", _S + "/exec"): "exec",
    ("POST", _S + "/process"): "exec",
    ("POST", "/v1/exec"): "exec",
    ("POST", "/v1/batch"): "exec",
    ("POST", _S + "/tool-calls/{call_id}"): "exec",
    ("POST", _S + "/approvals/{approval_id}"): "exec",
    ("POST", "/v1/exec/{run_id}/tool-calls/{call_id}"): "exec",
    ("POST", "/v1/exec/{run_id}/approvals/{approval_id}"): "exec",
    # files
    ("GET", _S + "/files"): "files:read",
    ("GET", _S + "/files/{path}"): "files:read",
    ("GET", _S + "/glob"): "files:read",
    ("GET", _S + "/grep"): "files:read",
    ("GET", _S + "/archive"): "files:read",
    ("GET", _S + "/history"): "files:read",
    ("GET", _S + "/history/content"): "files:read",
    ("GET", _S + "/history/diff"): "files:read",
    ("PUT", _S + "/files/{path}"): "files:write",
    ("POST", _S + "/files"): "files:write",
    ("PATCH", _S + "/files/{path}"): "files:write",
    ("DELETE", _S + "/files/{path}"): "files:write",
    ("POST", _S + "/files/{path}:presign"): "files:read",
    ("POST", _S + "/artifacts"): "files:write",
    ("GET", "/v1/artifacts"): "files:read",
    ("GET", "/v1/artifacts/{artifact}"): "files:read",
    ("GET", "/v1/artifacts/{artifact}/content"): "files:read",
    ("POST", "/v1/artifacts/{artifact}:presign"): "files:read",
    ("DELETE", "/v1/artifacts/{artifact}"): "files:write",
    # background processes, terminals and preview ports
    ("POST", _S + "/processes"): "processes",
    ("GET", _S + "/processes"): "processes",
    ("GET", _S + "/processes/{pid}"): "processes",
    ("DELETE", _S + "/processes/{pid}"): "processes",
    ("POST", _S + "/processes/{pid}/stdin"): "processes",
    ("POST", _S + "/processes/{pid}/signal"): "processes",
    ("GET", _S + "/processes/{pid}/output"): "processes",
    ("GET", _S + "/pty"): "processes",
    ("POST", _S + "/pty:presign"): "processes",
    ("POST", _S + "/ports/{port}:presign"): "processes",
    ("*", _S + "/ports/{port}"): "processes",
    ("*", _S + "/ports/{port}/{path}"): "processes",
}
"""(method, canonical route) -> the scope that opens it. HEAD is GET's; `*` is any method."""

OPEN_TO_EVERY_TOKEN = frozenset({("GET", "/v1/me")})
"""Routes any valid token may call: who am I (the member, the grant)."""

KEY_ONLY = frozenset({
    "/v1/admin/workspaces", "/v1/admin/keys", "/v1/admin/keys/{key}",
    "/v1/admin/oauth/clients", "/v1/admin/oauth/clients/{client}",
    "/v1/admin/members", "/v1/admin/members/{member}", "/v1/admin/roles", "/v1/admin/roles/{name}",
    "/v1/admin/workspaces/{workspace}/budgets", "/v1/usage",
    "/v1/oauth/grants", "/v1/oauth/grants/{grant}",
    "/v1/audit", "/v1/audit/{entry}",
    "/v1/shared/files", "/v1/shared/files/{path}",
    "/v1/console/session", "/v1/console/sign-in-links", "/mcp",
})
"""Routes no OAuth token reaches (no scope opens them): the admin API, the audit log, the workspace's
shared files, the grants a member manages, the console's sign-in and MCP (which carries its own calls)."""


def required_scope(method: str, canonical: str) -> str | None:
    """The scope a token needs for this route; None: no scope opens it (API keys only)."""
    method = "GET" if method == "HEAD" else method
    return ROUTE_SCOPES.get((method, canonical)) or ROUTE_SCOPES.get(("*", canonical))


def check_scope(method: str, canonical: str, scopes: frozenset[str]) -> None:
    """Refuse a token's call outside its scopes: 403 insufficient_scope, naming the scope it would need."""
    method_key = "GET" if method == "HEAD" else method
    if (method_key, canonical) in OPEN_TO_EVERY_TOKEN:
        return
    needed = required_scope(method, canonical)
    if needed is not None and needed in scopes:
        return
    if needed is None:
        message = f"{method} {canonical or 'this path'} is not open to OAuth access tokens"
        hint = "call it with an API key; apps acting for members reach only the routes their scopes open"
        challenge = 'Bearer realm="wasm-runner", error="insufficient_scope"'
    else:
        message = f"this access token lacks the scope {needed!r} that {method} {canonical} needs"
        hint = f"have the member authorize the app again with scope={needed} (among the app's allowed scopes)"
        challenge = f'Bearer realm="wasm-runner", error="insufficient_scope", scope="{needed}"'
    raise ApiError(403, ErrorCode.INSUFFICIENT_SCOPE, message, hint, {"WWW-Authenticate": challenge})
