"""The errors both sides share: the root exception, and the stable codes of the service's error
body `{"error": {"code", "message", "hint"}}`.

The wire carries the plain string (`ErrorDetail.code: str`); a `StrEnum` member equals its
string, so server and client compare and match codes by the same names. Each code belongs to
one family below; a client may see codes this version does not list (it keeps the string).
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ErrorCode", "WasmRunnerError"]


class WasmRunnerError(Exception):
    """Base of every error wasm-runner raises for its own failures (client and core)."""


class ErrorCode(StrEnum):
    # -- the request itself ------------------------------------------------------------------
    BAD_REQUEST = "bad_request"
    INVALID_JSON = "invalid_json"
    VALIDATION_ERROR = "validation_error"
    INVALID_QUERY = "invalid_query"
    INVALID_MULTIPART = "invalid_multipart"
    INVALID_CURSOR = "invalid_cursor"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    RANGE_NOT_SATISFIABLE = "range_not_satisfiable"
    BODY_TOO_LARGE = "body_too_large"
    NOT_FOUND = "not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    NOT_ACCEPTABLE = "not_acceptable"
    REQUEST_TIMEOUT = "request_timeout"
    LENGTH_REQUIRED = "length_required"
    URI_TOO_LONG = "uri_too_long"
    HEADERS_TOO_LARGE = "headers_too_large"
    HTTP_ERROR = "http_error"
    # -- what aiohttp's HTTP parser refused, before any handler ------------------------------
    MALFORMED_REQUEST = "malformed_request"
    BAD_METHOD = "bad_method"
    LINE_TOO_LONG = "line_too_long"
    TOO_MANY_HEADERS = "too_many_headers"
    HANDLER_TIMEOUT = "handler_timeout"
    # -- keys, links, permissions ------------------------------------------------------------
    UNAUTHORIZED = "unauthorized"
    INVALID_KEY = "invalid_key"
    ADMIN_ONLY = "admin_only"
    """Only the service's operator (an admin key) does this, whatever a workspace role holds."""
    PERMISSION_DENIED = "permission_denied"
    """The caller's role lacks the permission the action needs (the message names it)."""
    OWN_ROWS_ONLY = "own_rows_only"
    SHARED_SESSION = "shared_session"
    MEMBER_REQUIRED = "member_required"
    """The workspace gives members a disk of their own, and the key names no member."""
    RATE_LIMITED = "rate_limited"
    LINK_INVALID = "link_invalid"
    LINK_EXPIRED = "link_expired"
    LINK_REVOKED = "link_revoked"
    SERVICE_WORKER_REFUSED = "service_worker_refused"
    """The API's origin never serves a service worker script (a page must not control it)."""
    CSRF_REFUSED = "csrf_refused"
    INSUFFICIENT_SCOPE = "insufficient_scope"
    """An OAuth access token whose scopes do not cover the route (RFC 6750's error name)."""
    # -- members and roles --------------------------------------------------------------------
    ROLE_EXISTS = "role_exists"
    ROLE_IN_USE = "role_in_use"
    LAST_OWNER = "last_owner"
    # -- admission and quotas ----------------------------------------------------------------
    OVERLOADED = "overloaded"
    SESSION_BUSY = "session_busy"
    WORKSPACE_BUSY = "workspace_busy"
    WORKSPACE_DISK_QUOTA = "workspace_disk_quota"
    WORKSPACE_SESSION_QUOTA = "workspace_session_quota"
    QUOTA_EXCEEDED = "quota_exceeded"
    BUDGET_EXHAUSTED = "budget_exhausted"
    """402: the workspace spent its budget of a usage unit for the month (GET /v1/usage shows it)."""
    QUOTA_UNMEASURABLE = "quota_unmeasurable"
    SHUTTING_DOWN = "shutting_down"
    NOT_READY = "not_ready"
    # -- sessions and profiles ---------------------------------------------------------------
    SESSION_NOT_FOUND = "session_not_found"
    SESSION_EXISTS = "session_exists"
    TEMPORARY_SESSION = "temporary_session"
    """409/422: a temporary session keeps no history, publishes no artifact or template, starts from none."""
    SESSION_ON_OTHER_NODE = "session_on_other_node"
    SESSION_NODE_UNAVAILABLE = "session_node_unavailable"
    INVALID_SESSION_ID = "invalid_session_id"
    PROFILE_INCOMPATIBLE = "profile_incompatible"
    UNKNOWN_PROFILE = "unknown_profile"
    PACKAGES_FAILED = "packages_failed"
    TEMPLATE_NOT_FOUND = "template_not_found"
    # -- background processes, terminals, preview ports --------------------------------------
    PROCESS_NOT_FOUND = "process_not_found"
    PROCESS_LIMIT = "process_limit"
    PROCESS_FAILED = "process_failed"
    PROCESS_NOT_RUNNING = "process_not_running"
    PORT_NOT_LISTENING = "port_not_listening"
    PORT_UNREACHABLE = "port_unreachable"
    PREVIEW_NOT_FOUND = "preview_not_found"
    """No preview at this preview address: unknown, expired, or given out before a restart."""
    # -- limits and providers ----------------------------------------------------------------
    LIMIT_EXCEEDS_MAXIMUM = "limit_exceeds_maximum"
    INVALID_LIMITS = "invalid_limits"
    ENV_NOT_ALLOWED = "env_not_allowed"
    NETWORK_NOT_ALLOWED = "network_not_allowed"
    TOOL_NOT_ALLOWED = "tool_not_allowed"
    PROVIDER_UNAVAILABLE = "provider_unavailable"
    CLUSTER_UNAVAILABLE = "cluster_unavailable"
    METADATA_UNAVAILABLE = "metadata_unavailable"
    STORAGE_UNAVAILABLE = "storage_unavailable"
    # -- files (the core's FileOpError family, and the service's own) ------------------------
    FILE_ERROR = "file_error"
    INVALID_PATH = "invalid_path"
    PATH_ESCAPE = "path_escape"
    FILE_NOT_FOUND = "file_not_found"
    IS_A_DIRECTORY = "is_a_directory"
    NOT_A_DIRECTORY = "not_a_directory"
    NOT_A_REGULAR_FILE = "not_a_regular_file"
    NOT_A_FILE = "not_a_file"
    DIRECTORY_NOT_EMPTY = "directory_not_empty"
    FILE_TOO_LARGE = "file_too_large"
    NOT_TEXT = "not_text"
    EDIT_FAILED = "edit_failed"
    EDIT_NOT_FOUND = "edit_not_found"
    EDIT_NOT_UNIQUE = "edit_not_unique"
    PATCH_FAILED = "patch_failed"
    INVALID_PATTERN = "invalid_pattern"
    BUDGET_EXCEEDED = "budget_exceeded"
    CANCELLED = "cancelled"
    # -- other things not found (`not_found(code, name)` words its message from the code) ----
    KEY_NOT_FOUND = "key_not_found"
    OAUTH_CLIENT_NOT_FOUND = "oauth_client_not_found"
    GRANT_NOT_FOUND = "grant_not_found"
    AUDIT_ENTRY_NOT_FOUND = "audit_entry_not_found"
    ROLE_NOT_FOUND = "role_not_found"
    SHARED_NOT_FOUND = "shared_not_found"
    ARTIFACT_NOT_FOUND = "artifact_not_found"
    VERSION_NOT_FOUND = "version_not_found"
    TOOL_CALL_NOT_FOUND = "tool_call_not_found"
    APPROVAL_NOT_FOUND = "approval_not_found"
    # -- MCP tool errors ---------------------------------------------------------------------
    UNKNOWN_TOOL = "unknown_tool"
    UNAVAILABLE = "unavailable"
    # -- the rest ----------------------------------------------------------------------------
    INTERNAL_ERROR = "internal_error"
    STREAM_ENDED = "stream_ended"
    """Client-side: made by the client for an event stream that ended without its result."""
