"""The console's sign-in: a key is exchanged once for a server-side console session, held by the
browser in an HttpOnly, SameSite=Strict cookie that no script can read, and a per-session CSRF token
that the sign-in answers once and every call made with the cookie must repeat in a header. Or a key
asks for a sign-in link (`wasm-runner console`), opened once within ten minutes: the browser signs in
as that key without the key ever reaching it.

The token is required on reads too, and never served again: guest pages reach the console's origin
(preview links proxy a session's own server), and the browser attaches the cookie to their requests
as it does to the console's; without the token, which only the console page holds (in memory), the
cookie alone does nothing. The cookie is accepted only on the API routes the console itself calls
(CONSOLE_API_ROUTES), never where guest content is served or proxied; `Authorization: Bearer` always
wins over it.

A lone node keeps its console sessions in memory (a restart signs everyone out); a cluster's nodes keep
them in their shared database (`SharedConsole`), so that a browser signed in through one node is signed
in on every node behind the same load balancer.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from aiohttp import web

from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_server.errors import ApiError
from wasm_runner_server.http.paths import CONSOLE_COOKIE, CONSOLE_OAUTH_COOKIE, CONSOLE_SESSION_PATH
from wasm_runner_server.http.policy import Principal

if TYPE_CHECKING:
    from wasm_runner_server.metadata.postgres import Postgres

COOKIE = CONSOLE_COOKIE
COOKIE_PATH = "/v1/"
"""The narrowest path holding both the sign-in route and every API route the console calls."""
OAUTH_COOKIE = CONSOLE_OAUTH_COOKIE
"""The same console session, for the OAuth authorization page only (path /oauth/). SameSite=Lax, because an
app sends the member's browser there from its own site (a top-level navigation, which a Strict cookie would
not follow); that page changes nothing without the consent form's token, posted from the page itself."""
OAUTH_COOKIE_PATH = "/oauth/"
CSRF_HEADER = "X-CSRF-Token"
LINK_S = 600.0
"""How long a sign-in link may wait to be opened (it signs in once)."""
MAX_LINKS_PER_KEY = 8
MAX_PER_KEY = 32
MAX_SEEN = 10_000
"""Shared console sessions a node remembers having read at most (past it, it forgets them all)."""
"""Past this many live console sessions of one key its oldest is dropped: memory stays bounded by the
keys, and no key's sign-ins can push out another key's sessions."""
CONSOLE_API_ROUTES = ("/v1/sessions/{id}/files", "/v1/sessions/{id}/history", "/v1/sessions/{id}/exec",
                      "/v1/sessions/{id}/pty:presign", "/v1/sessions/{id}/artifacts", "/v1/artifacts",
                      "/v1/sessions/{id}/processes", "/v1/sessions/{id}/packages", "/v1/templates",
                      "/v1/admin/members", "/v1/admin/roles")
"""Route prefixes (canonical) on which the console cookie authenticates, besides the exact routes below; the
team's members and roles for its Team page (each still checked against the signed-in key's permissions)."""
CONSOLE_EXACT_ROUTES = frozenset({"/v1/sessions", "/v1/sessions/{id}", "/v1/sessions/{id}:fork",
                                  "/v1/sessions/{id}/ports/{port}:presign", "/v1/starters", "/v1/usage",
                                  "/v1/admin/workspaces/{workspace}/budgets"})
"""The session list, a session (its page shows it, switches its network policy and deletes it), its forks,
a preview link (never the preview itself: its proxy routes stay off the cookie), the web starters a new
session may start from, and the usage and budgets its Usage page shows."""


@dataclass(frozen=True)
class ConsoleSession:
    principal: Principal
    csrf_token: str
    expires_at: float


def is_console_route(canonical: str) -> bool:
    """Whether the cookie may authenticate a request to this route (ports, admin, audit, shared: never)."""
    return canonical in CONSOLE_EXACT_ROUTES or canonical.startswith(CONSOLE_API_ROUTES)


SEEN_S = 2.0
"""How long a node trusts a console session it read from the shared database before reading it again (a
sign-out through another node counts within this)."""


