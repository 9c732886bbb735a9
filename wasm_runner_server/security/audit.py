"""The audit log: one append-only SQLite row per execution and per file change.

Rows are never updated (a trigger refuses it) and no API deletes them; only the
retention prune removes rows older than `auth.audit_retention_days`. A row is on disk
before the response it accounts for is sent, without the request waiting for SQLite:
`record_*` give the row its id and append it to the journal (`journal.Journal`, one
`os.write` on the caller's thread), which a kill of the process does not lose. A writer
thread commits the journaled rows to SQLite in batches, off every request's path; the
journal is rotated once it is large and dropped once its rows are all committed. Opening
the log replays the journal's rows that a killed process had not committed (their ids
tell which), then clears it. Reads commit the pending rows first, so they see every row
recorded. The WAL checkpoint runs on its own thread (`wal.Checkpointer`). Neither the
journal nor, with `synchronous="NORMAL"` (the default), the WAL is fsynced at each row: a
power loss may lose the last rows; with `"FULL"` a committed row survives it (see `wal`).
A process that opens the log while another owns its journal (the CLI beside a running
service) can read and prune it, not record rows (their ids would be the owner's to give).
Code and output are stored capped, with the code's SHA-256 and full sizes. For a
temporary (ephemeral) session only the fact of the run is kept: sizes, outcome, timings, never
code, output, paths or what a fork made; and its id is replaced by a pseudonym (`pseudonym`), keyed
by a secret this process holds in memory only, so rows of one session still go together while it
lives, and nothing in the log names it once the process is gone.

In a cluster the table is in the PostgreSQL database the nodes share (`in_postgres`): each node keeps
its own journal in its data directory and gives ids from blocks it takes from a sequence (one database
round trip per `ID_BLOCK` rows), so ids are unique across nodes, and increasing per node though not in
time order across nodes. The journal of a node that died is replayed into the table when that node
starts again, or by any other process that opens it (`replay_journal`, `wasm-runner audit replay`):
rows whose id is in the table already are skipped, so a row is there once.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec

from wasm_runner_server.journal import Journal
from wasm_runner_server.metadata.sql import ERRORS, Sql, SqliteSql
from wasm_runner_server.wal import Checkpointer, Synchronous, connect_wal

log = logging.getLogger("wasm_runner.server")

DB_NAME = "audit.sqlite3"
JOURNAL_SUFFIX = ".journal"
"""The journal is the database's path with this suffix instead of its own (audit.journal)."""
BATCH_S = 0.05
"""How long the writer lets rows gather before it commits them (nobody waits for the commit)."""
ROTATE_BYTES = 8 * 1024 * 1024
"""A journal past this is rotated; the rotated file is dropped once its rows are committed."""
RETRY_S = 0.1
"""Pause of the writer after a failed commit before it tries the same rows again."""
ID_BLOCK = 1000
"""Ids a node takes at once from the shared database's sequence."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts REAL NOT NULL,
    kind TEXT NOT NULL,               -- exec | file | artifact | packages | policy | process | tool | admin
    workspace TEXT NOT NULL,
    key_id TEXT NOT NULL,
    session TEXT,
    ephemeral INTEGER NOT NULL DEFAULT 0,
    mode TEXT,                        -- session | process | oneshot | batch (exec); put | upload | delete | edit (file);
                                      -- publish | delete | expire (artifact, its id in files_changed);
                                      -- start | network | exit (process: its id in path, its state in outcome)
    profile TEXT,
    provider TEXT,
    language TEXT,
    code TEXT,
    code_sha256 TEXT,
    code_bytes INTEGER,
    stdout TEXT,
    stderr TEXT,
    stdout_bytes INTEGER,
    stderr_bytes INTEGER,
    exit_code INTEGER,
    outcome TEXT,                     -- ok | error | limit | cancelled | aborted (exec); HTTP status (file)
    limit_hit TEXT,
    duration_ms REAL,
    fuel INTEGER,
    peak_memory INTEGER,
    files_changed TEXT,
    path TEXT,
    status INTEGER,
    started_at REAL,
    finished_at REAL,
    network TEXT                      -- exec, process: egress decisions (JSON list, secrets redacted)
);
CREATE INDEX IF NOT EXISTS audit_by_workspace ON audit (workspace, id);
CREATE INDEX IF NOT EXISTS audit_by_ts ON audit (ts);
CREATE TRIGGER IF NOT EXISTS audit_append_only BEFORE UPDATE ON audit
BEGIN SELECT RAISE(ABORT, 'audit rows are append-only'); END;
"""

