"""The wasm-runner HTTP service (aiohttp): sessions, execution and files for agent platforms.

Start it with `wasm-runner serve` (wasm_runner_server.cli.serve) or build the app with
`wasm_runner_server.app.create_app(config)`. Endpoints (the full schema is GET /openapi.json):

    POST   /v1/sessions                      create (lazy: no interpreter, no directory yet)
    GET    /v1/sessions?cursor=&limit=       list, oldest first, cursor pagination
    GET    /v1/sessions/{id}                 inspect (state: active, idle, hibernated)
    DELETE /v1/sessions/{id}                 stop, drop kernels, remove files
    POST   /v1/sessions/{id}/cancel          stop the running execution
    POST   /v1/sessions/{id}:hibernate       save and drop its kernels now (as after idling)
    POST   /v1/sessions/{id}/exec            run code (or a workspace file) in the session's kernel
    POST   /v1/sessions/{id}/process         run a program natively (bubblewrap provider)
    POST   /v1/exec                          one-shot: files in, output files back
    GET    /v1/sessions/{id}/files           list (sizes, mtimes; ?path=&recursive=)
    POST   /v1/sessions/{id}/files           multipart upload of several files
    GET|HEAD|PUT|DELETE|PATCH /v1/sessions/{id}/files/{path}
                                             raw bytes (Range), atomic write, delete, edit or diff
    GET    /v1/sessions/{id}/glob?pattern=   `*` within a directory, `**` across
    GET    /v1/sessions/{id}/grep?pattern=   regex search with line numbers and a match cap
    GET    /v1/sessions/{id}/archive?path=&format=zip|tar.gz
    GET    /v1/profiles, /healthz, /readyz, /metrics, /openapi.json

Execution endpoints stream with `Accept: text/event-stream` (stdout/stderr events, then
`result`). Every error is `{"error": {"code", "message", "hint"}}`.

Defaults (see wasm_runner_server.config for all settings): a session's kernel is dropped after
10 minutes idle (files kept, the next call says kernel_restarted) and the session with
its files is removed 24 hours after creation; a session may ask for up to 24 hours idle
and 30 days TTL; a running background process keeps its session from hibernating. Executions
run at most `concurrency` (cores) at once, 64 more wait up to 30 s, served in turn across
workspaces and sessions, beyond that 429 with Retry-After; up to 16 calls queue per session, in order.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from wasm_runner_protocol import __version__ as __version__

if TYPE_CHECKING:
    from wasm_runner.profiles import LimitsSection, Profile
    from wasm_runner_server.app import create_app
    from wasm_runner_server.config import ServerSettings, ServiceConfig, SessionPolicy, load_config
    from wasm_runner_server.security.settings import AuthSettings

_EXPORTS = {
    "create_app": "wasm_runner_server.app",
    "load_config": "wasm_runner_server.config",
    "ServiceConfig": "wasm_runner_server.config",
    "ServerSettings": "wasm_runner_server.config",
    "SessionPolicy": "wasm_runner_server.config",
    "LimitsSection": "wasm_runner.profiles",
    "Profile": "wasm_runner.profiles",
    "AuthSettings": "wasm_runner_server.security.settings",
}
"""Loaded on first use: the console script imports this package, and `wasm-runner run` needs
neither aiohttp nor pydantic."""

__all__ = [
    "AuthSettings", "LimitsSection", "Profile", "ServerSettings", "ServiceConfig", "SessionPolicy", "create_app", "load_config",
]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
