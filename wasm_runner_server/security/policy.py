"""Who is calling, and what they may see: API keys, workspace isolation, quotas, rate limits.

`install_security(app)` adds, to an application made by `create_app`:
- a middleware (after the error middleware, so its errors have the service's error shape)
  that resolves `Authorization: Bearer <key>` to a `Principal` (workspace, key id, kind),
  answers 401 without one (except `auth.public_paths` and presigned links), applies the
  per-key rate limit, and refuses any route naming a session `{id}` the caller's workspace
  does not own with exactly the 404 of a session that does not exist;
- per-workspace quotas (sessions, concurrent executions, disk) answering 429 + Retry-After;
- the audit observer on every execution and a row for every file change;
- the writable /workspace/shared mount for sessions opened with a member key;
- the presign, link, audit, admin and shared-files routes.
With `auth.enabled = false` every caller is the `local` workspace (a loud warning at start).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
from aiohttp import web

from wasm_runner import Mount
from wasm_runner_protocol.wire import SessionCreate
from wasm_runner_server.errors import ApiError, not_found, overloaded
from wasm_runner_server.http.disk_quota import WorkspaceDisk, WorkspaceMeasure, unmeasurable
from wasm_runner_server.security.audit import AuditLog
from wasm_runner_server.security.presign import LINK_PREFIX, Signer, key_revoked, load_secrets
from wasm_runner_server.security.ratelimit import Counter, RateLimiter, retry_after
from wasm_runner_server.security.settings import AuthSettings
from wasm_runner_server.security.tenants import TenantStore
from wasm_runner_server.service import CONFIG, SERVICE
from wasm_runner_server.sessions.execution import outcome as outcome_of

log = logging.getLogger("wasm_runner.server.auth")

LOCAL_WORKSPACE = "local"
SHARED_GUEST = "/workspace/shared"
SESSION_ROUTE_PREFIX = "/v1/sessions/{id}"
BATCH_ROUTE = "/v1/batch"
EXEC_ROUTES = frozenset({"/v1/sessions/{id}/exec", "/v1/sessions/{id}/process", "/v1/exec", BATCH_ROUTE})
_FILE_MODES = {"PUT": "put", "POST": "upload", "PATCH": "edit", "DELETE": "delete"}

NO_KEY_HINT = ("send Authorization: Bearer <key>; an administrator creates keys with "
               "`wasm-runner keys create --workspace W --name N`")
BAD_KEY_HINT = ("check the key; a lost key cannot be recovered (only its hash is stored): revoke it with "
                "`wasm-runner keys revoke <prefix>` and create another")


@dataclass(frozen=True)
class Principal:
    workspace: str
    key_id: str
    kind: str  # member | app | admin

    @property
    def shared(self) -> bool:
        """Sessions opened with this key see the workspace's shared/ directory."""
        return self.kind in ("member", "admin")


LOCAL = Principal(LOCAL_WORKSPACE, "local", "admin")
CURRENT: contextvars.ContextVar[Principal | None] = contextvars.ContextVar("wasm_runner_principal", default=None)


