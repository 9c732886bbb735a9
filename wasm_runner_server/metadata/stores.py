"""The metadata stores as `[store]` configures them: SQLite files in the data directory (the default),
or the PostgreSQL database a cluster's nodes share (the `cluster` extra)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from wasm_runner_server.metadata.settings import StoreSettings
from wasm_runner_server.security.audit import AuditLog
from wasm_runner_server.security.tenants import TenantStore
from wasm_runner_server.sessions.store import SessionMetadata, SessionStore

if TYPE_CHECKING:
    from wasm_runner_server.config import ServiceConfig

SESSIONS_DB = "server.sqlite3"


def settings_of(config: ServiceConfig) -> StoreSettings:
    """The configured store, `WASM_RUNNER_STORE_URL` applied."""
    return config.store.with_environment()


def node_name(config: ServiceConfig) -> str:
    return settings_of(config).node_name(config.server.data_dir)


def session_store(config: ServiceConfig) -> SessionMetadata:
    settings = settings_of(config)
    data_dir = Path(config.server.data_dir)
    if not settings.postgres:
        return SessionStore(data_dir / SESSIONS_DB)
    from wasm_runner_server.sessions.store_pg import PostgresSessionStore

    return PostgresSessionStore(settings, settings.node_name(data_dir))


def tenant_store(config: ServiceConfig | None, data_dir: Path) -> TenantStore:
    """The tenants and keys (`config` None: the SQLite file in `data_dir`, as the CLI finds it)."""
    settings = settings_of(config) if config is not None else StoreSettings().with_environment()
    if not settings.postgres:
        return TenantStore.in_data_dir(data_dir)
    from wasm_runner_server.metadata import postgres
    from wasm_runner_server.metadata.sql import PostgresSql

    db = postgres.acquire(settings)
    return TenantStore(sql=PostgresSql(db), on_close=lambda: postgres.release(db))


def audit_log(config: ServiceConfig | None, data_dir: Path, *, journal: bool = True, **kwargs: Any) -> AuditLog:
    """The audit log, its journal in `data_dir` (without `journal`: to read and prune only)."""
    settings = settings_of(config) if config is not None else StoreSettings().with_environment()
    if not settings.postgres:
        return AuditLog.in_data_dir(data_dir, **kwargs)
    from wasm_runner_server.metadata import postgres
    from wasm_runner_server.metadata.sql import PostgresSql

    db = postgres.acquire(settings)
    try:
        return AuditLog.in_data_dir(data_dir, shared=(PostgresSql(db), settings.node_name(data_dir),
                                                      lambda: postgres.release(db)), journal=journal, **kwargs)
    except BaseException:
        postgres.release(db)
        raise
