"""The tenant, OAuth and usage stores, the artifacts, the audit log and the rate limiter `[store]`
configures: SQLite files in the data directory (the default), or the PostgreSQL database a cluster's nodes
share (the `cluster` extra)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from wasm_runner_server.artifacts.catalog import ArtifactCatalog
from wasm_runner_server.artifacts.store import ArtifactStore
from wasm_runner_server.http.preview_origins import SharedGrants
from wasm_runner_server.security.audit import AuditLog
from wasm_runner_server.security.console_sessions import ConsoleSessions, SharedConsole
from wasm_runner_server.security.oauth.store import OAuthStore
from wasm_runner_server.security.presign import SECRET_NAME, load_secrets, new_secret
from wasm_runner_server.security.ratelimit import Limiter, RateLimiter
from wasm_runner_server.security.tenants import TenantStore
from wasm_runner_server.security.usage import UsageLedger
from wasm_runner_server.sessions.open_store import store_settings

if TYPE_CHECKING:
    from wasm_runner_server.config import ServiceConfig
    from wasm_runner_server.security.running_pg import SharedRunning

StoreT = TypeVar("StoreT", TenantStore, OAuthStore, UsageLedger)


def _opened(kind: type[StoreT], config: ServiceConfig | None, data_dir: Path) -> StoreT:
    """A store of `kind`: its SQLite file in `data_dir` (`config` None: as the CLI finds it), or on the
    shared PostgreSQL database, released when the store closes."""
    settings = store_settings(config)
    if not settings.postgres:
        return kind.in_data_dir(data_dir)
    from wasm_runner_server.metadata import postgres
    from wasm_runner_server.metadata.sql import PostgresSql

    db = postgres.acquire(settings)
    return kind(sql=PostgresSql(db), on_close=lambda: postgres.release(db))


def tenant_store(config: ServiceConfig | None, data_dir: Path) -> TenantStore:
    """The tenants and keys."""
    return _opened(TenantStore, config, data_dir)


def oauth_store(config: ServiceConfig | None, data_dir: Path) -> OAuthStore:
    """The OAuth apps, grants and tokens."""
    return _opened(OAuthStore, config, data_dir)


def usage_ledger(config: ServiceConfig | None, data_dir: Path) -> UsageLedger:
    """The usage ledger and budgets."""
    return _opened(UsageLedger, config, data_dir)


def artifact_store(config: ServiceConfig, data_dir: Path) -> ArtifactStore:
    """The artifacts: in the data directory, or, for a cluster whose sessions are stored beyond its nodes
    (a PostgreSQL `[store]` and `[storage]` beyond the node), their catalog in the shared database and
    their bytes in the shared object store, so that any node lists and serves what another published."""
    settings = store_settings(config)
    if not (settings.postgres and config.storage.objects):
        return ArtifactStore.in_data_dir(data_dir, config.artifacts)
    from wasm_runner_server.artifacts.object_blobs import ObjectBlobStorage
    from wasm_runner_server.metadata import postgres
    from wasm_runner_server.metadata.sql import PostgresSql
    from wasm_runner_server.storage.objects import open_objects

    blobs = ObjectBlobStorage(open_objects(config.storage.with_environment()), data_dir / "artifacts" / "staging")
    db = postgres.acquire(settings)
    return ArtifactStore(ArtifactCatalog(sql=PostgresSql(db), on_close=lambda: postgres.release(db)), blobs,
                         config.artifacts)


SHARED_JOURNAL_STEM = ".audit"
"""A node's journal in `store.journal_dir`: `<node>.journal` (the log's path with the journal's suffix)."""


def audit_log(config: ServiceConfig | None, data_dir: Path, *, journal: bool = True, **kwargs: Any) -> AuditLog:
    """The audit log, its journal in `data_dir` (without `journal`: to read and prune only)."""
    settings = store_settings(config)
    if not settings.postgres:
        return AuditLog.in_data_dir(data_dir, **kwargs)
    from wasm_runner_server.metadata import postgres
    from wasm_runner_server.metadata.sql import PostgresSql

    db = postgres.acquire(settings)
    node = settings.node_name(data_dir)
    shared = (PostgresSql(db), node, lambda: postgres.release(db))
    try:
        if settings.journal_dir is not None:  # the cluster's journals side by side: any node replays a dead one's
            return AuditLog(Path(settings.journal_dir) / f"{node}{SHARED_JOURNAL_STEM}", shared=shared,
                            journal=journal, **kwargs)
        return AuditLog.in_data_dir(data_dir, shared=shared, journal=journal, **kwargs)
    except BaseException:
        postgres.release(db)
        raise


def presign_secrets(config: ServiceConfig | None, data_dir: Path) -> list[str]:
    """The secrets links are signed with: as configured, else one generated once, in the data directory or,
    for a cluster, in the shared database, so that a link signed by one node holds on every node (a
    session moves, and its links are forwarded to wherever it is)."""
    settings = store_settings(config)
    configured = config.auth.presign_secrets if config is not None else []
    if configured or not settings.postgres:
        return load_secrets(configured, data_dir)
    from wasm_runner_server.metadata import postgres

    db = postgres.acquire(settings)
    try:  # the first node's insert wins; every node reads the one row
        db.execute("INSERT INTO service_secrets (name, value) VALUES (%s, %s) ON CONFLICT (name) DO NOTHING",
                   (SECRET_NAME, new_secret()))
        row = db.fetchone("SELECT value FROM service_secrets WHERE name = %s", (SECRET_NAME,))
    finally:
        postgres.release(db)
    assert row is not None  # inserted above if it was missing
    return [row[0]]


def console_sessions(config: ServiceConfig | None, lifetime_s: float) -> ConsoleSessions:
    """The console's sign-ins: this node's memory, or the cluster's shared database."""
    settings = store_settings(config)
    if not settings.postgres:
        return ConsoleSessions(lifetime_s)
    from wasm_runner_server.metadata import postgres

    db = postgres.acquire(settings)
    return ConsoleSessions(lifetime_s, SharedConsole(db, lambda: postgres.release(db)))


def running_executions(config: ServiceConfig | None, data_dir: Path) -> SharedRunning | None:
    """The cluster's count of each workspace's running executions (None on a lone node: counted in memory)."""
    settings = store_settings(config)
    if not settings.postgres:
        return None
    from wasm_runner_server.metadata import postgres
    from wasm_runner_server.security.running_pg import SharedRunning

    db = postgres.acquire(settings)
    try:
        return SharedRunning(db, settings.node_name(data_dir))
    except BaseException:
        postgres.release(db)
        raise


def preview_grants(config: ServiceConfig | None) -> SharedGrants | None:
    """The cluster's preview grants (None on a lone node: its grants stay in its memory)."""
    settings = store_settings(config)
    if not settings.postgres:
        return None
    from wasm_runner_server.metadata import postgres

    db = postgres.acquire(settings)
    return SharedGrants(db, lambda: postgres.release(db))


def rate_limiter(config: ServiceConfig | None, rate: float, burst: float) -> Limiter:
    """The API keys' token buckets: this process's, or the cluster's in the shared database (held by the
    limiter for the process's life: the service opens one)."""
    settings = store_settings(config)
    if not settings.postgres:
        return RateLimiter(rate, burst)
    from wasm_runner_server.metadata import postgres
    from wasm_runner_server.security.ratelimit_pg import SharedRateLimiter

    return SharedRateLimiter(postgres.acquire(settings), rate, burst)
