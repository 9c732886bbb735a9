"""Who is calling, and what they may see: API keys, workspace isolation, quotas, rate limits, audit.

`SecurityPolicy` is the service's `AccessPolicy` (create_app uses it unless given another):
- its middleware (after the error middleware, so its errors have the service's error shape)
  resolves `Authorization: Bearer <key>` to a `Principal` (workspace, key id, kind), answers
  401 without one (except `auth.public_paths` and presigned links), applies the per-key rate
  limit, checks the permission a route declares (`security.access`: 403 permission_denied), and
  refuses any route naming a session `{id}` the caller's workspace does not own
  with exactly the 404 of a session that does not exist;
- per-workspace quotas (sessions, concurrent executions, disk) answering 429 + Retry-After;
- the audit observer on every execution and a row for every file change;
- the writable /workspace/shared mount for sessions opened with a member key;
- the presign, link, audit, admin and shared-files routes.
With `auth.enabled = false` every caller is the `local` workspace (a loud warning at start); the
audit log, links and shared/ work as with keys. The two differences are strategies chosen once
(`Security.open`): the authenticator (API keys or the one local caller) and the quotas.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import msgspec
from aiohttp import web

from wasm_runner import ExecRequest, ExecResult, Mount, Runner, Session
from wasm_runner.egress.credentials import CredentialBroker
from wasm_runner.processes import BackgroundProcess
from wasm_runner_protocol.egress import EgressPolicy
from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_protocol.packages import InstallResult, PackageRequest
from wasm_runner_protocol.tools import ToolCall
from wasm_runner_protocol.wire import SessionCreate
from wasm_runner_server.config import ServiceConfig
from wasm_runner_server.e2b.upstream import GATEWAY
from wasm_runner_server.errors import ApiError, session_not_found
from wasm_runner_server.http.paths import (
    ARTIFACT_LINK_PREFIX,
    BATCH_ROUTE,
    CONSOLE_PREFIX,
    CONSOLE_SESSION_PATH,
    EXEC_ROUTES,
    LINK_PREFIX,
    PREVIEW_LINK_PREFIX,
    PTY_LINK_PREFIX,
    SESSION_ROUTE_PREFIX,
)
from wasm_runner_server.http.policy import (
    CURRENT,
    LOCAL,
    PRINCIPAL,
    AccessPolicy,
    Handler,
    ItemHold,
    Principal,
    WorkspaceQuota,
)
from wasm_runner_server.metadata.sql import UNREACHABLE
from wasm_runner_server.security.access import GRANT, authorize
from wasm_runner_server.security.console_sessions import check_csrf, cookie_session, is_console_route
from wasm_runner_server.security.disk_layouts import OWN
from wasm_runner_server.security.first_run import create_first_key
from wasm_runner_server.security.oauth.scopes import check_scope
from wasm_runner_server.security.quotas import Enforced
from wasm_runner_server.security.routes import admin, artifacts, audit, console, me, members, oauth, presign, shared, usage
from wasm_runner_server.security.routes.oauth import OAUTH_PREFIX
from wasm_runner_server.security.state import FILE_MODES, SECURITY, Security
from wasm_runner_server.sessions.cursor import decode_cursor, encode_cursor
from wasm_runner_server.sessions.execution import outcome as outcome_of
from wasm_runner_server.sessions.manager import ONESHOT_PREFIX, LiveSession
from wasm_runner_server.sessions.service import SERVICE
from wasm_runner_server.sessions.session_disk import SessionDisk

log = logging.getLogger("wasm_runner.server.auth")
REPLAY_S = 30.0
"""How often a node looks for the audit journals of nodes that died (store.journal_dir)."""

PROCESS_START_ROUTE = SESSION_ROUTE_PREFIX + "/processes"
"""Starting a background process: refused, like an execution, once the workspace's budget is spent."""


def shared_session_refused(session_id: str) -> ApiError:
    return ApiError(403, ErrorCode.SHARED_SESSION, f"session {session_id!r} was opened with a member key and mounts the "
                    "workspace's shared/ directory, which app keys cannot reach",
                    "use a session opened with this key (POST /v1/sessions)")


