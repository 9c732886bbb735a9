"""What the security policy holds while the service runs: the key and audit stores, the link signer,
the workspaces' disk usage and the two strategies chosen from the settings."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from wasm_runner import Mount
from wasm_runner_protocol.guest import GUEST_WORKSPACE
from wasm_runner_protocol.wire import SessionCreate
from wasm_runner_server.artifacts.store import ArtifactStore
from wasm_runner_server.config import ServiceConfig
from wasm_runner_server.http.disk_quota import WorkspaceDisk
from wasm_runner_server.http.policy import Principal, WorkspaceQuota
from wasm_runner_server.security import stores
from wasm_runner_server.security.audit import AuditLog
from wasm_runner_server.security.authenticators import ApiKeys, Authenticator, LocalOnly
from wasm_runner_server.security.budgets import Budgets
from wasm_runner_server.security.console_sessions import ConsoleSessions
from wasm_runner_server.security.disk_layouts import Placement, owned_by, place
from wasm_runner_server.security.metering import Meter
from wasm_runner_server.security.oauth.server import OAuthServer
from wasm_runner_server.security.oauth.store import OAuthStore
from wasm_runner_server.security.presign import Signer
from wasm_runner_server.security.quotas import Enforced, Quotas, Unlimited
from wasm_runner_server.security.settings import AuthSettings, DiskLayout
from wasm_runner_server.security.team import Team
from wasm_runner_server.security.tenants import TenantStore
from wasm_runner_server.security.usage import UsageLedger
from wasm_runner_server.sessions.service import Service
from wasm_runner_server.sessions.session_disk import OWN_DIRECTORY, SessionDisk

SHARED_GUEST = "/workspace/shared"
FILE_MODES = {"PUT": "put", "POST": "upload", "PATCH": "edit", "DELETE": "delete"}
"""The audit log's mode of a file change, by HTTP method."""


JOURNAL_WAIT_S = 2.0
"""How long the service waits for its audit journal's lock at start (another node may be replaying it)."""


