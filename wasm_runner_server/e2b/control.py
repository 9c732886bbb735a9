"""E2B's control plane: create, connect, inspect, list, change the timeout of and kill sandboxes.

A sandbox is a session created through here: its profile comes from the template (`[e2b]
templates`), its TTL from the timeout, and its metadata carries the template name (`e2b.template`)
beside the caller's own. Two metadata names place it on a disk layout's disk instead of a directory
of its own: `wasm-runner.end_user` (an app key's end user) and `wasm-runner.agent` (the agent a
member's session works as); they are taken out of the metadata. The envd access token handed back is
the caller's own key, so the SDK's calls to the sandbox authenticate as the caller did here.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import web

from wasm_runner_server.e2b.upstream import SETTINGS, Upstream, UpstreamError, session_path

routes = web.RouteTableDef()

ENVD_VERSION = "0.6.1"
"""The envd version sandboxes report: what the gateway implements (stdin, default user, closing stdin,
octet-stream uploads); the SDK turns off what later versions add (file metadata, watch options)."""
CLIENT_ID = "wasm-runner"
TEMPLATE_KEY = "e2b.template"
RESERVED_PREFIX = "e2b."
PLACEMENT_KEYS = {"wasm-runner.end_user": "end_user", "wasm-runner.agent": "agent"}
"""Metadata names that say where the sandbox's disk is (docs/guides/disk-layouts.md), by the session field."""
MiB = 1024 * 1024
UNSUPPORTED_CREATE = {
    "network": "a sandbox's network policy is its profile's; narrow it with PATCH /v1/sessions/{id} "
               "and an egress policy, or allow_internet_access=False",
    "mcp": "the service's own MCP server is at /mcp",
    "volumeMounts": "profiles grant mounts ([profiles.NAME] mounts in the service's config)",
    "iam": "credentials for destinations are added by the host's egress broker, never in the sandbox",
}


def api_error(status: int, message: str) -> web.Response:
    """An error in E2B's shape: `{"code": <status>, "message": ...}`."""
    return web.json_response({"code": status, "message": message}, status=status)


def from_upstream(error: UpstreamError) -> web.Response:
    status = 400 if error.status in (413, 415, 422) else error.status
    return api_error(status, error.message)


def api_key(request: web.Request) -> str | None:
    return request.headers.get("X-API-Key") or None


async def _json_body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json() if request.can_read_body else {}
    except ValueError:
        raise web.HTTPBadRequest(text=json.dumps({"code": 400, "message": "the body is not valid JSON"}),
                                 content_type="application/json") from None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text=json.dumps({"code": 400, "message": "the body must be a JSON object"}),
                                 content_type="application/json")
    return body


def _time(value: str) -> str:
    """RFC 3339 in UTC with a Z, as E2B writes times."""
    moment = datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _template(info: dict[str, Any]) -> str:
    return str(info.get("metadata", {}).get(TEMPLATE_KEY) or info.get("profile") or "")


def sandbox_of(info: dict[str, Any], key: str | None) -> dict[str, Any]:
    """E2B's `Sandbox` (what create and connect answer) for a session."""
    sandbox: dict[str, Any] = {"templateID": _template(info), "sandboxID": info["id"], "clientID": CLIENT_ID,
                               "envdVersion": ENVD_VERSION, "alias": _template(info)}
    if key:
        sandbox["envdAccessToken"] = key
    return sandbox


def _user_metadata(info: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in info.get("metadata", {}).items() if not k.startswith(RESERVED_PREFIX)}


async def _limits(upstream: Upstream) -> dict[str, dict[str, Any]]:
    listing = await upstream.call("GET", "/v1/profiles")
    return {p["name"]: p.get("limits", {}) for p in listing.get("profiles", [])}


def _e2b_state(info: dict[str, Any]) -> str:
    """A hibernated session is a paused sandbox (its next call restores it); any other is running."""
    return "paused" if info.get("state") == "hibernated" else "running"