class SharedConsole:
    """The console's sessions and sign-in links in a cluster's database (cookies and tokens by digest only)."""

    def __init__(self, db: Postgres, release: Callable[[], None]) -> None:
        self.db = db
        self.release = release

    def open(self, session_id: str, session: ConsoleSession) -> None:
        key_id = session.principal.key_id
        with self.db.transaction() as conn:
            conn.execute("DELETE FROM console_sessions WHERE expires_at <= %s", (time.time(),))
            conn.execute("INSERT INTO console_sessions (id_digest, key_id, principal, csrf_token, expires_at) "
                         "VALUES (%s, %s, %s, %s, %s)", (_digest(session_id), key_id, _principal_json(session.principal),
                                                         session.csrf_token, session.expires_at))
            conn.execute("DELETE FROM console_sessions WHERE key_id = %s AND id_digest NOT IN (SELECT id_digest FROM "
                         "console_sessions WHERE key_id = %s ORDER BY expires_at DESC LIMIT %s)",
                         (key_id, key_id, MAX_PER_KEY))

    def get(self, session_id: str) -> ConsoleSession | None:
        row = self.db.fetchone("SELECT principal, csrf_token, expires_at FROM console_sessions WHERE id_digest = %s",
                               (_digest(session_id),))
        return ConsoleSession(_principal_of(row[0]), row[1], row[2]) if row is not None else None

    def close(self, session_id: str) -> None:
        self.db.execute("DELETE FROM console_sessions WHERE id_digest = %s", (_digest(session_id),))

    def link(self, digest: str, principal: Principal, expires: float) -> None:
        with self.db.transaction() as conn:
            conn.execute("DELETE FROM console_links WHERE expires_at <= %s", (time.time(),))
            conn.execute("INSERT INTO console_links (digest, key_id, principal, expires_at) VALUES (%s, %s, %s, %s)",
                         (digest, principal.key_id, _principal_json(principal), expires))
            conn.execute("DELETE FROM console_links WHERE key_id = %s AND digest NOT IN (SELECT digest FROM "
                         "console_links WHERE key_id = %s ORDER BY expires_at DESC LIMIT %s)",
                         (principal.key_id, principal.key_id, MAX_LINKS_PER_KEY))

    def redeem(self, digest: str) -> tuple[Principal, float] | None:
        row = self.db.fetchone("DELETE FROM console_links WHERE digest = %s RETURNING principal, expires_at", (digest,))
        return (_principal_of(row[0]), row[1]) if row is not None else None


def _principal_json(principal: Principal) -> str:
    return json.dumps({"workspace": principal.workspace, "key_id": principal.key_id, "kind": principal.kind,
                       "member": principal.member,
                       "scopes": sorted(principal.scopes) if principal.scopes is not None else None})


def _principal_of(text: str) -> Principal:
    fields = json.loads(text)
    scopes = fields.pop("scopes")
    return Principal(**fields, scopes=frozenset(scopes) if scopes is not None else None)


