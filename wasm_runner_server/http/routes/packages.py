"""Packages of a session: install (resolved and unpacked by the host), and the lock to replay elsewhere."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from aiohttp import web

from wasm_runner import Runner, Session
from wasm_runner.egress.policy import PolicyError
from wasm_runner_protocol.egress import EgressPolicy
from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_protocol.packages import InstallResult, PackageLock, PackageRequest
from wasm_runner_server.errors import ApiError
from wasm_runner_server.http.bodies import json_response, read_json
from wasm_runner_server.http.disk_quota import reserve
from wasm_runner_server.http.openapi import operation
from wasm_runner_server.http.policy import LOCAL, POLICY, PRINCIPAL, AccessPolicy, Principal
from wasm_runner_server.sessions.manager import LiveSession
from wasm_runner_server.sessions.service import SERVICE, Service

log = logging.getLogger("wasm_runner.server")
routes = web.RouteTableDef()

SHARED_CACHE = "shared"


@dataclass(frozen=True)
class InstallRules:
    """What installs into a session follow, decided once per call: the session's network policy with
    the configured indexes, its profile's index permission, the caller's download cache."""

    network: EgressPolicy
    allow_custom_index: bool
    workspace: str


def install_rules(service: Service, request: web.Request, live: LiveSession, runner: Runner) -> InstallRules:
    profile = service.sessions.profile_of(live)
    principal = request.get(PRINCIPAL) or LOCAL
    try:
        # the configured indexes and file hosts whatever the mode (a loopback or private one too), plus
        # what the session's policy allows (a request's own index only through that)
        network = runner.package_settings.install_policy(service.sessions.egress(live))
    except PolicyError as exc:
        raise ApiError(422, ErrorCode.NETWORK_NOT_ALLOWED, str(exc)) from None
    return InstallRules(network, profile.packages.allow_custom_index,
                        SHARED_CACHE if service.config.packages.shared_cache else principal.workspace)


def allow_guest_installs(service: Service, request: web.Request, live: LiveSession, runner: Runner,
                         session: Session) -> None:
    """The guest's own `sandbox.install` in this call follows the API's rules and is recorded as the
    caller's (the observer keeps the caller and the audit hook, not the request)."""
    rules = install_rules(service, request, live, runner)
    policy, principal, session_id = request.app[POLICY], request.get(PRINCIPAL) or LOCAL, live.row.id

    def observe(body: PackageRequest, result: InstallResult) -> None:
        record(policy, principal, session_id, body, result, by="guest")

    session.set_guest_installs(network=rules.network, allow_custom_index=rules.allow_custom_index,
                               workspace=rules.workspace, observer=observe)


def record(policy: AccessPolicy, principal: Principal, session_id: str, body: PackageRequest, result: InstallResult,
           by: str = "api") -> None:
    """An install's audit row and log line (the API's and the guest's alike; any thread)."""
    policy.on_packages(principal, session_id, body, result)
    log.info("packages installed" if result.ok else "packages refused",
             extra={"event": "packages", "session": session_id, "ok": result.ok, "by": by,
                    "installed": [f"{p.name}=={p.version}" for p in result.installed],
                    "error": result.error.kind if result.error else None})


async def workspace_room(service: Service, request: web.Request, live: LiveSession) -> int | None:
    """The bytes the session's workspace quota leaves now (None: no quota applies); 413 when none."""
    quota = request.app[POLICY].workspace_quota(live.row.id)
    if quota is None:
        return None
    with await reserve(service.disk, "packages", workspace=quota) as budget:
        room = budget.room()
    if room is not None and room <= 0:
        raise ApiError(413, ErrorCode.QUOTA_EXCEEDED, f"the workspace's disk quota ({quota[1]} bytes) is used up: "
                       "installed packages are kept with the session and count against it",
                       "delete files first, or ask for a larger quota")
    return room


async def install_into(service: Service, request: web.Request, live: LiveSession, body: PackageRequest) -> InstallResult:
    """Run one install for the session (calls to the session wait for it), within the room its workspace's
    disk quota leaves, recorded in the audit log (which refreshes the workspace's usage)."""
    runner, session = service.sessions.core(live)
    rules = install_rules(service, request, live, runner)
    async with live.lock:
        room = await workspace_room(service, request, live)
        result = await asyncio.to_thread(session.install, body.python, npm=body.npm, lock=body.lock, index=body.index,
                                         network=rules.network, allow_custom_index=rules.allow_custom_index,
                                         workspace=rules.workspace, max_bytes=room)
    service.sessions.touch(live)
    record(request.app[POLICY], request.get(PRINCIPAL) or LOCAL, live.row.id, body, result)
    return result


@routes.post("/v1/sessions/{id}/packages")
@operation(summary="Install packages into the session (kept across calls, hibernation and restarts)",
           tag="packages", body=PackageRequest, response=InstallResult, errors=(404, 413, 415, 422),
           description="Python requirements are resolved on the host (uv, wheels only, for the guest's CPython "
                       "3.14) from the operator's index, downloaded within the session's network policy, cached "
                       "per workspace by sha256 and shown to the guest read-only at /packages. A refused install "
                       "(not found, native code, policy, quota) is a result with ok false and an error.")
async def install_packages(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    live = service.sessions.get(request.match_info["id"])
    body = await read_json(request, PackageRequest)
    if not (body.python or body.npm or body.lock):
        raise ApiError(422, ErrorCode.VALIDATION_ERROR, "nothing to install", 'e.g. {"python": ["requests==2.32.3"]}')
    return json_response(await install_into(service, request, live, body))


@routes.get("/v1/sessions/{id}/packages")
@operation(summary="The session's package lock (give it as packages.lock to a new session)", tag="packages",
           response=PackageLock, errors=(404,))
async def get_packages(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    live = service.sessions.get(request.match_info["id"])
    runner, session = service.sessions.core(live)
    lock = await asyncio.to_thread(session.packages.lock, runner.package_settings.python_index)
    return json_response(lock)