def detail_of(info: dict[str, Any], limits: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """E2B's `SandboxDetail`/`ListedSandbox` for a session."""
    profile_limits = limits.get(info.get("profile", ""), {})
    return {"templateID": _template(info), "alias": _template(info), "sandboxID": info["id"],
            "clientID": CLIENT_ID, "startedAt": _time(info["created_at"]), "endAt": _time(info["expires_at"]),
            "envdVersion": ENVD_VERSION, "cpuCount": 1,
            "memoryMB": int(profile_limits.get("memory_bytes", 0)) // MiB,
            "diskSizeMB": int(profile_limits.get("disk_bytes", 0)) // MiB,
            "state": _e2b_state(info), "metadata": _user_metadata(info)}


@routes.post("/sandboxes")
@routes.post("/v2/sandboxes")
async def create(request: web.Request) -> web.Response:
    settings = request.config_dict[SETTINGS]
    body = await _json_body(request)
    template = str(body.get("templateID") or "base")
    profile = settings.templates.get(template)
    if profile is None:
        return api_error(400, f"template {template!r} is not known here; the templates are "
                              f"{', '.join(sorted(settings.templates))} ([e2b] templates in the service's config)")
    metadata = body.get("metadata") or {}
    if not isinstance(metadata, dict) or any(not isinstance(v, str) for v in metadata.values()):
        return api_error(400, "metadata must map names to strings")
    if any(k.startswith(RESERVED_PREFIX) for k in metadata):
        return api_error(400, f"metadata names starting with {RESERVED_PREFIX!r} are kept for the gateway")
    for name, instead in UNSUPPORTED_CREATE.items():
        if body.get(name):  # refused, not ignored: a network rule silently dropped would widen what runs
            return api_error(400, f"{name} is not supported here: {instead}")
    if body.get("envVars"):
        return api_error(400, "sandbox-wide environment variables are not supported here: pass envs to "
                              "commands.run or run_code")
    placement = {field: metadata.pop(name) for name, field in PLACEMENT_KEYS.items() if name in metadata}
    create_body: dict[str, Any] = {"profile": profile, "metadata": {**metadata, TEMPLATE_KEY: template}, **placement}
    if body.get("timeout") is not None:
        create_body["ttl_s"] = body["timeout"]
    if body.get("allow_internet_access") is False:
        create_body["egress"] = "deny"
    key = api_key(request)
    upstream = Upstream(request, key)
    try:
        info = await upstream.call("POST", "/v1/sessions", json_body=create_body)
    except UpstreamError as exc:
        return from_upstream(exc)
    return web.json_response(sandbox_of(info, key), status=201)


@routes.get("/sandboxes/{sandbox_id}")
async def get_info(request: web.Request) -> web.Response:
    upstream = Upstream(request, api_key(request))
    try:
        info = await upstream.call("GET", session_path(request.match_info["sandbox_id"]))
        return web.json_response(detail_of(info, await _limits(upstream)))
    except UpstreamError as exc:
        return from_upstream(exc)


@routes.post("/sandboxes/{sandbox_id}/connect")
@routes.post("/v2/sandboxes/{sandbox_id}/connect")
async def connect(request: web.Request) -> web.Response:
    key = api_key(request)
    upstream = Upstream(request, key)
    body = await _json_body(request)
    sandbox_id = request.match_info["sandbox_id"]
    try:
        info = await upstream.call("GET", session_path(sandbox_id))
        timeout = body.get("timeout")
        if timeout is not None:
            if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0:
                return api_error(400, "timeout must be a positive number of seconds")
            info = await _extend(upstream, sandbox_id, info, float(timeout))
    except UpstreamError as exc:
        return from_upstream(exc)
    return web.json_response(sandbox_of(info, key), status=200)


async def _extend(upstream: Upstream, sandbox_id: str, info: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Connecting with a timeout only ever makes the sandbox live longer, as in E2B."""
    expires = datetime.fromisoformat(info["expires_at"].replace("Z", "+00:00"))
    if expires.timestamp() >= datetime.now(UTC).timestamp() + timeout:
        return info
    return await upstream.call("PATCH", session_path(sandbox_id), json_body={"expires_in_s": timeout})


@routes.post("/sandboxes/{sandbox_id}/timeout")
async def set_timeout(request: web.Request) -> web.Response:
    upstream = Upstream(request, api_key(request))
    body = await _json_body(request)
    timeout = body.get("timeout")
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0:
        return api_error(400, "timeout must be a positive number of seconds")
    try:
        await upstream.call("PATCH", session_path(request.match_info["sandbox_id"]),
                            json_body={"expires_in_s": timeout})
    except UpstreamError as exc:
        return from_upstream(exc)
    return web.Response(status=204)


@routes.post("/sandboxes/{sandbox_id}/pause")
async def pause(request: web.Request) -> web.Response:
    """Pause = hibernate: the files and the kernels' state (run_code's variables) are kept and come back
    with the next call; background commands are ended (E2B's pause keeps them: this one cannot).
    409 when already paused, as E2B answers."""
    upstream = Upstream(request, api_key(request))
    sandbox_id = request.match_info["sandbox_id"]
    try:
        info = await upstream.call("GET", session_path(sandbox_id))
        if _e2b_state(info) == "paused":
            return api_error(409, f"sandbox {sandbox_id} is already paused")
        await upstream.call("POST", f"{session_path(sandbox_id)}:hibernate")
    except UpstreamError as exc:
        if exc.status == 409:  # running a call: not "already paused", which 409 means to the SDK
            return api_error(400, f"sandbox {sandbox_id} is running code; pause it once that ends")
        return from_upstream(exc)
    return web.Response(status=204)


@routes.delete("/sandboxes/{sandbox_id}")
async def kill(request: web.Request) -> web.Response:
    upstream = Upstream(request, api_key(request))
    try:
        await upstream.call("DELETE", session_path(request.match_info["sandbox_id"]))
    except UpstreamError as exc:
        return from_upstream(exc)
    return web.Response(status=204)


@routes.get("/sandboxes")
@routes.get("/v2/sandboxes")
async def list_sandboxes(request: web.Request) -> web.Response:
    """The caller's sandboxes (sessions made through here), oldest first; `metadata` filters them
    (`k=v&k2=v2`, URL-encoded), `state` (`running`, `paused`) too; `nextToken`/`limit` page them."""
    upstream = Upstream(request, api_key(request))
    wanted = dict(parse_qsl(request.query.get("metadata", "")))
    states = set(filter(None, request.query.get("state", "").split(",")))
    try:
        limit = max(1, min(int(request.query.get("limit", "100")), 1000))
    except ValueError:
        return api_error(400, "limit must be a whole number")
    cursor, skip = _read_token(request.query.get("nextToken", ""))
    found: list[dict[str, Any]] = []
    token = None
    try:
        limits = await _limits(upstream)
        while not states or states & {"running", "paused"}:
            params = {"limit": str(limit), **({"cursor": cursor} if cursor else {})}
            page = await upstream.call("GET", "/v1/sessions", params=params)
            sessions = page.get("sessions", [])
            for index, info in enumerate(sessions[skip:], start=skip):
                metadata = info.get("metadata", {})
                if (TEMPLATE_KEY in metadata and all(metadata.get(k) == v for k, v in wanted.items())
                        and (not states or _e2b_state(info) in states)):
                    if len(found) == limit:
                        token = f"{cursor or ''}|{index}"  # this page again, from this session on
                        break
                    found.append(detail_of(info, limits))
            if token is not None or not page.get("next_cursor"):
                break
            cursor, skip = page["next_cursor"], 0
    except UpstreamError as exc:
        return from_upstream(exc)
    return web.json_response(found, headers={"x-next-token": token} if token else {})


def _read_token(token: str) -> tuple[str | None, int]:
    """A page token: the API's cursor of a page and how many of its sessions were already listed."""
    cursor, _, skip = token.rpartition("|")
    return cursor or None, int(skip) if skip.isdigit() else 0