@dataclass(eq=False)
class Security:
    settings: AuthSettings
    data_dir: Path
    tenants: TenantStore
    audit: AuditLog
    signer: Signer
    disk: WorkspaceDisk
    """Each workspace's disk usage against auth.quotas.disk_bytes."""
    authenticator: Authenticator
    quotas: Quotas
    artifacts: ArtifactStore
    """Published files, kept apart from the sessions under their own retention."""
    console: ConsoleSessions
    """The console's signed-in browsers (a cookie each)."""
    oauth: OAuthStore
    """Apps acting for members: their registrations, grants, tokens and the members' consents."""
    oauth_server: OAuthServer
    team: Team
    """The workspaces' members and roles: changes checked and audited."""
    usage: UsageLedger
    """What each workspace used, per payer, day and unit; and the budgets set through the API."""
    meter: Meter
    """What counts into `usage`: executions, processes, stored bytes, egress."""
    budgets: Budgets

    @classmethod
    def open(cls, config: ServiceConfig, service: Service) -> Security:
        settings = config.auth
        data_dir = config.server.data_dir
        tenants = stores.tenant_store(config, data_dir)
        audit = stores.audit_log(config, data_dir, code_bytes=settings.audit_code_bytes,
                                 output_bytes=settings.audit_output_bytes, journal_wait_s=JOURNAL_WAIT_S)
        signer = Signer(stores.presign_secrets(config, data_dir))
        placement = service.sessions.placement
        disk = WorkspaceDisk(data_dir, settings.quotas.disk_bytes, tenants.sessions_of, service.disk,
                             placement.stored_bytes if placement is not None else None,
                             service.copies.templates_stored if service.copies is not None else None,
                             config.storage.workspaces_dir(data_dir))
        oauth = stores.oauth_store(config, data_dir)
        oauth_server = OAuthServer(oauth, access_s=settings.oauth.access_token_s,
                                   refresh_s=settings.oauth.refresh_token_s, code_s=settings.oauth.code_s,
                                   key_active=lambda key_id: tenants.active_key(key_id) is not None)
        if settings.enabled:
            authenticator: Authenticator = ApiKeys(tenants, stores.rate_limiter(config, settings.rate_per_s,
                                                                                settings.burst), settings.rate_per_s,
                                                   oauth)
            quotas: Quotas = Enforced(settings.quotas, disk, tenants, stores.running_executions(config, data_dir))
        else:
            authenticator, quotas = LocalOnly(), Unlimited()
        artifacts = stores.artifact_store(config, data_dir)
        usage = stores.usage_ledger(config, data_dir)
        return cls(settings, data_dir, tenants, audit, signer, disk, authenticator, quotas, artifacts,
                   stores.console_sessions(config, settings.console_session_s), oauth, oauth_server, Team(tenants, audit), usage,
                   Meter(usage), Budgets(usage, settings.budgets))

    def close(self) -> None:
        if isinstance(self.authenticator, ApiKeys):
            self.authenticator.limiter.close()
        self.tenants.close()
        self.oauth.close()
        self.audit.close()
        self.artifacts.close()
        self.usage.close()
        if self.console.shared is not None:
            self.console.shared.release()
        if isinstance(self.quotas, Enforced) and self.quotas.shared is not None:
            self.quotas.shared.close()

    def shared_dir(self, workspace: str) -> Path:
        path = self.disk.own_dir(workspace) / "shared"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def disk_layout(self, workspace: str) -> DiskLayout:
        """The workspace's disk layout: its own setting, else the service's."""
        settings = self.settings
        return settings.workspace_disk_layouts.get(workspace, settings.disk_layout)

    def place_session(self, principal: Principal, body: SessionCreate, session_id: str) -> Placement:
        """Where a session `principal` creates with `body` keeps its /workspace (ApiError 4xx: it cannot)."""
        return place(self.disk_layout(principal.workspace), principal, body, session_id)

    def session_disk(self, session_id: str) -> SessionDisk:
        """Where the session's /workspace is, as placed when it was created."""
        owner = self.tenants.owner(session_id)
        if owner is None or not owner.disk:
            return OWN_DIRECTORY
        return SessionDisk(self.disk.own_dir(owner.workspace) / owner.disk, owner.workdir, owned_by(owner.disk),
                           self.disk_layout(owner.workspace).guest_path or GUEST_WORKSPACE)

    def owns(self, principal: Principal, session_id: str) -> bool:
        return self.authenticator.owns(principal, self.tenants.owner(session_id))

    def mounts_shared(self, session_id: str) -> bool:
        """Whether the session sees shared/: fixed when it is created, by the kind of the key creating it.
        Its kernels keep whatever they read there, so only keys allowed shared/ may use such a session."""
        owner = self.tenants.owner(session_id)
        return owner is not None and owner.kind != "app" and not owner.ephemeral  # a temporary one starts empty

    def session_mounts(self, session_id: str) -> tuple[Mount, ...]:
        owner = self.tenants.owner(session_id)
        if owner is None:
            return ()
        mounts: list[Mount] = []
        disk = self.session_disk(session_id)
        alias = None
        if disk.files is not None and disk.guest_root != GUEST_WORKSPACE:  # the layout's disk at its own path
            alias = disk.guest_root                                          # too, counted once (as /workspace)
            mounts.append(Mount(disk.files, alias, writable=True, alias=True))
        if self.mounts_shared(session_id):
            # Only what a run adds to shared/ counts against it; the workspace quota holds through the
            # room each run reserves (sessions.run_disk), not through a budget measured absolutely.
            shared = self.shared_dir(owner.workspace)
            mounts.append(Mount(shared, SHARED_GUEST, writable=True, shared=True))
            if alias is not None:
                mounts.append(Mount(shared, f"{alias}/shared", writable=True, shared=True, alias=True))
        return tuple(mounts)

    def workspace_quota(self, workspace: str | None) -> WorkspaceQuota | None:
        """What a write into `workspace` reserves against (None: no workspace quota applies)."""
        if workspace is None:
            return None
        disk = self.disk
        return workspace, disk.quota, lambda: disk.measure_async(workspace)

    def record_file_change(self, principal: Principal, session_id: str | None, method: str, path: str | None,
                           status: int) -> None:
        """Record the change's audit row (on disk once this returns: call it before answering)."""
        owner = self.tenants.owner(session_id) if session_id else None
        self.audit.record_file_change(workspace=principal.workspace, key_id=principal.key_id, session=session_id,
                                      ephemeral=bool(owner and owner.ephemeral), mode=FILE_MODES[method],
                                      path=path, status=status)


SECURITY = web.AppKey("security", Security)
