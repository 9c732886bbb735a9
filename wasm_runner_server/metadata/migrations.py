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
    # 3: the person a member or admin key acts for
    """
    ALTER TABLE keys ADD COLUMN member TEXT;
    """,
    # 4: OAuth apps, authorization codes, grants (a token family each), tokens and members' consents
    """
    CREATE TABLE oauth_clients (
        id TEXT PRIMARY KEY,
        workspace TEXT NOT NULL,
        name TEXT NOT NULL,
        redirect_uris TEXT NOT NULL,      -- a JSON list
        scopes TEXT NOT NULL,             -- space-separated
        public INTEGER NOT NULL,
        secret_hash TEXT,
        created_at DOUBLE PRECISION NOT NULL,
        created_by TEXT NOT NULL
    );
    CREATE TABLE oauth_codes (
        code_hash TEXT PRIMARY KEY,
        client_id TEXT NOT NULL,
        workspace TEXT NOT NULL,
        member TEXT NOT NULL,
        key_id TEXT NOT NULL,
        redirect_uri TEXT,
        scope TEXT NOT NULL,
        code_challenge TEXT,
        code_challenge_method TEXT,
        expires_at DOUBLE PRECISION NOT NULL,
        used_at DOUBLE PRECISION,
        grant_id TEXT
    );
    CREATE TABLE oauth_grants (
        id TEXT PRIMARY KEY,
        client_id TEXT NOT NULL,
        workspace TEXT NOT NULL,
        member TEXT NOT NULL,
        key_id TEXT NOT NULL,
        scope TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        revoked_at DOUBLE PRECISION
    );
    CREATE INDEX oauth_grants_by_member ON oauth_grants (workspace, member);
    CREATE TABLE oauth_tokens (
        id TEXT PRIMARY KEY,
        grant_id TEXT NOT NULL,
        access_hash TEXT NOT NULL UNIQUE,
        refresh_hash TEXT UNIQUE,
        scope TEXT NOT NULL,
        issued_at DOUBLE PRECISION NOT NULL,
        access_expires_at DOUBLE PRECISION NOT NULL,
        refresh_expires_at DOUBLE PRECISION,
        access_revoked_at DOUBLE PRECISION,
        rotated_at DOUBLE PRECISION
    );
    CREATE INDEX oauth_tokens_by_grant ON oauth_tokens (grant_id);
    CREATE TABLE oauth_consents (
        workspace TEXT NOT NULL,
        member TEXT NOT NULL,
        client_id TEXT NOT NULL,
        scope TEXT NOT NULL,
        granted_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (workspace, member, client_id)
    );
    """,
    # 5: members' roles and each workspace's custom roles (a member without a row holds the role `member`)
    """
    CREATE TABLE members (
        workspace TEXT NOT NULL REFERENCES workspaces(name),
        member TEXT NOT NULL,
        role TEXT NOT NULL,               -- owner | admin | member | a custom role of the workspace
        created_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (workspace, member)
    );
    CREATE TABLE roles (
        workspace TEXT NOT NULL REFERENCES workspaces(name),
        name TEXT NOT NULL,
        permissions TEXT NOT NULL,        -- JSON list of permission names
        description TEXT NOT NULL DEFAULT '',
        created_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (workspace, name)
    );
    """,
    # 6: where a session's /workspace is under a disk layout (a member's disk, an end user's root)
    """
    ALTER TABLE session_owners ADD COLUMN disk TEXT;
    ALTER TABLE session_owners ADD COLUMN workdir TEXT;
    """,
    # 7: usage metering, one running sum per (workspace, payer, UTC day, unit), and workspace budgets
    """
    CREATE TABLE usage (
        workspace TEXT NOT NULL,
        payer_kind TEXT NOT NULL,         -- key | workspace | member (an OAuth token's authorizing member)
        payer_id TEXT NOT NULL,
        key_kind TEXT NOT NULL,           -- the paying key's kind; "" otherwise
        day TEXT NOT NULL,                -- YYYY-MM-DD, UTC
        unit TEXT NOT NULL,
        amount DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (workspace, payer_kind, payer_id, key_kind, day, unit)
    );
    CREATE INDEX usage_by_day ON usage (workspace, unit, day);
    CREATE TABLE usage_budgets (
        workspace TEXT NOT NULL,
        unit TEXT NOT NULL,
        amount DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (workspace, unit)
    );
    """,
    # 8: sessions' leases (with object storage): which node serves a session, under which epoch, until when
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
    # 9: where each node is reached by the others (a request for a session another node holds is forwarded there)
    """
    CREATE TABLE nodes (
        node TEXT PRIMARY KEY,
        url TEXT NOT NULL,                -- http://host:port, as the other nodes reach it
        seen_at DOUBLE PRECISION NOT NULL -- Unix time of its last start, by the database's clock
    );
    """,
    # 10: what a link or a browser needs on every node: the secrets (made once, by the first node that needs
    # one), the preview grants (a preview address given out by one node opens on any), the console's sign-ins
    """
    CREATE TABLE service_secrets (
        name TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    CREATE TABLE preview_grants (
        label TEXT PRIMARY KEY,           -- {port}-{128 random bits}: the preview's host label
        workspace TEXT NOT NULL,
        session_id TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,  -- the session's incarnation
        port INTEGER NOT NULL,
        key_id TEXT NOT NULL,
        expires DOUBLE PRECISION NOT NULL
    );
    CREATE INDEX preview_grants_by_expiry ON preview_grants (expires);
    CREATE TABLE console_sessions (
        id_digest TEXT PRIMARY KEY,       -- SHA-256 of the cookie's value (the value itself is never kept)
        key_id TEXT NOT NULL,
        principal TEXT NOT NULL,          -- JSON
        csrf_token TEXT NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL
    );
    CREATE INDEX console_sessions_by_key ON console_sessions (key_id, expires_at);
    ALTER TABLE leases ADD COLUMN stored_bytes BIGINT NOT NULL DEFAULT 0;  -- the last generation's (quotas)
    CREATE TABLE running_executions (   -- one row per execution running now (auth.quotas.concurrent_executions)
        token TEXT PRIMARY KEY,
        workspace TEXT NOT NULL,
        node TEXT NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL  -- renewed by its node while it runs
    );
    CREATE INDEX running_executions_by_workspace ON running_executions (workspace);
    CREATE TABLE console_links (
        digest TEXT PRIMARY KEY,          -- SHA-256 of the one-time sign-in token
        key_id TEXT NOT NULL,
        principal TEXT NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL
    );
    """,
    # 11: the catalogs any node serves: artifacts (their bytes in the object store) and templates
    """
    CREATE TABLE artifacts (
        id TEXT PRIMARY KEY,
        workspace TEXT NOT NULL,
        session TEXT,
        source_path TEXT,
        key_id TEXT NOT NULL,
        name TEXT NOT NULL,
        media_type TEXT NOT NULL,
        size BIGINT NOT NULL,
        sha256 TEXT NOT NULL,
        note TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        expires_at DOUBLE PRECISION
    );
    CREATE INDEX artifacts_by_workspace ON artifacts (workspace, created_at, id);
    CREATE INDEX artifacts_by_expiry ON artifacts (expires_at);
    CREATE INDEX artifacts_by_sha ON artifacts (sha256);
    CREATE TABLE templates (
        workspace TEXT NOT NULL,
        name TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        bytes BIGINT NOT NULL,
        kernels TEXT NOT NULL,            -- JSON: the languages whose kernel images it holds
        fresh_kernels TEXT NOT NULL,      -- JSON: language -> why its kernel starts fresh
        stored_as TEXT NOT NULL,          -- the tree in the object store (written once per publish)
        PRIMARY KEY (workspace, name)
    );
    CREATE INDEX templates_by_tree ON templates (stored_as);
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