def _canonical(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else ""


class SecurityPolicy(AccessPolicy):
    def __init__(self, config: ServiceConfig) -> None:
        self.config = config
        self._security: Security | None = None
        self._app: web.Application | None = None

    @property
    def security(self) -> Security:
        """The stores and strategies, open while the application runs (see `context`)."""
        if self._security is None:
            raise RuntimeError("the security policy is used before its application started")
        return self._security

    def authenticate(self, request: web.Request) -> Principal:
        return self.security.authenticator.authenticate(request)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        path = request.path
        if (path.startswith((LINK_PREFIX, ARTIFACT_LINK_PREFIX, PREVIEW_LINK_PREFIX, PTY_LINK_PREFIX))
                or path in self.config.auth.public_paths
                or path == CONSOLE_PREFIX or path.startswith(CONSOLE_PREFIX + "/") or path == CONSOLE_SESSION_PATH
                or path.startswith(OAUTH_PREFIX)):
            # links carry their credential; the console page holds no data; the OAuth endpoints check the
            # member's sign-in or the app's credentials themselves (security.routes.oauth)
            return await handler(request)
        if any(GATEWAY in app for app in request.match_info.apps):
            # A route of the E2B gateway: it does each thing by calling this API with the caller's key
            # (E2B sends it in X-API-Key / X-Access-Token), and those calls are authenticated, limited
            # and audited here. Only the gateway's own routes pass, whatever its prefix.
            return await handler(request)
        security = self.security
        route = _canonical(request)
        principal = self._console_principal(request, route) or security.authenticator.authenticate(request)
        if principal.scopes is not None and route:  # (no route: the 404 follows)
            check_scope(request.method, route, principal.scopes)
        security.authenticator.take_rate(principal.key_id)
        request[PRINCIPAL] = principal
        spec = getattr(request.match_info.handler, "__openapi__", None)
        if spec is not None and spec.permission is not None:  # the one check of every admin route's permission
            request[GRANT] = authorize(principal, security.tenants, spec.permission, spec.own)
        token = CURRENT.set(principal)
        try:
            session_id = request.match_info.get("id") if route.startswith(SESSION_ROUTE_PREFIX) else None
            if session_id is not None and not security.owns(principal, session_id):
                raise session_not_found(session_id)
            if session_id is not None and not principal.shared and security.mounts_shared(session_id):
                raise shared_session_refused(session_id)
            is_exec = request.method == "POST" and route in EXEC_ROUTES
            if is_exec or (request.method == "POST" and route == PROCESS_START_ROUTE):
                security.budgets.check(principal.workspace)  # 402 once a budget of the month is spent
            writes = is_exec or (request.method in FILE_MODES and (route.startswith(SESSION_ROUTE_PREFIX + "/files")
                                                                   or route.startswith("/v1/shared/")))
            # Deleting frees room: never refused. Nor is a run in a session: in a full workspace it gets
            # no room to grow (sessions.run_disk) but may delete, which is how a guest frees space.
            if writes and request.method != "DELETE" and not (is_exec and session_id is not None):
                await security.quotas.check_disk(principal)
            if is_exec and route != BATCH_ROUTE:  # a batch counts each item (batch_item_hold)
                async with security.quotas.execution(principal):
                    return await handler(request)
            response = await handler(request)
            if (request.method in FILE_MODES and response.status < 400 and not route.endswith(":presign")
                    and (route.startswith(SESSION_ROUTE_PREFIX + "/files") or route.startswith("/v1/shared/files"))):
                security.record_file_change(  # on disk before the response
                    principal, session_id, request.method, request.match_info.get("path") or request.query.get("dir"),
                    response.status)
            return response
        finally:
            CURRENT.reset(token)

    def _console_principal(self, request: web.Request, route: str) -> Principal | None:
        """The console's caller, from its cookie: only without an Authorization header, only on the routes
        the console calls, and a state-changing call only with the session's CSRF token (403 without)."""
        if "Authorization" in request.headers or not is_console_route(route):
            return None
        security = self.security
        session = cookie_session(request, security.console)
        if session is None or not security.authenticator.key_active(session.principal.key_id):
            return None  # the key's 401 follows, as for any call without one
        check_csrf(request, session)
        return session.principal

    # -- sessions: quota on create, ownership, listing -------------------------------------------

    def admit_link(self, key_id: str) -> None:
        self.security.authenticator.admit_link(key_id)

    def check_session_quota(self, request: web.Request, count: int = 1) -> None:
        security = self.security
        security.quotas.check_session_quota(security.authenticator.principal_of(request),
                                            request.app[SERVICE].sessions.sessions, count)

    def session_owner(self, session_id: str) -> str:
        owner = self.security.tenants.owner(session_id)
        return owner.workspace if owner is not None else ""

    def caller_workspace(self, request: web.Request) -> str:
        return (request.get(PRINCIPAL) or LOCAL).workspace

    def session_ephemeral(self, session_id: str) -> bool:
        owner = self.security.tenants.owner(session_id)
        return bool(owner and owner.ephemeral)

    def on_session_event(self, request: web.Request, mode: str, session_id: str | None, detail: dict,
                         error: str | None = None) -> None:
        principal = request.get(PRINCIPAL) or LOCAL
        self.security.audit.record_session_event(
            workspace=principal.workspace, key_id=principal.key_id, session=session_id,
            ephemeral=self.session_ephemeral(session_id) if session_id else False, mode=mode, detail=detail,
            ok=error is None, error=error)

    def scope_session_id(self, request: web.Request, body: SessionCreate) -> SessionCreate:
        if body.id is None:
            return body
        authenticator = self.security.authenticator
        return authenticator.scope_session_id(authenticator.principal_of(request), body)

    def check_session_disk(self, request: web.Request, body: SessionCreate) -> None:
        principal = request.get(PRINCIPAL) or LOCAL
        self.security.place_session(principal, body, body.id or "placeholder")  # the 4xx, before anything is made

    def claim_session(self, request: web.Request, session_id: str, ephemeral: bool,
                      body: SessionCreate | None = None) -> None:
        principal = request.get(PRINCIPAL) or LOCAL
        placed = self.security.place_session(principal, body, session_id) if body is not None else OWN
        self.security.tenants.claim(session_id, principal.workspace, principal.key_id, principal.kind, ephemeral,
                                    placed.disk, placed.workdir)

    def session_disk(self, session_id: str) -> SessionDisk:
        return self.security.session_disk(session_id)

    def visible_page(self, request: web.Request, cursor: str | None,
                     limit: int) -> tuple[list[LiveSession], str | None]:
        """The caller's sessions, oldest first, with the same cursor format as SessionManager.page."""
        service = request.app[SERVICE]
        authenticator = self.security.authenticator
        owned = authenticator.visible_sessions(authenticator.principal_of(request), self.security.tenants)
        if owned is None:
            return service.sessions.page(cursor, limit)
        local = [live for sid, live in service.sessions.sessions.items() if sid in owned and not live.deleted]
        remote = service.sessions.elsewhere(sorted(owned))  # a cluster's other nodes' (none on one node)
        lives = sorted(local + remote, key=lambda live: (live.row.created_at, live.row.id))
        if cursor:
            after = decode_cursor(cursor)
            lives = [live for live in lives if (live.row.created_at, live.row.id) > after]
        page = lives[:limit]
        next_cursor = encode_cursor(page[-1].row.created_at, page[-1].row.id) if len(lives) > limit else None
        return page, next_cursor

    def workspace_quota(self, session_id: str) -> WorkspaceQuota | None:
        owner = self.security.tenants.owner(session_id)
        return self.security.workspace_quota(owner.workspace if owner is not None else None)

    def disk_changed(self, session_id: str) -> None:
        owner = self.security.tenants.owner(session_id)
        if owner is not None:
            self.security.disk.forget(owner.workspace, session_id)

    def batch_item_hold(self, request: web.Request) -> ItemHold | None:
        """Each batch item is admitted as an execution: refused (402) once a budget of the workspace is spent;
        with keys, the workspace's disk quota is checked (a 429 refuses the item) and one of its concurrent
        executions taken, waiting for one."""
        security = self.security
        principal = security.authenticator.principal_of(request)
        quota_hold = security.quotas.batch_item_hold(principal)

        @contextlib.asynccontextmanager
        async def hold() -> AsyncIterator[None]:
            security.budgets.check(principal.workspace)  # an item past a spent budget gets its 402 as its result
            if quota_hold is None:
                yield
                return
            async with quota_hold():
                yield

        return hold

    def session_mounts(self, session_id: str) -> tuple[Mount, ...]:
        return self.security.session_mounts(session_id)

    # -- the execution observer --------------------------------------------------------------------

    def on_execution(self, target: Runner | Session, request: ExecRequest, result: ExecResult | None,
                     mode: str) -> None:
        """Records the execution's audit row (on disk before the execution's result is given out)."""
        if self._security is None or self._app is None:
            return
        security = self._security
        principal = CURRENT.get() or security.authenticator.unknown
        session_id = getattr(target, "id", None)
        if session_id is not None and session_id.startswith(ONESHOT_PREFIX):
            session_id = None
        security.disk.forget(principal.workspace, session_id)
        owner = security.tenants.owner(session_id) if session_id else None
        service = self._app.get(SERVICE)
        live = service.sessions.sessions.get(session_id) if (service is not None and session_id) else None
        outcome = outcome_of(result) if result is not None else "aborted"
        native = (result.isolation != "wasm") if result is not None else request.command is not None
        security.meter.execution(principal, result, native)
        try:
            security.audit.record_execution(
                workspace=principal.workspace, key_id=principal.key_id, session=session_id,
                ephemeral=bool(owner and owner.ephemeral), mode=mode,
                profile=live.row.profile if live is not None else None,
                provider=request.provider or ("native" if request.command is not None else "wasm"),
                language=request.language, code=request.code, command=request.command, result=result,
                outcome=outcome, finished_at=time.time(),
                redact=CredentialBroker(request.credentials).redact if request.credentials else None)
        except Exception:
            log.exception("audit write failed", extra={"event": "audit_failed"})
            raise

    def on_packages(self, principal: Principal, session_id: str, body: PackageRequest, result: InstallResult) -> None:
        """Records the install's audit row (what was asked, what was installed and the session's lock after
        it) and has the session's disk usage measured afresh."""
        if self._security is None:
            return
        security = self._security
        owner = security.tenants.owner(session_id)
        security.disk.forget(owner.workspace if owner is not None else principal.workspace, session_id)
        security.audit.record_packages(
            workspace=principal.workspace, key_id=principal.key_id, session=session_id,
            ephemeral=bool(owner and owner.ephemeral), requested=msgspec.json.encode(body).decode(),
            installed=msgspec.json.encode(result.installed).decode(),
            lock=msgspec.json.encode(result.lock).decode(), ok=result.ok,
            error=result.error.message if result.error else None, duration_ms=result.duration_ms)

    def on_tool_call(self, request: web.Request, session_id: str, call: ToolCall) -> None:
        """Records the call's audit row: the tool, its arguments' digest (never their values), how long it
        took and how it ended (any thread: rows are queued to the writer)."""
        if self._security is None:
            return
        principal = request.get(PRINCIPAL) or LOCAL
        owner = self._security.tenants.owner(session_id)
        try:
            self._security.audit.record_tool_call(
                workspace=principal.workspace, key_id=principal.key_id, session=session_id,
                ephemeral=bool(owner and owner.ephemeral), tool=call.tool, arguments_sha256=call.arguments_sha256,
                outcome=call.outcome, duration_ms=call.duration_ms, error=call.error, approval=call.approval)
        except Exception:  # noqa: BLE001 - the guest's call is answered whatever the log does
            log.exception("audit write failed", extra={"event": "audit_failed"})

    def on_egress_change(self, request: web.Request, session_id: str, profile: str, previous: EgressPolicy,
                         requested: EgressPolicy | None, error: str | None) -> None:
        """Records the change's audit row: who asked, the policy before and the one asked for (null:
        the profile's), refused or made."""
        if self._security is None:
            return
        security = self._security
        principal = request.get(PRINCIPAL) or LOCAL
        owner = security.tenants.owner(session_id)
        security.audit.record_policy(
            workspace=principal.workspace, key_id=principal.key_id, session=session_id,
            ephemeral=bool(owner and owner.ephemeral), profile=profile,
            previous=msgspec.json.encode(previous).decode(), requested=msgspec.json.encode(requested).decode(),
            ok=error is None, error=error)

    def on_process(self, event: str, session_id: str, process: BackgroundProcess, owner: object) -> None:
        """Records the process's start or end row (who started it, the command, exit code, duration),
        and its egress decisions: a "network" row per batch while it runs, the rest on its end row."""
        if self._security is None:
            return
        security = self._security
        principal = owner if isinstance(owner, Principal) else security.authenticator.unknown
        tenant = security.tenants.owner(session_id)
        request = process.request
        network = process.take_network() if event != "start" else []
        if event == "start":
            security.meter.process_started(process.id, principal, process.started_at)
        elif event == "exit":
            security.meter.process_ended(process.id, process.ended_at, network)
        else:
            security.meter.process_network(process.id, network)
        try:
            security.audit.record_process(
                workspace=principal.workspace, key_id=principal.key_id, session=session_id,
                ephemeral=bool(tenant and tenant.ephemeral), event=event, process_id=process.id,
                command=list(request.command or []), code=request.code if request.command is None else "",
                language=request.language, state=process.state, exit_code=process.exit_code,
                started_at=process.started_at, finished_at=process.ended_at if event == "exit" else None,
                stdout_bytes=process.stdout.end, stderr_bytes=process.stderr.end, error=process.error(),
                network=network,
                redact=CredentialBroker(request.credentials).redact if request.credentials else None)
        except Exception:
            log.exception("audit write failed", extra={"event": "audit_failed"})

    # -- routes, start and stop -------------------------------------------------------------------

    def routes(self) -> Iterable[web.AbstractRouteDef]:
        return [*presign.routes, *artifacts.routes, *audit.routes, *admin.routes, *members.routes, *me.routes,
                *shared.routes, *console.routes, *oauth.routes, *usage.routes]

    async def context(self, app: web.Application) -> AsyncIterator[None]:
        settings = self.config.auth
        data_dir = self.config.server.data_dir
        service = app[SERVICE]
        security = Security.open(self.config, service)
        self._security = security
        self._app = app
        app[SECURITY] = security
        if not settings.enabled:
            log.warning("AUTHENTICATION IS DISABLED: every caller has full access to the 'local' workspace. "
                        "Use this only on a trusted machine; never expose this server on a network.",
                        extra={"event": "auth_disabled"})
        elif settings.first_run_key and not security.tenants.keys():
            create_first_key(security.tenants, self.config)
        elif not security.tenants.keys(include_revoked=False):
            log.warning("no API keys yet: create the first admin key with "
                        "`wasm-runner keys create --workspace admin --name root --kind admin "
                        f"--data-dir {data_dir}` (it is shown once)", extra={"event": "no_keys"})
        await self._drop_ephemeral(app)  # temporary sessions never outlive the process
        service.sessions.removal_observers.append(self._session_removed)
        pruned = security.audit.prune(settings.audit_retention_days)
        security.oauth.prune()  # expired codes and tokens (and daily after)
        pruner = asyncio.create_task(self._prune_daily(), name="wasm-runner-audit-prune")
        replayer = asyncio.create_task(self._replay_others_forever(), name="wasm-runner-audit-replay")
        renewer = asyncio.create_task(self._renew_running_forever(), name="wasm-runner-running-renew")
        if pruned:
            log.info("audit rows pruned", extra={"event": "audit_pruned", "rows": pruned})
        self.prune_artifacts()
        artifact_pruner = asyncio.create_task(self._prune_artifacts_forever(), name="wasm-runner-artifact-prune")
        ledger = security.usage
        service.metrics.family("wasm_runner_usage_total", "Usage metered by this process since it started, by "
                               "unit (GET /v1/usage has it per workspace, payer and day).", "counter", ("unit",),
                               lambda: {(unit,): amount for unit, amount in ledger.totals.items()})
        security.meter.tick(*self.stored())  # the first storage sample starts its clock
        metering = [asyncio.create_task(self._flush_usage_forever(), name="wasm-runner-usage-flush"),
                    asyncio.create_task(self._sample_usage_forever(), name="wasm-runner-usage-sample")]
        yield
        pruner.cancel()
        replayer.cancel()
        renewer.cancel()
        artifact_pruner.cancel()
        for task in metering:
            task.cancel()
        try:
            await self._drop_ephemeral(app)
        except UNREACHABLE:  # a cluster's database is down: its node's ephemeral sessions are dropped at next start
            log.exception("ephemeral sessions not dropped", extra={"event": "metadata_unavailable"})
        await service.processes.close()  # their exit rows are written before the audit log closes
        try:
            await asyncio.to_thread(security.meter.tick, *self.stored())  # stored bytes up to now
        except Exception:
            log.exception("usage sample failed", extra={"event": "usage_failed"})
        security.close()

    def _session_removed(self, session_id: str) -> None:
        """A deleted or expired temporary session's owner is forgotten (it was in memory only)."""
        owner = self.security.tenants.owner(session_id)
        if owner is not None and owner.ephemeral:
            self.security.tenants.release(session_id)

    async def _drop_ephemeral(self, app: web.Application) -> None:
        service = app[SERVICE]
        tenants = self.security.tenants
        ephemeral = tenants.ephemeral_sessions()
        elsewhere = {live.row.id for live in service.sessions.elsewhere(ephemeral)}
        for session_id in ephemeral:
            if session_id in elsewhere:
                continue  # another node's (in a cluster): it drops them itself
            live = service.sessions.sessions.get(session_id)
            if live is not None:
                await service.sessions.delete(live)
            tenants.release(session_id)

    def stored(self) -> tuple[list[tuple[Path, Principal]], list[tuple[str, Path]]]:
        """What holds stored bytes on this node: its sessions' directories with their owners, and their
        workspaces' own directories (shared/), for the meter's sample."""
        if self._app is None:
            return [], []
        security = self.security
        service = self._app[SERVICE]
        sessions = []
        workspaces: set[str] = set()
        for session_id in list(service.sessions.sessions):
            owner = security.tenants.owner(session_id)
            if owner is None:
                continue
            sessions.append((service.sessions.sessions_dir / session_id,
                             Principal(owner.workspace, owner.key_id, owner.kind)))
            workspaces.add(owner.workspace)
        return sessions, [(w, security.disk.own_dir(w)) for w in sorted(workspaces)]

    async def _flush_usage_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.auth.usage.flush_interval_s)
            try:
                await asyncio.to_thread(self.security.usage.flush)
            except Exception:
                log.exception("usage write failed", extra={"event": "usage_failed"})

    async def _sample_usage_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.auth.usage.sample_interval_s)
            try:  # what to sample is read here, the directories walked on a thread
                await asyncio.to_thread(self.security.meter.tick, *self.stored())
            except Exception:
                log.exception("usage sample failed", extra={"event": "usage_failed"})

    def prune_artifacts(self) -> int:
        """Remove the artifacts past their retention, with an audit row each; how many."""
        security = self.security
        expired = security.artifacts.prune()
        for artifact in expired:
            security.audit.record_artifact(workspace=artifact.workspace, key_id="retention", session=artifact.session,
                                           ephemeral=False, mode="expire", artifact_id=artifact.id,
                                           path=artifact.source_path, status=200)
        if expired:
            log.info("artifacts expired", extra={"event": "artifacts_expired", "artifacts": len(expired)})
        return len(expired)

    async def _prune_artifacts_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.artifacts.prune_interval_s)
            try:
                await asyncio.to_thread(self.prune_artifacts)
            except Exception:
                log.exception("artifact prune failed", extra={"event": "artifact_prune_failed"})

    async def _replay_others_forever(self) -> None:
        """Replay into the database the audit journals of nodes that died, beside this node's own (with
        `store.journal_dir`: the cluster's journals share a directory), at start and every REPLAY_S."""
        while True:
            try:
                added = await asyncio.to_thread(self.security.audit.replay_others)
            except Exception:
                log.exception("replay of other nodes' audit journals failed", extra={"event": "audit_replay_failed"})
            else:
                if added:
                    log.info("audit rows of a stopped node replayed", extra={"event": "audit_replayed_others",
                                                                             "rows": added})
            await asyncio.sleep(REPLAY_S)

    async def _renew_running_forever(self) -> None:
        """A cluster's count of running executions: this node's rows renewed while they run (see running_pg)."""
        quotas = self.security.quotas
        shared = quotas.shared if isinstance(quotas, Enforced) else None
        if shared is None:
            return
        while True:
            await asyncio.sleep(shared.renew_s)
            try:
                await asyncio.to_thread(shared.renew)
            except Exception:
                log.exception("running executions not renewed", extra={"event": "metadata_unavailable"})

    async def _prune_daily(self) -> None:
        while True:
            await asyncio.sleep(86400)
            self.security.audit.prune(self.config.auth.audit_retention_days)
            self.security.oauth.prune()

