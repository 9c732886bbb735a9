"""The session store `[store]` configures: SQLite in the data directory, or the shared PostgreSQL database."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from wasm_runner_server.metadata.settings import StoreSettings
from wasm_runner_server.sessions.store import SessionMetadata, SessionStore

if TYPE_CHECKING:
    from wasm_runner_server.cluster.nodes import NodeDirectory
    from wasm_runner_server.cluster.placement import Placement
    from wasm_runner_server.config import ServiceConfig
    from wasm_runner_server.sessions.manager import SessionManager, SessionPlacement
    from wasm_runner_server.sessions.template_catalog import SharedTemplates

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


def open_placement(config: ServiceConfig, manager: SessionManager) -> Placement | None:
    """Leases and object storage for the manager's sessions, when `[storage]` stores them beyond the node
    (leases with a PostgreSQL `[store]` only: on SQLite the node is alone, and its sessions never move)."""
    if not config.storage.objects:
        return None
    from wasm_runner_server.cluster.leases import Leases
    from wasm_runner_server.cluster.placement import Placement
    from wasm_runner_server.storage import open_storage

    settings = store_settings(config)
    leases = None
    if settings.postgres:
        leases = Leases(settings, settings.node_name(Path(config.server.data_dir)), config.storage.lease_s)
    storage = config.storage
    return Placement(manager, open_storage(storage), leases,
                     storage.checkpoint_s if storage.durability == "checkpoint" else None)


def open_templates(config: ServiceConfig, placement: SessionPlacement | None) -> SharedTemplates | None:
    """The cluster's templates, where its sessions move between nodes (a PostgreSQL `[store]` and sessions
    stored beyond the node): their rows in the database, their trees where the sessions are stored. None:
    each node keeps its workspaces' templates."""
    settings = store_settings(config)
    if not settings.postgres or placement is None:
        return None
    from wasm_runner_server.cluster.placement import Placement
    from wasm_runner_server.metadata import postgres
    from wasm_runner_server.sessions.template_catalog import SharedTemplates, TemplateCatalog

    data_dir = Path(config.server.data_dir)
    assert isinstance(placement, Placement)  # (what open_placement makes)
    templates = SharedTemplates(TemplateCatalog(postgres.acquire(settings)), placement.storage,
                                data_dir / "template-trees", settings.node_name(data_dir))
    templates.prune()
    return templates


def open_nodes(config: ServiceConfig) -> NodeDirectory | None:
    """The cluster's node directory, on a PostgreSQL `[store]` (on SQLite the node is alone)."""
    settings = store_settings(config)
    if not settings.postgres:
        return None
    from wasm_runner_server.cluster.nodes import NodeDirectory

    return NodeDirectory(settings, settings.node_name(Path(config.server.data_dir)))
