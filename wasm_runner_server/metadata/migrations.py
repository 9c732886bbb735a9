"""The PostgreSQL schema, as numbered steps applied in order and recorded in `schema_version`.

`migrate` runs at every start under a transaction-scoped advisory lock, so nodes that start together
apply each step once: the first takes the lock and applies what is missing, the others wait for it and
then find nothing to do. A step is never edited once released; a change is a new step at the end.
Timestamps are Unix seconds (double precision) and JSON fields text, as in the SQLite stores, so the
stores' code reads both alike.
"""

from __future__ import annotations

import psycopg

LOCK_KEY = 0x7761736D  # "wasm": the advisory lock every node's migration takes

STEPS: tuple[str, ...] = (
    # 1: sessions, tenants and keys, session owners, the audit log
    """
    CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        node TEXT NOT NULL,               -- the node holding its files and kernels
        profile TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        last_used_at DOUBLE PRECISION NOT NULL,
        idle_timeout_s DOUBLE PRECISION NOT NULL,
        ttl_s DOUBLE PRECISION NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL,
        metadata TEXT NOT NULL DEFAULT '{}',
        kernels TEXT NOT NULL DEFAULT '[]',
        executions BIGINT NOT NULL DEFAULT 0,
        egress TEXT,
        tools TEXT
    );
    CREATE INDEX sessions_by_creation ON sessions (created_at, id);
    CREATE INDEX sessions_by_node ON sessions (node);

    CREATE TABLE workspaces (
        name TEXT PRIMARY KEY,
        created_at DOUBLE PRECISION NOT NULL
    );
    CREATE TABLE keys (
        id TEXT PRIMARY KEY,
        workspace TEXT NOT NULL REFERENCES workspaces(name),
        name TEXT NOT NULL,
        kind TEXT NOT NULL,
        hash TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        last_used_at DOUBLE PRECISION,
        revoked_at DOUBLE PRECISION
    );
    CREATE TABLE session_owners (
        session_id TEXT PRIMARY KEY,
        workspace TEXT NOT NULL,
        key_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        ephemeral INTEGER NOT NULL DEFAULT 0,
        created_at DOUBLE PRECISION NOT NULL
    );
    CREATE INDEX owners_by_workspace ON session_owners (workspace);

    -- audit ids are handed out in blocks: a node records rows without asking the database for each id
    CREATE SEQUENCE audit_id_blocks START 1;
    CREATE TABLE audit (
        id BIGINT PRIMARY KEY,
        ts DOUBLE PRECISION NOT NULL,
        kind TEXT NOT NULL,
        workspace TEXT NOT NULL,
        key_id TEXT NOT NULL,
        session TEXT,
        ephemeral INTEGER NOT NULL DEFAULT 0,
        mode TEXT,
        profile TEXT,
        provider TEXT,
        language TEXT,
        code TEXT,
        code_sha256 TEXT,
        code_bytes BIGINT,
        stdout TEXT,
        stderr TEXT,
        stdout_bytes BIGINT,
        stderr_bytes BIGINT,
        exit_code BIGINT,
        outcome TEXT,
        limit_hit TEXT,
        duration_ms DOUBLE PRECISION,
        fuel BIGINT,
        peak_memory BIGINT,
        files_changed TEXT,
        path TEXT,
        status BIGINT,
        started_at DOUBLE PRECISION,
        finished_at DOUBLE PRECISION,
        network TEXT,
        node TEXT                         -- the node that recorded it
    );
    CREATE INDEX audit_by_workspace ON audit (workspace, id);
    CREATE INDEX audit_by_ts ON audit (ts);
    CREATE FUNCTION audit_append_only() RETURNS trigger LANGUAGE plpgsql AS
        $$ BEGIN RAISE EXCEPTION 'audit rows are append-only'; END $$;
    CREATE TRIGGER audit_append_only BEFORE UPDATE ON audit
        FOR EACH ROW EXECUTE FUNCTION audit_append_only();
    """,
    # 2: the API keys' request rate, one token bucket per key for the whole cluster
    """
    CREATE TABLE rate_buckets (
        key TEXT PRIMARY KEY,
        tokens DOUBLE PRECISION NOT NULL,
        at DOUBLE PRECISION NOT NULL,     -- Unix time of the last take
        granted BOOLEAN NOT NULL          -- whether the last take was allowed
    );
    """,
    # 3: sessions' leases (with object storage): which node serves a session, under which epoch, until when
    """
    CREATE TABLE leases (
        session_id TEXT PRIMARY KEY,
        node TEXT NOT NULL,
        epoch BIGINT NOT NULL,            -- raised by every claim: a write carrying an older one is refused
        generation BIGINT NOT NULL DEFAULT 0,  -- the session's last stored generation (0: none yet)
        expires_at DOUBLE PRECISION NOT NULL   -- Unix time, by the database's clock
    );
    CREATE INDEX leases_by_node ON leases (node);
    """,
)


def migrate(conn: psycopg.Connection) -> int:
    """Apply the steps this database lacks, under the advisory lock, in one transaction; how many."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, "
                     "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")
        row = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()
        current = row[0] if row is not None else 0
        if current > len(STEPS):
            raise RuntimeError(f"the metadata database was migrated by a newer version (schema {current}, "
                               f"this one knows {len(STEPS)})")
        for version in range(current + 1, len(STEPS) + 1):
            conn.execute(STEPS[version - 1])
            conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (version,))
        return len(STEPS) - current
