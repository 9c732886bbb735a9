"""Who the callers are, chosen once from `auth.enabled`: API keys of many workspaces, or one local caller."""

from __future__ import annotations

import hashlib
import time
from abc import ABC, abstractmethod

import msgspec
from aiohttp import web

from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_protocol.wire import SessionCreate
from wasm_runner_server.errors import ApiError, overloaded
from wasm_runner_server.http.policy import LOCAL, LOCAL_WORKSPACE, NO_KEY_HINT, PRINCIPAL, Principal, principal_of
from wasm_runner_server.security.oauth.store import ACCESS_PREFIX, OAuthStore
from wasm_runner_server.security.presign import key_revoked
from wasm_runner_server.security.ratelimit import Limiter, retry_after
from wasm_runner_server.security.tenants import Owner, TenantStore

OAUTH_KEY_PREFIX = "oauth:"
"""The key id of an OAuth token's principal is `oauth:<grant id>` (what its audit rows name)."""
BAD_TOKEN_HINT = ("an access token lasts an hour by default: get a new one with the refresh token "
                  "(POST /oauth/token, grant_type=refresh_token), or have the member authorize the app again")
BAD_KEY_HINT = ("check the key; a lost key cannot be recovered (only its hash is stored): revoke it with "
                "`wasm-runner keys revoke <prefix>` and create another")


class Authenticator(ABC):
    unknown: Principal
    """Whom an execution with no principal in its context is recorded for."""
    unowned_workspace: str | None
    """The workspace of a session no one claimed (None: such a session is no one's, and not found)."""

    @abstractmethod
    def authenticate(self, request: web.Request) -> Principal: ...

    @abstractmethod
    def principal_of(self, request: web.Request) -> Principal:
        """The caller of a request the middleware has seen (a 401 where a key was needed and is not there)."""

    @abstractmethod
    def verify_key(self, key: str) -> Principal:
        """The caller holding `key` (a 401 when it is not a valid key): the console's sign-in."""

    def key_active(self, key_id: str) -> bool:
        """Whether the key `key_id` still acts (a console session dies with its key)."""
        return True

    def take_rate(self, key_id: str) -> None:
        """One request of this key's rate limit; a 429 past it."""
        return None

    def admit_link(self, key_id: str) -> None:
        """A presigned link made by `key_id` is used (refused once that key is revoked)."""
        return None

    def owns(self, principal: Principal, owner: Owner | None) -> bool:
        return True

    def scope_session_id(self, principal: Principal, body: SessionCreate) -> SessionCreate:
        return body

    def visible_sessions(self, principal: Principal, tenants: TenantStore) -> set[str] | None:
        """The session ids the caller may list (None: all of them)."""
        return None


class LocalOnly(Authenticator):
    """auth.enabled = false: every caller is the local admin, in the one workspace there is."""

    unknown = LOCAL
    unowned_workspace = LOCAL_WORKSPACE

    def authenticate(self, request: web.Request) -> Principal:
        return LOCAL

    def principal_of(self, request: web.Request) -> Principal:
        return request.get(PRINCIPAL) or LOCAL

    def verify_key(self, key: str) -> Principal:
        return LOCAL


class ApiKeys(Authenticator):
    """`Authorization: Bearer <key>`, each key a workspace's, under a per-key rate limit."""

    unknown = Principal("unknown", "unknown", "unknown")
    unowned_workspace = None

    def __init__(self, tenants: TenantStore, limiter: Limiter, rate_per_s: float,
                 oauth: OAuthStore | None = None) -> None:
        self.tenants = tenants
        self.limiter = limiter
        self.rate_per_s = rate_per_s
        self.oauth = oauth

    def authenticate(self, request: web.Request) -> Principal:
        header = request.headers.get("Authorization", "")
        scheme, _, key = header.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise ApiError(401, ErrorCode.UNAUTHORIZED, "this endpoint needs an API key", NO_KEY_HINT,
                           {"WWW-Authenticate": 'Bearer realm="wasm-runner"'})
        return self.verify_key(key.strip())

    def verify_key(self, key: str) -> Principal:
        if key.startswith(ACCESS_PREFIX) and self.oauth is not None:
            return self._verify_token(key)
        record = self.tenants.verify(key) if key else None
        if record is None:
            raise ApiError(401, ErrorCode.INVALID_KEY, "the API key is not valid or has been revoked", BAD_KEY_HINT,
                           {"WWW-Authenticate": 'Bearer realm="wasm-runner", error="invalid_token"'})
        return Principal(record.workspace, record.id, record.kind, record.member)

    def _verify_token(self, token: str) -> Principal:
        """An OAuth access token acts as the member who authorized it, in their workspace, within its
        scopes: while it has not expired, nor been revoked, nor its grant, nor the key the member
        signed in with when they consented."""
        assert self.oauth is not None
        record = self.oauth.by_access(token)
        grant = record.grant if record is not None else None
        if (record is None or grant is None or record.access_revoked_at is not None or grant.revoked_at is not None
                or record.access_expires_at <= time.time() or self.tenants.active_key(grant.key_id) is None):
            raise ApiError(401, ErrorCode.INVALID_KEY, "the access token is not valid: expired or revoked",
                           BAD_TOKEN_HINT, {"WWW-Authenticate": 'Bearer realm="wasm-runner", error="invalid_token"'})
        return Principal(grant.workspace, OAUTH_KEY_PREFIX + grant.id, "member", grant.member,
                         frozenset(record.scope.split()))

    def key_active(self, key_id: str) -> bool:
        if key_id.startswith(OAUTH_KEY_PREFIX):  # a link made with a token lives while its grant does
            grant = self.oauth.grant(key_id.removeprefix(OAUTH_KEY_PREFIX)) if self.oauth is not None else None
            return grant is not None and grant.revoked_at is None and self.tenants.active_key(grant.key_id) is not None
        return self.tenants.active_key(key_id) is not None

    def principal_of(self, request: web.Request) -> Principal:
        return principal_of(request)

    def take_rate(self, key_id: str) -> None:
        wait = self.limiter.take(key_id)
        if wait > 0:
            raise overloaded(retry_after(wait), f"this key is over its rate limit of {self.rate_per_s:g} "
                             "requests per second", ErrorCode.RATE_LIMITED)

    def admit_link(self, key_id: str) -> None:
        """A link acts for the key that made it: dead once that key is revoked, and each use counts
        against the key's rate limit."""
        if not self.key_active(key_id):
            raise key_revoked()
        self.take_rate(key_id)

    def owns(self, principal: Principal, owner: Owner | None) -> bool:
        return owner is not None and owner.workspace == principal.workspace

    def scope_session_id(self, principal: Principal, body: SessionCreate) -> SessionCreate:
        """A session id the caller chooses lives in its workspace's own namespace.

        Ids are global to the server, so a chosen id that another workspace already holds
        would answer 409 and reveal that it exists. The id is prefixed with a tag of the
        caller's workspace instead (the response carries the id to use); an id that already
        has the caller's tag is kept, so a returned id can be chosen again.
        """
        if body.id is None:
            return body
        tag = hashlib.sha256(principal.workspace.encode()).hexdigest()[:8] + "-"
        if body.id.startswith(tag):
            return body
        return msgspec.structs.replace(body, id=(tag + body.id)[:64])

    def visible_sessions(self, principal: Principal, tenants: TenantStore) -> set[str] | None:
        return set(tenants.sessions_of(principal.workspace))