COLUMNS = ("id", "ts", "kind", "workspace", "key_id", "session", "ephemeral", "mode", "profile", "provider",
           "language", "code", "code_sha256", "code_bytes", "stdout", "stderr", "stdout_bytes", "stderr_bytes",
           "exit_code", "outcome", "limit_hit", "duration_ms", "fuel", "peak_memory", "files_changed", "path",
           "status", "started_at", "finished_at", "network")
ADDED_COLUMNS = {"network": "TEXT"}
"""Columns a log made by an earlier version lacks: added when it is opened."""
NODE_COLUMN = "node"
"""In the shared database only: the node that recorded the row."""


def cap(text: str | None, limit: int) -> str | None:
    if text is None:
        return None
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", "ignore") + f"\n…[{len(data) - limit} more bytes]"


def network_column(events: list, ephemeral: bool, redact: Callable[[str], str] | None) -> str | None:
    """Egress decisions as stored: a JSON list with the known secrets removed, or only how many were
    allowed and denied for an ephemeral session; None when there were none."""
    if not events:
        return None
    if ephemeral:
        allowed = sum(1 for event in events if event.allowed)
        return json.dumps({"allowed": allowed, "denied": len(events) - allowed})
    text = msgspec.json.encode(events).decode()
    return redact(text) if redact is not None else text


@dataclass(frozen=True)
class AuditFilter:
    workspace: str | None = None
    session: str | None = None
    key_id: str | None = None
    kind: str | None = None
    outcome: str | None = None
    since: float | None = None
    until: float | None = None
    key_ids: tuple[str, ...] | None = None
    """Rows of any of these keys only (a member's own calls, through all their keys)."""


def _own_journal(path: Path, wait_s: float) -> Journal | None:
    """The journal at `path`, locked for this process; None while another process owns it after `wait_s`
    (another node may be replaying it, in a shared journal directory, as this node starts again)."""
    deadline = time.monotonic() + wait_s
    while (journal := Journal.open(path)) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return journal