class ConsoleSessions:
    """Live console sessions by their (random, unguessable) id: in memory, so a restart signs everyone out,
    or in `shared` (a cluster's database)."""

    def __init__(self, lifetime_s: float, shared: SharedConsole | None = None) -> None:
        self.lifetime_s = lifetime_s
        self.shared = shared
        self._sessions: dict[str, ConsoleSession] = {}
        """In memory: every session. Shared: those read from the database within SEEN_S (by when they were)."""
        self._seen: dict[str, float] = {}
        self._links: dict[str, tuple[Principal, float]] = {}

    def open(self, principal: Principal) -> tuple[str, ConsoleSession]:
        if self.shared is not None:
            session_id = secrets.token_urlsafe(32)
            session = ConsoleSession(principal, secrets.token_urlsafe(32), time.time() + self.lifetime_s)
            self.shared.open(session_id, session)
            return session_id, session
        self._prune()
        own = [sid for sid, s in self._sessions.items() if s.principal.key_id == principal.key_id]
        for session_id in own[:max(0, len(own) - MAX_PER_KEY + 1)]:  # oldest first (insertion order)
            self._sessions.pop(session_id)
        session_id = secrets.token_urlsafe(32)
        session = ConsoleSession(principal, secrets.token_urlsafe(32), time.time() + self.lifetime_s)
        self._sessions[session_id] = session
        return session_id, session

    def get(self, session_id: str | None) -> ConsoleSession | None:
        if self.shared is not None and session_id:
            now = time.monotonic()
            if now - self._seen.get(session_id, -SEEN_S) >= SEEN_S:
                if len(self._seen) >= MAX_SEEN:
                    self._seen.clear()
                    self._sessions.clear()
                found = self.shared.get(session_id)
                self._sessions.pop(session_id, None)
                if found is not None:
                    self._sessions[session_id] = found
                self._seen[session_id] = now
        session = self._sessions.get(session_id) if session_id else None
        if session is not None and session.expires_at <= time.time():
            self._sessions.pop(session_id or "", None)
            return None
        return session

    def close(self, session_id: str | None) -> None:
        if session_id:
            self._sessions.pop(session_id, None)
            self._seen.pop(session_id, None)
            if self.shared is not None:
                self.shared.close(session_id)

    def _prune(self) -> None:
        now = time.time()
        for session_id in [sid for sid, s in self._sessions.items() if s.expires_at <= now]:
            self._sessions.pop(session_id, None)
        for digest in [d for d, (_, expires) in self._links.items() if expires <= now]:
            self._links.pop(digest, None)

    # -- sign-in links ---------------------------------------------------------------------------

    def link(self, principal: Principal) -> tuple[str, float]:
        """A one-time sign-in for `principal` (the key that asked), valid LINK_S: (its token, its expiry).
        Kept by digest only; at most MAX_LINKS_PER_KEY live per key (the oldest go first)."""
        token = secrets.token_urlsafe(32)
        expires = time.time() + LINK_S
        if self.shared is not None:
            self.shared.link(_digest(token), principal, expires)
            return token, expires
        self._prune()
        own = [d for d, (p, _) in self._links.items() if p.key_id == principal.key_id]
        for digest in own[:max(0, len(own) - MAX_LINKS_PER_KEY + 1)]:
            self._links.pop(digest)
        self._links[_digest(token)] = (principal, expires)
        return token, expires

    def redeem(self, token: str) -> Principal | None:
        """The principal a link signs in, once (None: unknown, used or expired)."""
        found = self.shared.redeem(_digest(token)) if self.shared is not None else self._links.pop(_digest(token), None)
        if found is None or found[1] <= time.time():
            return None
        return found[0]


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def cookie_session(request: web.Request, sessions: ConsoleSessions, name: str = COOKIE) -> ConsoleSession | None:
    """The request's console session; none when the cookie comes twice (one was planted under a longer
    path by a script of this origin, to have the console act in another session)."""
    sent = [part for header in request.headers.getall("Cookie", []) for part in header.split(";")
            if part.split("=", 1)[0].strip() == name]
    return sessions.get(request.cookies.get(name)) if len(sent) == 1 else None


def check_csrf(request: web.Request, session: ConsoleSession) -> None:
    """A call made with the cookie carries the session's CSRF token (403 without it): changes, so that
    no other site can make them, and reads, so that no other page of this origin can."""
    sent = request.headers.get(CSRF_HEADER, "")
    if not hmac.compare_digest(sent.encode(), session.csrf_token.encode()):
        raise ApiError(403, ErrorCode.CSRF_REFUSED, f"a call made with the console's cookie needs its {CSRF_HEADER} "
                       "header", f"send the csrf_token that POST {CONSOLE_SESSION_PATH} answered as {CSRF_HEADER} "
                       "(after a reload, sign in again), or use Authorization: Bearer <key>")


def check_same_origin(request: web.Request) -> None:
    """The sign-in comes from the console's own page: a cross-site request is refused (login CSRF). The
    Origin's scheme is not compared: behind a proxy that ends TLS the service itself sees http."""
    site = request.headers.get("Sec-Fetch-Site")
    origin = request.headers.get("Origin")
    if (site is not None and site not in ("same-origin", "none")) or (
            origin is not None and urlsplit(origin).netloc != request.host):
        raise ApiError(403, ErrorCode.CSRF_REFUSED, "the console's sign-in is refused from another site",
                       "sign in from the console's own page")


def _https(request: web.Request) -> bool:
    """Whether the browser reached the service over https: directly, or (its Origin says so) through a
    proxy that ended TLS."""
    return request.secure or request.headers.get("Origin", "").startswith("https://")


def set_cookie(response: web.StreamResponse, request: web.Request, session_id: str, lifetime_s: float) -> None:
    response.set_cookie(COOKIE, session_id, max_age=int(lifetime_s), path=COOKIE_PATH, httponly=True,
                        samesite="Strict", secure=_https(request))
    response.set_cookie(OAUTH_COOKIE, session_id, max_age=int(lifetime_s), path=OAUTH_COOKIE_PATH, httponly=True,
                        samesite="Lax", secure=_https(request))


def clear_cookie(response: web.StreamResponse, request: web.Request) -> None:
    response.del_cookie(COOKIE, path=COOKIE_PATH, secure=_https(request), httponly=True, samesite="Strict")
    response.del_cookie(OAUTH_COOKIE, path=OAUTH_COOKIE_PATH, secure=_https(request), httponly=True, samesite="Lax")
