"""The session store `[store]` configures: SQLite in the data directory, or the shared PostgreSQL database."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from wasm_runner_server.metadata.settings import StoreSettings
from wasm_runner_server.sessions.store import SessionMetadata, SessionStore

if TYPE_CHECKING:
    from wasm_runner_server.config import ServiceConfig

SESSIONS_DB = "server.sqlite3"


def store_settings(config: ServiceConfig | None) -> StoreSettings:
    """The configured store, `WASM_RUNNER_STORE_URL` applied (`config` None: the defaults)."""
    return (config.store if config is not None else StoreSettings()).with_environment()


def session_store(config: ServiceConfig) -> SessionMetadata:
    settings = store_settings(config)
    data_dir = Path(config.server.data_dir)
    if not settings.postgres:
        return SessionStore(data_dir / SESSIONS_DB)
    from wasm_runner_server.sessions.store_pg import PostgresSessionStore

    return PostgresSessionStore(settings, settings.node_name(data_dir))