@dataclass(eq=False)
class Security:
    settings: AuthSettings
    data_dir: Path
    tenants: TenantStore
    audit: AuditLog
    signer: Signer
    limiter: RateLimiter
    running: Counter = field(default_factory=Counter)
    disk: WorkspaceDisk | None = None
    """Each workspace's disk usage against auth.quotas.disk_bytes (set when the service starts)."""

    @property
    def enabled(self) -> bool:
        return self.settings.enabled

    def shared_dir(self, workspace: str) -> Path:
        path = self.data_dir / "workspaces" / workspace / "shared"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def authenticate(self, request: web.Request) -> Principal:
        if not self.enabled:
            return LOCAL
        header = request.headers.get("Authorization", "")
        scheme, _, key = header.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise ApiError(401, "unauthorized", "this endpoint needs an API key", NO_KEY_HINT,
                           {"WWW-Authenticate": 'Bearer realm="wasm-runner"'})
        record = self.tenants.verify(key.strip())
        if record is None:
            raise ApiError(401, "invalid_key", "the API key is not valid or has been revoked", BAD_KEY_HINT,
                           {"WWW-Authenticate": 'Bearer realm="wasm-runner", error="invalid_token"'})
        return Principal(record.workspace, record.id, record.kind)

    def take_rate(self, key_id: str) -> None:
        """One request of this key's rate limit; a 429 past it."""
        wait = self.limiter.take(key_id)
        if wait > 0:
            raise overloaded(retry_after(wait), f"this key is over its rate limit of {self.settings.rate_per_s:g} "
                             "requests per second", "rate_limited")

    def admit_link(self, key_id: str) -> None:
        """A link acts for the key that made it: dead once that key is revoked, and each use counts
        against the key's rate limit."""
        if not self.enabled:
            return
        if self.tenants.active_key(key_id) is None:
            raise key_revoked()
        self.take_rate(key_id)

    def owns(self, principal: Principal, session_id: str) -> bool:
        if not self.enabled:
            return True
        owner = self.tenants.owner(session_id)
        return owner is not None and owner.workspace == principal.workspace

    def mounts_shared(self, session_id: str) -> bool:
        """Whether the session sees shared/: fixed when it is created, by the kind of the key creating it.
        Its kernels keep whatever they read there, so only keys allowed shared/ may use such a session."""
        owner = self.tenants.owner(session_id)
        return owner is not None and owner.kind != "app"

    def session_mounts(self, session_id: str) -> tuple[Mount, ...]:
        owner = self.tenants.owner(session_id)
        if owner is None or not self.mounts_shared(session_id):
            return ()
        budget = self.disk.budget(owner.workspace) if self.disk is not None else None
        return (Mount(self.shared_dir(owner.workspace), SHARED_GUEST, writable=True, budget=budget),)

    def workspace_quota(self, workspace: str | None) -> tuple[str, int, WorkspaceMeasure] | None:
        """What a write into `workspace` reserves against (None: no workspace quota applies)."""
        if workspace is None or self.disk is None:
            return None
        disk = self.disk
        return workspace, disk.quota, lambda: disk.measure_async(workspace)


SECURITY = web.AppKey("security", Security)
PRINCIPAL = web.RequestKey("principal", Principal)


def principal_of(request: web.Request) -> Principal:
    principal = request.get(PRINCIPAL)
    if principal is None:
        raise ApiError(401, "unauthorized", "this endpoint needs an API key", NO_KEY_HINT)
    return principal


def session_not_found(session_id: str) -> ApiError:
    """Exactly what a session that does not exist answers (see SessionManager.get)."""
    return not_found("session", session_id, "create one with POST /v1/sessions")


def shared_session_refused(session_id: str) -> ApiError:
    return ApiError(403, "shared_session", f"session {session_id!r} was opened with a member key and mounts the "
                    "workspace's shared/ directory, which app keys cannot reach",
                    "use a session opened with this key (POST /v1/sessions)")


