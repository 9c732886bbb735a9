"""Where the service's metadata lives: SQLite files in the data directory (the embedded default), or one
PostgreSQL database that several nodes share (see docs/decisions/0010-metadata-store.md).

Each store keeps its own interface and has a backend per database: `sessions.store` (SQLite) and
`sessions.store_pg`, `security.tenants` and `security.tenants_pg`, `security.audit` over an `AuditTable`
(`security.audit_table` and `security.audit_pg`). `sessions.open_store` and `security.stores` pick them from `[store]`.
"""
