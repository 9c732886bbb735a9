"""OAuth apps, authorization codes, grants, tokens and consents, in SQLite (`oauth.sqlite3` in the data
directory) or the PostgreSQL database a cluster shares (migration step 4): the same statements on both.

Every secret (client secret, code, access and refresh token) is random and stored only as its SHA-256.
A *grant* is what one authorization made: the tokens it issued form its family, and revoking the grant
(a member's DELETE, a reused code or refresh token, the app's deletion) ends them all at once. A
*consent* is the scopes a member gave an app, kept so that a later request within them skips the page.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from wasm_runner_server.metadata.sql import Sql, open_sqlite
from wasm_runner_server.security.oauth.scopes import SCOPES
from wasm_runner_server.security.tenants import WORKSPACE_PATTERN

DB_NAME = "oauth.sqlite3"
CLIENT_PREFIX = "wrc_"
SECRET_PREFIX = "wrcs_"
ACCESS_PREFIX = "wro_"
"""An access token: told apart from an API key (`wr_<id>_<secret>`) by its prefix."""
REFRESH_PREFIX = "wrr_"

SCHEMA = """
CREATE TABLE IF NOT EXISTS oauth_clients (
    id TEXT PRIMARY KEY,
    workspace TEXT NOT NULL,
    name TEXT NOT NULL,
    redirect_uris TEXT NOT NULL,
    scopes TEXT NOT NULL,
    public INTEGER NOT NULL,
    secret_hash TEXT,
    created_at REAL NOT NULL,
    created_by TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS oauth_codes (
    code_hash TEXT PRIMARY KEY,
    client_id TEXT NOT NULL,
    workspace TEXT NOT NULL,
    member TEXT NOT NULL,
    key_id TEXT NOT NULL,
    redirect_uri TEXT,
    scope TEXT NOT NULL,
    code_challenge TEXT,
    code_challenge_method TEXT,
    expires_at REAL NOT NULL,
    used_at REAL,
    grant_id TEXT
);
CREATE TABLE IF NOT EXISTS oauth_grants (
    id TEXT PRIMARY KEY,
    client_id TEXT NOT NULL,
    workspace TEXT NOT NULL,
    member TEXT NOT NULL,
    key_id TEXT NOT NULL,
    scope TEXT NOT NULL,
    created_at REAL NOT NULL,
    revoked_at REAL
);
CREATE INDEX IF NOT EXISTS oauth_grants_by_member ON oauth_grants (workspace, member);
CREATE TABLE IF NOT EXISTS oauth_tokens (
    id TEXT PRIMARY KEY,
    grant_id TEXT NOT NULL,
    access_hash TEXT NOT NULL UNIQUE,
    refresh_hash TEXT UNIQUE,
    scope TEXT NOT NULL,
    issued_at REAL NOT NULL,
    access_expires_at REAL NOT NULL,
    refresh_expires_at REAL,
    access_revoked_at REAL,
    rotated_at REAL
);
CREATE INDEX IF NOT EXISTS oauth_tokens_by_grant ON oauth_tokens (grant_id);
CREATE TABLE IF NOT EXISTS oauth_consents (
    workspace TEXT NOT NULL,
    member TEXT NOT NULL,
    client_id TEXT NOT NULL,
    scope TEXT NOT NULL,
    granted_at REAL NOT NULL,
    PRIMARY KEY (workspace, member, client_id)
);
"""


def redirect_uri_problem(uri: str) -> str | None:
    """Why a redirect URI cannot be registered (None: it can). Authorization requests must name one of
    these exactly, so a code is only ever sent where the admin said."""
    try:
        parts = urlsplit(uri)
        host = parts.hostname
    except ValueError:
        return f"{uri!r} is not a URL"
    if "#" in uri:
        return f"{uri!r}: a redirect URI has no fragment"
    if len(uri) > 2048:
        return "a redirect URI is at most 2048 characters"
    if parts.scheme == "https" and host:
        return None
    if parts.scheme == "http" and host in ("127.0.0.1", "::1", "localhost"):
        return None  # RFC 8252 7.3: a native app's loopback redirect
    return f"{uri!r}: a redirect URI is https://HOST/..., or http:// on loopback (127.0.0.1, ::1, localhost)"


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class ClientRecord:
    id: str
    workspace: str
    name: str
    redirect_uris: tuple[str, ...]
    scopes: tuple[str, ...]
    public: bool
    secret_hash: str | None
    created_at: float
    created_by: str

    def secret_matches(self, secret: str) -> bool:
        if self.secret_hash is None:
            return False
        return hmac.compare_digest(digest(secret), self.secret_hash)


@dataclass(frozen=True)
class CodeRecord:
    client_id: str
    workspace: str
    member: str
    key_id: str
    redirect_uri: str | None
    scope: str
    code_challenge: str | None
    code_challenge_method: str | None
    expires_at: float
    code_hash: str


@dataclass(frozen=True)
class GrantRecord:
    id: str
    client_id: str
    workspace: str
    member: str
    key_id: str
    scope: str
    created_at: float
    revoked_at: float | None


@dataclass(frozen=True)
class TokenRecord:
    id: str
    grant: GrantRecord
    scope: str
    issued_at: float
    access_expires_at: float
    refresh_expires_at: float | None
    access_revoked_at: float | None
    rotated_at: float | None


_CLIENT_COLUMNS = "id, workspace, name, redirect_uris, scopes, public, secret_hash, created_at, created_by"
_GRANT_COLUMNS = "g.id, g.client_id, g.workspace, g.member, g.key_id, g.scope, g.created_at, g.revoked_at"
_TOKEN_COLUMNS = ("t.id, t.scope, t.issued_at, t.access_expires_at, t.refresh_expires_at, t.access_revoked_at, "
                  "t.rotated_at, " + _GRANT_COLUMNS)


def _client(row: tuple) -> ClientRecord:
    return ClientRecord(row[0], row[1], row[2], tuple(json.loads(row[3])), tuple(row[4].split()), bool(row[5]),
                        row[6], row[7], row[8])


def _token(row: tuple) -> TokenRecord:
    return TokenRecord(row[0], GrantRecord(*row[7:15]), row[1], row[2], row[3], row[4], row[5], row[6])


class OAuthStore:
    def __init__(self, path: str | Path | None = None, *, sql: Sql | None = None,
                 on_close: Callable[[], None] | None = None) -> None:
        """The store in the SQLite file at `path`, or on `sql` (the cluster's database, migrated)."""
        self._on_close = on_close
        if sql is None:
            if path is None:
                raise ValueError("an OAuth store needs a path or a database")
            sql, self._on_close = open_sqlite(Path(path), SCHEMA, "oauth")
        self._db = sql

    @classmethod
    def in_data_dir(cls, data_dir: Path) -> OAuthStore:
        return cls(Path(data_dir) / DB_NAME)

    def close(self) -> None:
        if self._on_close is not None:
            self._on_close()

    # -- clients (apps) ---------------------------------------------------------------------------

    def create_client(self, workspace: str, name: str, redirect_uris: list[str], scopes: list[str], public: bool,
                      created_by: str) -> tuple[str | None, ClientRecord]:
        """A new app: (its secret, shown once; None for a public app), and its record (ValueError: refused)."""
        if not re.match(WORKSPACE_PATTERN, workspace):
            raise ValueError("a workspace name is 1-64 letters, digits, '-' or '_'")
        if not name or len(name) > 128:
            raise ValueError("an app's name is 1-128 characters")
        redirect_uris, scopes = list(dict.fromkeys(redirect_uris)), list(dict.fromkeys(scopes))
        problems = [p for p in map(redirect_uri_problem, redirect_uris) if p]
        if not redirect_uris or problems:
            raise ValueError("; ".join(problems) or "an app needs at least one redirect URI")
        unknown = [s for s in scopes if s not in SCOPES]
        if not scopes or unknown:
            raise ValueError(f"unknown scopes {unknown}: the scopes are {', '.join(SCOPES)}" if unknown
                             else "an app needs at least one scope")
        client_id = CLIENT_PREFIX + secrets.token_hex(8)
        secret = None if public else SECRET_PREFIX + secrets.token_urlsafe(32)
        record = ClientRecord(client_id, workspace, name, tuple(redirect_uris), tuple(scopes), public,
                              digest(secret) if secret else None, time.time(), created_by)
        self._db.run(f"INSERT INTO oauth_clients ({_CLIENT_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?)",
                     (record.id, workspace, name, json.dumps(list(redirect_uris)), " ".join(scopes), int(public),
                      record.secret_hash, record.created_at, created_by))
        return secret, record

    def client(self, client_id: str) -> ClientRecord | None:
        row = self._db.one(f"SELECT {_CLIENT_COLUMNS} FROM oauth_clients WHERE id = ?", (client_id,))
        return _client(row) if row is not None else None

    def clients(self, workspace: str | None = None) -> list[ClientRecord]:
        sql, args = f"SELECT {_CLIENT_COLUMNS} FROM oauth_clients", []
        if workspace is not None:
            sql += " WHERE workspace = ?"
            args.append(workspace)
        return [_client(row) for row in self._db.rows(sql + " ORDER BY created_at, id", args)]

    def delete_client(self, client_id: str, workspace: str | None = None) -> ClientRecord | None:
        """Delete an app (within `workspace` if given): its grants, and so its tokens, end with it."""
        record = self.client(client_id)
        if record is None or (workspace is not None and record.workspace != workspace):
            return None
        self._db.run("UPDATE oauth_grants SET revoked_at = ? WHERE client_id = ? AND revoked_at IS NULL",
                     (time.time(), client_id))
        self._db.run("DELETE FROM oauth_consents WHERE client_id = ?", (client_id,))
        self._db.run("DELETE FROM oauth_codes WHERE client_id = ?", (client_id,))
        self._db.run("DELETE FROM oauth_clients WHERE id = ?", (client_id,))
        return record

    # -- authorization codes ----------------------------------------------------------------------

    def save_code(self, code: str, *, client_id: str, workspace: str, member: str, key_id: str,
                  redirect_uri: str | None, scope: str, code_challenge: str | None,
                  code_challenge_method: str | None, lifetime_s: float) -> None:
        self._db.run("INSERT INTO oauth_codes (code_hash, client_id, workspace, member, key_id, redirect_uri, scope, "
                     "code_challenge, code_challenge_method, expires_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
                     (digest(code), client_id, workspace, member, key_id, redirect_uri, scope, code_challenge,
                      code_challenge_method, time.time() + lifetime_s))

    def take_code(self, code: str, client_id: str) -> CodeRecord | None:
        """The code's record, used up by this call (a code is good once). A code used before has the grant
        it made revoked (RFC 6749 4.1.2: it may have leaked); an expired or unknown one is None."""
        code_hash = digest(code)
        row = self._db.one("SELECT client_id, workspace, member, key_id, redirect_uri, scope, code_challenge, "
                           "code_challenge_method, expires_at, code_hash, used_at, grant_id FROM oauth_codes "
                           "WHERE code_hash = ?", (code_hash,))
        if row is None or row[0] != client_id:
            return None
        now = time.time()
        if row[10] is not None or self._db.run("UPDATE oauth_codes SET used_at = ? WHERE code_hash = ? AND "
                                               "used_at IS NULL", (now, code_hash)) != 1:
            if row[11] is not None:
                self.revoke_grant(row[11])
            return None
        if row[8] <= now:
            return None
        return CodeRecord(*row[:10])

    def code_made(self, code_hash: str, grant_id: str) -> None:
        """Which grant the code made (what a second use of it revokes)."""
        self._db.run("UPDATE oauth_codes SET grant_id = ? WHERE code_hash = ?", (grant_id, code_hash))

    def prune(self, grace_s: float = 86400) -> int:
        """Forget codes and tokens expired more than `grace_s` ago; how many rows. A spent refresh token is
        kept until it would have expired anyway, so that a reuse is still recognised until then."""
        before = time.time() - grace_s
        return (self._db.run("DELETE FROM oauth_codes WHERE expires_at < ?", (before,))
                + self._db.run("DELETE FROM oauth_tokens WHERE COALESCE(refresh_expires_at, access_expires_at) < ?",
                               (before,)))

    # -- grants and tokens ------------------------------------------------------------------------

    def create_grant(self, client_id: str, workspace: str, member: str, key_id: str, scope: str) -> GrantRecord:
        grant = GrantRecord(secrets.token_hex(8), client_id, workspace, member, key_id, scope, time.time(), None)
        self._db.run("INSERT INTO oauth_grants (id, client_id, workspace, member, key_id, scope, created_at) "
                     "VALUES (?,?,?,?,?,?,?)", (grant.id, client_id, workspace, member, key_id, scope,
                                                grant.created_at))
        return grant

    def grant(self, grant_id: str) -> GrantRecord | None:
        row = self._db.one(f"SELECT {_GRANT_COLUMNS} FROM oauth_grants g WHERE g.id = ?", (grant_id,))
        return GrantRecord(*row) if row is not None else None

    def grants(self, workspace: str, member: str) -> list[GrantRecord]:
        """The member's live grants, oldest first."""
        return [GrantRecord(*row) for row in self._db.rows(
            f"SELECT {_GRANT_COLUMNS} FROM oauth_grants g WHERE g.workspace = ? AND g.member = ? "
            "AND g.revoked_at IS NULL ORDER BY g.created_at, g.id", (workspace, member))]

    def revoke_grant(self, grant_id: str) -> bool:
        """End the grant and every token of its family; whether it was live."""
        return self._db.run("UPDATE oauth_grants SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                            (time.time(), grant_id)) == 1

    def save_tokens(self, grant_id: str, access_token: str, refresh_token: str | None, scope: str,
                    access_s: float, refresh_s: float) -> str:
        token_id = secrets.token_hex(8)
        now = time.time()
        self._db.run("INSERT INTO oauth_tokens (id, grant_id, access_hash, refresh_hash, scope, issued_at, "
                     "access_expires_at, refresh_expires_at) VALUES (?,?,?,?,?,?,?,?)",
                     (token_id, grant_id, digest(access_token), digest(refresh_token) if refresh_token else None,
                      scope, now, now + access_s, now + refresh_s if refresh_token else None))
        return token_id

    def by_access(self, access_token: str) -> TokenRecord | None:
        row = self._db.one(f"SELECT {_TOKEN_COLUMNS} FROM oauth_tokens t JOIN oauth_grants g ON g.id = t.grant_id "
                           "WHERE t.access_hash = ?", (digest(access_token),))
        return _token(row) if row is not None else None

    def by_refresh(self, refresh_token: str) -> TokenRecord | None:
        row = self._db.one(f"SELECT {_TOKEN_COLUMNS} FROM oauth_tokens t JOIN oauth_grants g ON g.id = t.grant_id "
                           "WHERE t.refresh_hash = ?", (digest(refresh_token),))
        return _token(row) if row is not None else None

    def rotate(self, token_id: str) -> bool:
        """Mark the token's refresh token used (it never works again); False when another use was first."""
        return self._db.run("UPDATE oauth_tokens SET rotated_at = ?, access_revoked_at = COALESCE(access_revoked_at, ?) "
                            "WHERE id = ? AND rotated_at IS NULL", (time.time(), time.time(), token_id)) == 1

    def revoke_access(self, token_id: str) -> None:
        self._db.run("UPDATE oauth_tokens SET access_revoked_at = ? WHERE id = ? AND access_revoked_at IS NULL",
                     (time.time(), token_id))

    # -- consents ---------------------------------------------------------------------------------

    def consent(self, workspace: str, member: str, client_id: str) -> frozenset[str]:
        """The scopes the member gave this app (empty: none, or withdrawn)."""
        row = self._db.one("SELECT scope FROM oauth_consents WHERE workspace = ? AND member = ? AND client_id = ?",
                           (workspace, member, client_id))
        return frozenset(row[0].split()) if row is not None else frozenset()

    def record_consent(self, workspace: str, member: str, client_id: str, scopes: frozenset[str]) -> None:
        """Add `scopes` to what the member gave the app."""
        given = self.consent(workspace, member, client_id) | scopes
        self._db.upsert("oauth_consents", "workspace, member, client_id",
                        ("workspace", "member", "client_id", "scope", "granted_at"),
                        (workspace, member, client_id, " ".join(sorted(given)), time.time()))

    def forget_consent(self, workspace: str, member: str, client_id: str) -> None:
        self._db.run("DELETE FROM oauth_consents WHERE workspace = ? AND member = ? AND client_id = ?",
                     (workspace, member, client_id))