def _canonical(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else ""


@web.middleware
async def security_middleware(request: web.Request, handler) -> web.StreamResponse:
    security = request.app.get(SECURITY)
    path = request.path
    if security is None or path.startswith(LINK_PREFIX) or path in security.settings.public_paths:
        return await handler(request)
    principal = security.authenticate(request)
    if security.enabled:
        security.take_rate(principal.key_id)
    request[PRINCIPAL] = principal
    token = CURRENT.set(principal)
    try:
        route = _canonical(request)
        session_id = request.match_info.get("id") if route.startswith(SESSION_ROUTE_PREFIX) else None
        if session_id is not None and not security.owns(principal, session_id):
            raise session_not_found(session_id)
        if session_id is not None and not principal.shared and security.mounts_shared(session_id):
            raise shared_session_refused(session_id)
        is_exec = request.method == "POST" and route in EXEC_ROUTES
        writes = is_exec or (request.method in _FILE_MODES and (route.startswith(SESSION_ROUTE_PREFIX + "/files")
                                                                or route.startswith("/v1/shared/")))
        if security.enabled and writes and request.method != "DELETE":  # deleting frees room: never refused
            await _check_disk(request, security, principal)
        if is_exec and security.enabled and route != BATCH_ROUTE:  # a batch counts each item (batch_item_hold)
            cap = security.settings.quotas.concurrent_executions
            if not security.running.acquire(principal.workspace, cap):
                raise overloaded(1, f"this workspace already runs its maximum of {cap} executions at once",
                                 "workspace_busy")
            try:
                return await handler(request)
            finally:
                security.running.release(principal.workspace)
        response = await handler(request)
        if (request.method in _FILE_MODES and response.status < 400 and not route.endswith(":presign")
                and (route.startswith(SESSION_ROUTE_PREFIX + "/files") or route.startswith("/v1/shared/files"))):
            await _audit_file_change(security, principal, session_id, request.method,
                                     request.match_info.get("path") or request.query.get("dir"), response.status)
        return response
    finally:
        CURRENT.reset(token)


async def _check_disk(request: web.Request, security: Security, principal: Principal) -> None:
    assert security.disk is not None
    try:
        used, _ = await security.disk.measure_async(principal.workspace)
    except OSError as exc:
        raise unmeasurable("the workspace", exc) from None
    quota = security.disk.quota
    if used >= quota:
        raise ApiError(429, "workspace_disk_quota", f"this workspace holds {used} bytes, its quota is {quota}",
                       "delete files or sessions, then retry after the seconds in Retry-After",
                       {"Retry-After": "30"})


def batch_item_hold(request: web.Request) -> Callable[[], AbstractAsyncContextManager[None]] | None:
    """What each batch item holds with keys on, as an execution of its own: the workspace's disk quota is
    checked (a 429 refuses the item) and one of its concurrent executions taken, waiting for one to free."""
    security = request.app.get(SECURITY)
    if security is None or not security.enabled:
        return None
    principal = principal_of(request)
    cap = security.settings.quotas.concurrent_executions

    @contextlib.asynccontextmanager
    async def hold() -> AsyncIterator[None]:
        await _check_disk(request, security, principal)
        await security.running.wait_acquire(principal.workspace, cap)
        try:
            yield
        finally:
            security.running.release(principal.workspace)

    return hold


async def _audit_file_change(security: Security, principal: Principal, session_id: str | None, method: str,
                             path: str | None, status: int) -> None:
    """The change's audit row, committed before the response is sent."""
    owner = security.tenants.owner(session_id) if session_id else None
    await asyncio.wrap_future(security.audit.record_file_change(
        workspace=principal.workspace, key_id=principal.key_id, session=session_id,
        ephemeral=bool(owner and owner.ephemeral), mode=_FILE_MODES[method], path=path, status=status))


# -- sessions: quota on create, ownership, listing -------------------------------------------


def check_session_quota(request: web.Request) -> None:
    security = request.app.get(SECURITY)
    if security is None or not security.enabled:
        return
    principal = principal_of(request)
    service = request.app[SERVICE]
    held = sum(1 for s in security.tenants.sessions_of(principal.workspace) if s in service.sessions.sessions)
    cap = security.settings.quotas.sessions
    if held >= cap:
        raise ApiError(429, "workspace_session_quota", f"this workspace holds its maximum of {cap} sessions",
                       "delete sessions you no longer need, then retry", {"Retry-After": "60"})


def scope_session_id(request: web.Request, body: SessionCreate) -> SessionCreate:
    """With keys, a session id the caller chooses lives in its workspace's own namespace.

    Ids are global to the server, so a chosen id that another workspace already holds
    would answer 409 and reveal that it exists. The id is prefixed with a tag of the
    caller's workspace instead (the response carries the id to use); an id that already
    has the caller's tag is kept, so a returned id can be chosen again.
    """
    security = request.app.get(SECURITY)
    if body.id is None or security is None or not security.enabled:
        return body
    tag = hashlib.sha256(principal_of(request).workspace.encode()).hexdigest()[:8] + "-"
    if body.id.startswith(tag):
        return body
    return msgspec.structs.replace(body, id=(tag + body.id)[:64])


def claim_session(request: web.Request, session_id: str, ephemeral: bool) -> None:
    security = request.app.get(SECURITY)
    if security is None:
        return
    principal = request.get(PRINCIPAL) or LOCAL
    security.tenants.claim(session_id, principal.workspace, principal.key_id, principal.kind, ephemeral)


def visible_page(request: web.Request, cursor: str | None, limit: int):
    """The caller's sessions, oldest first, with the same cursor format as SessionManager.page."""
    from wasm_runner_server.sessions.manager import _decode_cursor, _encode_cursor

    service = request.app[SERVICE]
    security = request.app.get(SECURITY)
    if security is None or not security.enabled:
        return service.sessions.page(cursor, limit)
    principal = principal_of(request)
    owned = set(security.tenants.sessions_of(principal.workspace))
    lives = sorted((live for sid, live in service.sessions.sessions.items() if sid in owned and not live.deleted),
                   key=lambda live: (live.row.created_at, live.row.id))
    if cursor:
        after = _decode_cursor(cursor)
        lives = [live for live in lives if (live.row.created_at, live.row.id) > after]
    page = lives[:limit]
    next_cursor = _encode_cursor(page[-1].row.created_at, page[-1].row.id) if len(lives) > limit else None
    return page, next_cursor


# -- the execution observer --------------------------------------------------------------------


def audit_observer(app: web.Application):
    """Records each execution's audit row; the awaitable it returns is the row's commit, which the
    execution's response waits for."""

    def observe(target, request, result, mode: str) -> Awaitable[None] | None:
        security = app.get(SECURITY)
        if security is None:
            return
        principal = CURRENT.get() or (LOCAL if not security.enabled else Principal("unknown", "unknown", "unknown"))
        if security.disk is not None:
            security.disk.forget(principal.workspace)
        session_id = getattr(target, "id", None)
        if session_id is not None and session_id.startswith("oneshot-"):
            session_id = None
        owner = security.tenants.owner(session_id) if session_id else None
        service = app.get(SERVICE)
        live = service.sessions.sessions.get(session_id) if (service is not None and session_id) else None
        outcome = outcome_of(result) if result is not None else "aborted"
        try:
            committed = security.audit.record_execution(
                workspace=principal.workspace, key_id=principal.key_id, session=session_id,
                ephemeral=bool(owner and owner.ephemeral), mode=mode,
                profile=live.row.profile if live is not None else None,
                provider=request.provider or ("native" if request.command is not None else "wasm"),
                language=request.language, code=request.code, command=request.command, result=result,
                outcome=outcome, finished_at=time.time())
        except Exception:
            log.exception("audit write failed", extra={"event": "audit_failed"})
            raise
        return asyncio.wrap_future(committed)

    return observe


# -- start and stop ------------------------------------------------------------------------------


async def security_context(app: web.Application) -> AsyncIterator[None]:
    config = app[CONFIG]
    settings = config.auth
    data_dir = config.server.data_dir
    tenants = TenantStore.in_data_dir(data_dir)
    audit = AuditLog.in_data_dir(data_dir, code_bytes=settings.audit_code_bytes,
                                 output_bytes=settings.audit_output_bytes)
    signer = Signer(load_secrets(settings.presign_secrets, data_dir))
    security = Security(settings, data_dir, tenants, audit, signer, RateLimiter(settings.rate_per_s, settings.burst))
    app[SECURITY] = security
    service = app[SERVICE]
    security.disk = WorkspaceDisk(data_dir, settings.quotas.disk_bytes, tenants.sessions_of, service.disk)
    service.sessions.session_mounts = security.session_mounts
    service.execution.observers.append(audit_observer(app))
    if not settings.enabled:
        log.warning("AUTHENTICATION IS DISABLED: every caller has full access to the 'local' workspace. "
                    "Use this only on a trusted machine; never expose this server on a network.",
                    extra={"event": "auth_disabled"})
    elif not tenants.keys(include_revoked=False):
        log.warning("no API keys yet: create the first admin key with "
                    "`wasm-runner keys create --workspace admin --name root --kind admin "
                    f"--data-dir {data_dir}` (it is shown once)", extra={"event": "no_keys"})
    for session_id in tenants.ephemeral_sessions():  # ephemeral sessions never outlive the process
        live = service.sessions.sessions.get(session_id)
        if live is not None:
            await service.sessions.delete(live)
        tenants.release(session_id)
    pruned = audit.prune(settings.audit_retention_days)
    pruner = asyncio.create_task(_prune_daily(security), name="wasm-runner-audit-prune")
    if pruned:
        log.info("audit rows pruned", extra={"event": "audit_pruned", "rows": pruned})
    yield
    pruner.cancel()
    for session_id in tenants.ephemeral_sessions():
        live = service.sessions.sessions.get(session_id)
        if live is not None:
            await service.sessions.delete(live)
        tenants.release(session_id)
    tenants.close()
    audit.close()


async def _prune_daily(security: Security) -> None:
    while True:
        await asyncio.sleep(86400)
        security.audit.prune(security.settings.audit_retention_days)


def install_security(app: web.Application) -> None:
    """Add the middleware, the routes and the start/stop of the stores to an app from create_app."""
    from wasm_runner_server.security.routes import admin as routes_admin
    from wasm_runner_server.security.routes import audit as routes_audit
    from wasm_runner_server.security.routes import presign as routes_presign
    from wasm_runner_server.security.routes import shared as routes_shared

    app.middlewares.append(security_middleware)
    app.cleanup_ctx.append(security_context)
    app.add_routes(routes_presign.routes)
    app.add_routes(routes_audit.routes)
    app.add_routes(routes_admin.routes)
    app.add_routes(routes_shared.routes)