class AuditLog:
    def __init__(self, path: str | Path, *, code_bytes: int = 64 * 1024, output_bytes: int = 16 * 1024,
                 synchronous: Synchronous = "NORMAL", shared: tuple[Sql, str, Callable[[], None]] | None = None,
                 journal: bool = True, journal_wait_s: float = 0.0) -> None:
        """The log in the SQLite file at `path` (its journal beside it), or with `shared` = (the
        database, this node's name, what lets the database go) in a database shared by a cluster's
        nodes, its journal still at `path`'s. Without `journal` the log only reads and prunes; a service
        waits up to `journal_wait_s` for its journal's lock (another node may be replaying it)."""
        self.path = Path(path)
        self.code_bytes = code_bytes
        self.output_bytes = output_bytes
        self._sqlite = shared is None
        if shared is None:
            db = connect_wal(self.path, synchronous)
            db.executescript(_SCHEMA)
            present = {row[1] for row in db.execute("PRAGMA table_info(audit)")}
            for name, kind in ADDED_COLUMNS.items():
                if name not in present:
                    db.execute(f"ALTER TABLE audit ADD COLUMN {name} {kind}")
            self._db: Sql = SqliteSql(db)
            self._release: Callable[[], None] = db.close
            self._columns: tuple[str, ...] = COLUMNS
            self._node: str | None = None
        else:
            self._db, self._node, self._release = shared
            self._columns = (*COLUMNS, NODE_COLUMN)
        self._db_lock = threading.Lock()
        """Serialises the connection's use (commits on the writer, reads on the caller's thread); rows are
        taken from the queue only while it is held, so batches commit in the order they were taken."""
        self._queue = threading.Condition()
        """Guards the queued rows, the next id, the journal's appends and rotation, the writer's start and stop."""
        self._pending: list[dict] = []
        self._closed = False
        self._pseudonym_key = secrets.token_bytes(32)
        self._journal = _own_journal(self.path.with_suffix(JOURNAL_SUFFIX), journal_wait_s) if journal else None
        """None while another process owns it: this one does not record rows."""
        if self._journal is not None:
            self._replay(self._journal)
        self._ids: Iterator[int] = iter(())
        if self._sqlite:
            first = self._db.one("SELECT MAX(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'audit'), 0),"
                                 " COALESCE((SELECT MAX(id) FROM audit), 0))")
            self._ids = itertools.count((first[0] if first else 0) + 1)
        self._writer: threading.Thread | None = None
        self._checkpointer: Checkpointer | None = None
        """Both started by the first row: a log opened only to read (the CLI) runs no thread."""

    @property
    def records(self) -> bool:
        """Whether this log records rows (False: opened to read, or another process owns its journal)."""
        return self._journal is not None

    @classmethod
    def in_data_dir(cls, data_dir: Path, **kwargs) -> AuditLog:
        return cls(Path(data_dir) / DB_NAME, **kwargs)

    def _replay(self, journal: Journal) -> int:
        """Commit the journaled rows a killed process had not committed, then clear the journal; how
        many rows were not in the table yet. A journaled row whose id is there was committed before."""
        values = [[row.get(n) for n in self._columns] for row in journal.records()]
        replayed = 0
        if values:
            replayed = self._db.insert_many("audit", self._columns, values, ignore_existing=True)
            log.info("audit rows replayed from the journal", extra={"event": "audit_replayed", "rows": replayed})
        journal.clear()
        return replayed

    def replay_others(self) -> int:
        """Replay the journals beside this log's own whose node died (their lock free): with
        `store.journal_dir`, the cluster's journals share a directory. How many rows were added."""
        if self._journal is None:
            return 0
        own = self._journal.path
        added = 0
        for path in sorted(own.parent.glob(f"*{JOURNAL_SUFFIX}")):
            if path != own:
                added += self.replay_journal(path) or 0
        return added

    def replay_journal(self, path: Path) -> int | None:
        """Replay the journal at `path` (another node's, left by a process that died) into this log;
        how many rows were added, or None while a live process owns that journal."""
        journal = Journal.open(path)
        if journal is None:
            return None
        try:
            return self._replay(journal)
        finally:
            journal.close()

    def _take_id(self) -> int:
        """The next row's id (called under `_queue`): the next of the current block, else of a new one."""
        taken = next(self._ids, None)
        if taken is None:
            row = self._db.one("SELECT nextval('audit_id_blocks')")
            if row is None:
                raise RuntimeError("the audit id sequence returned nothing")
            self._ids = iter(range(row[0] * ID_BLOCK, (row[0] + 1) * ID_BLOCK))
            taken = next(self._ids)
        return taken

    def close(self) -> None:
        """Stop the threads, commit what is still queued, close the database and the journal."""
        with self._queue:
            self._closed = True
            self._queue.notify()
        if self._writer is not None:
            self._writer.join()
        if self._checkpointer is not None:
            self._checkpointer.close()
        try:
            self.flush()
            if self._journal is not None:
                self._journal.clear()  # every row is committed
        finally:
            with self._db_lock:
                self._release()
            if self._journal is not None:
                self._journal.close()

    # -- writing ------------------------------------------------------------------------------

    def pseudonym(self, session: str) -> str:
        """What a temporary session is called in the log (the same for its rows while this process runs)."""
        return "tmp-" + hmac.new(self._pseudonym_key, session.encode(), hashlib.sha256).hexdigest()[:24]

    def _insert(self, row: dict) -> int:
        """The row journaled (on disk once this returns) and queued for the writer; its id."""
        if row.get("ephemeral") and row.get("session"):
            row["session"] = self.pseudonym(row["session"])
        with self._queue:
            if self._closed:
                raise RuntimeError("the audit log is closed")
            if self._journal is None:
                raise RuntimeError(f"another process (a running service) owns the audit journal of {self.path}")
            row["id"] = self._take_id()
            if self._node is not None:
                row[NODE_COLUMN] = self._node
            self._journal.append(row)  # raises if it is not written: the row is not acknowledged
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_forever, name="wasm-runner-audit-writer",
                                                daemon=True)
                self._writer.start()
                if self._sqlite:
                    self._checkpointer = Checkpointer(self.path, "wasm-runner-audit-checkpoint")
            if not self._pending:
                self._queue.notify()  # the writer waits for a first row, then lets a batch gather
            self._pending.append(row)
            return row["id"]

    def _write_forever(self) -> None:
        while True:
            with self._queue:
                while not self._pending and not self._closed:
                    self._queue.wait()
                if not self._closed:
                    self._queue.wait(BATCH_S)  # only `close` wakes it early
                if self._closed:
                    return  # `close` commits what is left
            try:
                self.flush()
            except ERRORS:
                log.exception("audit write failed; retrying", extra={"event": "audit_failed"})
                time.sleep(RETRY_S)

    def flush(self) -> None:
        """Commit the queued rows now, in one transaction (from any thread); once it returns, every row
        recorded before the call is in the table. A failed commit raises, and keeps the rows queued (and
        journaled) for the next attempt."""
        with self._db_lock:
            with self._queue:
                if not self._pending:
                    return
                rows, self._pending = self._pending, []
                journal = self._journal
                if journal is not None and journal.size > ROTATE_BYTES:
                    journal.rotate()  # every row of the rotated file is committed or among `rows`
            values = [[row.get(n) for n in self._columns] for row in rows]
            try:
                self._db.insert_many("audit", self._columns, values)  # one transaction
            except ERRORS:
                with self._queue:
                    self._pending[:0] = rows
                raise
            if journal is not None:
                journal.drop_rotated()  # any rotated file's rows were queued before this commit took them

    def record_execution(self, *, workspace: str, key_id: str, session: str | None, ephemeral: bool, mode: str,
                         profile: str | None, provider: str | None, language: str | None, code: str | None,
                         command: list[str] | None, result, outcome: str, finished_at: float,
                         redact: Callable[[str], str] | None = None) -> int:
        """Record the row of an execution (on disk once this returns); its id. Its network decisions are
        kept with the secrets `redact` knows removed (an ephemeral run's as counts only), and so are its
        code, stdout and stderr."""
        source = code if command is None else json.dumps(command)
        source = source or ""
        stdout = getattr(result, "stdout", "") or ""
        stderr = getattr(result, "stderr", "") or ""
        if redact is not None:
            source, stdout, stderr = redact(source), redact(stdout), redact(stderr)
        duration_ms = float(getattr(result, "duration_ms", 0.0) or 0.0)
        files = getattr(result, "files", None)
        changed = None
        if files is not None:
            changed = {"created": list(files.created), "modified": list(files.modified), "deleted": list(files.deleted)}
        row = {
            "ts": finished_at, "kind": "exec", "workspace": workspace, "key_id": key_id, "session": session,
            "ephemeral": int(ephemeral), "mode": mode, "profile": profile, "provider": provider,
            "language": language, "code_bytes": len(source.encode("utf-8")),
            "stdout_bytes": len(stdout.encode("utf-8")), "stderr_bytes": len(stderr.encode("utf-8")),
            "exit_code": getattr(result, "exit_code", None), "outcome": outcome,
            "limit_hit": getattr(result, "limit", None), "duration_ms": duration_ms,
            "fuel": getattr(result, "fuel_used", None), "peak_memory": getattr(result, "memory_peak_bytes", None),
            "started_at": finished_at - duration_ms / 1000, "finished_at": finished_at,
        }
        row["network"] = network_column(list(getattr(result, "network", None) or ()), ephemeral, redact)
        if not ephemeral:  # an ephemeral run leaves sizes and outcome only
            row.update(code=cap(source, self.code_bytes), code_sha256=hashlib.sha256(source.encode()).hexdigest(),
                       stdout=cap(stdout, self.output_bytes), stderr=cap(stderr, self.output_bytes),
                       files_changed=json.dumps(changed) if changed is not None else None)
        elif changed is not None:
            row["files_changed"] = json.dumps({k: len(v) for k, v in changed.items()})
        return self._insert(row)

    def record_file_change(self, *, workspace: str, key_id: str, session: str | None, ephemeral: bool, mode: str,
                           path: str | None, status: int) -> int:
        """Record the row of a file change (on disk once this returns); its id."""
        now = time.time()
        return self._insert({"ts": now, "kind": "file", "workspace": workspace, "key_id": key_id,
                      "session": session, "ephemeral": int(ephemeral), "mode": mode,
                      "path": None if ephemeral else path, "status": status,
                      "outcome": "ok" if status < 400 else "error", "started_at": now, "finished_at": now})

    def record_session_event(self, *, workspace: str, key_id: str, session: str | None, ephemeral: bool,
                             mode: str, detail: dict, ok: bool = True, error: str | None = None) -> int:
        """Record a session's fork or a template's publication, start or removal (on disk once this
        returns); what it made as `files_changed` (JSON), a refusal as `stderr`."""
        now = time.time()
        return self._insert({"ts": now, "kind": "session", "workspace": workspace, "key_id": key_id,
                             "session": session, "ephemeral": int(ephemeral), "mode": mode,
                             "files_changed": None if ephemeral else json.dumps(detail), "stderr": error,
                             "outcome": "ok" if ok else "error", "started_at": now, "finished_at": now})

    def record_artifact(self, *, workspace: str, key_id: str, session: str | None, ephemeral: bool, mode: str,
                        artifact_id: str, path: str | None, status: int) -> int:
        """Record the row of an artifact published, deleted or expired (on disk once this returns); its id."""
        now = time.time()
        return self._insert({"ts": now, "kind": "artifact", "workspace": workspace, "key_id": key_id,
                             "session": session, "ephemeral": int(ephemeral), "mode": mode,
                             "path": None if ephemeral else path, "status": status,
                             "files_changed": json.dumps({"artifact": artifact_id}),
                             "outcome": "ok" if status < 400 else "error", "started_at": now, "finished_at": now})

    def record_process(self, *, workspace: str, key_id: str, session: str, ephemeral: bool, event: str,
                       process_id: str, command: list[str], code: str, language: str, state: str,
                       exit_code: int | None, started_at: float, finished_at: float | None,
                       stdout_bytes: int, stderr_bytes: int, error: str | None,
                       network: Sequence[object] = (), redact: Callable[[str], str] | None = None) -> int:
        """Record a background process's start, end or batch of egress decisions ("network", while it
        runs) on disk once this returns; its id. `network` is the decisions since its last row, kept as
        an execution's are (its code and error too)."""
        source = code or json.dumps(command)
        if redact is not None:
            source, error = redact(source), redact(error) if error else error
        now = finished_at if finished_at is not None else (time.time() if event == "network" else started_at)
        row = {
            "ts": now, "kind": "process", "workspace": workspace, "key_id": key_id, "session": session,
            "ephemeral": int(ephemeral), "mode": event, "provider": "native", "language": language,
            "code_bytes": len(source.encode("utf-8")), "exit_code": exit_code, "outcome": state, "path": process_id,
            "stdout_bytes": stdout_bytes, "stderr_bytes": stderr_bytes, "limit_hit": None,
            "duration_ms": round((finished_at - started_at) * 1000, 3) if finished_at is not None else None,
            "started_at": started_at, "finished_at": finished_at,
            "network": network_column(list(network), ephemeral, redact),
        }
        if not ephemeral:
            row.update(code=cap(source, self.code_bytes), code_sha256=hashlib.sha256(source.encode()).hexdigest(),
                       stderr=cap(error, self.output_bytes) if error else None)
        return self._insert(row)

    def record_packages(self, *, workspace: str, key_id: str, session: str, ephemeral: bool, requested: str,
                        installed: str, lock: str, ok: bool, error: str | None, duration_ms: float) -> int:
        """Record the row of a package install (on disk once this returns): the request as `code`, what was
        installed as `stdout`, the session's lock after it as `files_changed`, a refusal as `stderr`."""
        now = time.time()
        row = {"ts": now, "kind": "packages", "workspace": workspace, "key_id": key_id, "session": session,
               "ephemeral": int(ephemeral), "mode": "install", "outcome": "ok" if ok else "error",
               "code_bytes": len(requested), "duration_ms": duration_ms,
               "started_at": now - duration_ms / 1000, "finished_at": now}
        if not ephemeral:
            row.update(code=cap(requested, self.code_bytes), code_sha256=hashlib.sha256(requested.encode()).hexdigest(),
                       stdout=cap(installed, self.output_bytes), stderr=error, files_changed=lock)
        return self._insert(row)

    def record_tool_call(self, *, workspace: str, key_id: str, session: str, ephemeral: bool, tool: str,
                         arguments_sha256: str, outcome: str, duration_ms: float, error: str | None,
                         approval: str | None = None) -> int:
        """Queue the row of a guest's tool call (code mode): the tool as `path`, the digest of its arguments
        as `code_sha256` (their values are not kept), its outcome, its time, the message of a refusal or
        failure as `stderr`; `mode` is `call`, or for a tool that needs approval `approval_<decision>`
        (granted, refused, timeout)."""
        now = time.time()
        mode = f"approval_{approval}" if approval else "call"
        row = {"ts": now, "kind": "tool", "workspace": workspace, "key_id": key_id, "session": session,
               "ephemeral": int(ephemeral), "mode": mode, "path": tool, "code_sha256": arguments_sha256 or None,
               "outcome": outcome, "duration_ms": duration_ms, "started_at": now - duration_ms / 1000,
               "finished_at": now}
        if not ephemeral and error:
            row["stderr"] = cap(error, self.output_bytes)
        return self._insert(row)

    def record_policy(self, *, workspace: str, key_id: str, session: str, ephemeral: bool, profile: str | None,
                      previous: str, requested: str, ok: bool, error: str | None) -> int:
        """Record the row of a session's network policy change (on disk once this returns): the policy
        before and the one asked for (JSON texts) as `code`, `{"from": ..., "to": ...}`, a refusal as `stderr`."""
        now = time.time()
        change = f'{{"from": {previous}, "to": {requested}}}'
        return self._insert({"ts": now, "kind": "policy", "workspace": workspace, "key_id": key_id,
                             "session": session, "ephemeral": int(ephemeral), "mode": "network", "profile": profile,
                             "code": cap(change, self.code_bytes), "code_bytes": len(change),
                             "outcome": "ok" if ok else "refused", "stderr": error, "status": 200 if ok else 403,
                             "started_at": now, "finished_at": now})

    def record_admin(self, *, workspace: str, key_id: str, action: str, target: str, change: dict) -> int:
        """Record the row of a change to the workspace's members, roles or keys (on disk once this returns):
        the action as `mode` (member_role, role_create, key_create, ...), what it changed as `path` (a member,
        a role, a key prefix), and `change` ({"by", "from", "to"}) as JSON in `code`."""
        now = time.time()
        text = json.dumps(change, sort_keys=True)
        return self._insert({"ts": now, "kind": "admin", "workspace": workspace, "key_id": key_id, "ephemeral": 0,
                             "mode": action,
                             "path": target, "code": cap(text, self.code_bytes), "code_bytes": len(text),
                             "outcome": "ok", "started_at": now, "finished_at": now})

    # -- reading ------------------------------------------------------------------------------

    def query(self, filters: AuditFilter, *, after_id: int | None = None, limit: int = 100) -> list[dict]:
        self.flush()
        where, args = [], []
        for name in ("workspace", "key_id", "kind", "outcome"):
            value = getattr(filters, name)
            if value is not None:
                where.append(f"{name} = ?")
                args.append(value)
        if filters.key_ids is not None:
            where.append(f"key_id IN ({', '.join('?' * len(filters.key_ids))})" if filters.key_ids else "1 = 0")
            args.extend(filters.key_ids)
        if filters.session is not None:  # a temporary session's rows, while this process runs, by its id too
            where.append("session IN (?, ?)")
            args += [filters.session, self.pseudonym(filters.session)]
        if filters.since is not None:
            where.append("ts >= ?")
            args.append(filters.since)
        if filters.until is not None:
            where.append("ts < ?")
            args.append(filters.until)
        if after_id is not None:
            where.append("id > ?")
            args.append(after_id)
        sql = f"SELECT {', '.join(COLUMNS)} FROM audit"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY id LIMIT ?"
        args.append(limit)
        with self._db_lock:
            return [dict(zip(COLUMNS, row, strict=True)) for row in self._db.rows(sql, args)]

    def get(self, entry_id: int) -> dict | None:
        self.flush()
        with self._db_lock:
            row = self._db.one(f"SELECT {', '.join(COLUMNS)} FROM audit WHERE id = ?", (entry_id,))
        return dict(zip(COLUMNS, row, strict=True)) if row else None

    def iterate(self, filters: AuditFilter = AuditFilter(), batch: int = 1000) -> Iterator[dict]:
        after = None
        while True:
            rows = self.query(filters, after_id=after, limit=batch)
            yield from rows
            if len(rows) < batch:
                return
            after = rows[-1]["id"]

    def count(self) -> int:
        self.flush()
        with self._db_lock:
            row = self._db.one("SELECT COUNT(*) FROM audit")
            return row[0] if row else 0

    def prune(self, retention_days: float | None, now: float | None = None) -> int:
        """Remove rows older than the retention period; the only way rows ever leave."""
        if retention_days is None:
            return 0
        cutoff = (now or time.time()) - retention_days * 86400
        self.flush()
        with self._db_lock:
            return self._db.run("DELETE FROM audit WHERE ts < ?", (cutoff,))
