"""Preview origins: which host name serves which session's port, and for how long.

A preview is served at a host of its own, `{port}-{grant}.{base}`: `base` is the configured
preview domain, or `localhost` on the preview listener's port (browsers resolve `*.localhost` to
loopback). The grant is 128 random bits handed out by the API to a caller who may see the
session (a preview link, or the redirect of the old API path); the host is therefore both the
preview's origin and its credential. A browser sends it on every request, also those a
sandboxed (opaque-origin) page makes, which carry no cookie, so module scripts, `fetch` and
WebSockets (hot reload) all reach the preview without any key on the preview origin.

Grants live in memory: a restart ends them (ask for a new link), as it ends the servers they
point to. A cluster's nodes also keep them in the shared database (`SharedGrants`), so that an
address given out by one node opens through any (the node that holds the session serves it).
"""

from __future__ import annotations

import asyncio
import base64
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import astuple, dataclass
from typing import TYPE_CHECKING

from aiohttp import web

from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_server.config import PreviewSettings
from wasm_runner_server.errors import ApiError

if TYPE_CHECKING:
    from wasm_runner_server.metadata.postgres import Postgres

LISTENER_BASE = "localhost"
LABEL = re.compile(r"(?P<port>[1-9][0-9]{0,4})-(?P<grant>[a-z2-7]{26})")
"""The one spelling of a preview host's first label (host names arrive lower-cased)."""
REUSE_MIN_S = 60.0
"""A grant the API's redirect may hand out again while it has at least this long to live."""
MAX_GRANTS = 100_000
"""Live grants kept at most; past it the oldest go first (their previews need a new link)."""


@dataclass(frozen=True)
class Grant:
    """Access to one port of one session (of one incarnation), for the key that asked, until a time."""

    workspace: str
    session_id: str
    created_at: float
    """The session's creation time: a session deleted and made again under its id is not reached."""
    port: int
    key_id: str
    expires: float


class SharedGrants:
    """The grants of a cluster's nodes, in their shared database."""

    PRUNE_EVERY = 256
    """Expired rows are deleted at every this many grants."""

    def __init__(self, db: Postgres, release: Callable[[], None]) -> None:
        self.db = db
        self._release = release
        self._puts = 0

    def put(self, label: str, grant: Grant, now: float) -> None:
        self.db.execute("INSERT INTO preview_grants (label, workspace, session_id, created_at, port, key_id, expires) "
                        "VALUES (%s, %s, %s, %s, %s, %s, %s)", (label, *astuple(grant)))
        self._puts += 1
        if self._puts % self.PRUNE_EVERY == 0:
            self.db.execute("DELETE FROM preview_grants WHERE expires < %s", (now,))

    def get(self, label: str) -> Grant | None:
        row = self.db.fetchone("SELECT workspace, session_id, created_at, port, key_id, expires FROM preview_grants "
                               "WHERE label = %s", (label,))
        return Grant(*row) if row is not None else None

    def close(self) -> None:
        self._release()


class PreviewOrigins:
    """The grants given out and the origin each is served at."""

    def __init__(self, settings: PreviewSettings, clock: Callable[[], float] = time.time,
                 shared: SharedGrants | None = None) -> None:
        self.settings = settings
        self.clock = clock
        self.shared = shared
        self.listener_port: int | None = None
        """The preview listener's port once it listens (no domain)."""
        self._grants: dict[str, Grant] = {}
        self._latest: dict[tuple[str, str, float, int, str], str] = {}
        """The last label given for (workspace, session, created_at, port, key id): what `reuse` hands out."""

    @property
    def sandboxed(self) -> bool:
        """Previews share one host suffix with the API (`localhost`): each page gets an opaque origin."""
        return self.settings.domain is None

    def grant(self, workspace: str, session_id: str, created_at: float, port: int, key_id: str,
              expires_in: float, *, reuse: bool = False) -> tuple[str, Grant]:
        """A preview label for the session's port (`reuse`: an earlier one of the same key, if it lives on)."""
        now = self.clock()
        which = (workspace, session_id, created_at, port, key_id)
        if reuse and (label := self._latest.get(which)) is not None:
            grant = self._grants.get(label)
            if grant is not None and grant.expires - now >= REUSE_MIN_S:
                return label, grant
        self._prune(now)
        token = base64.b32encode(secrets.token_bytes(16)).decode().rstrip("=").lower()
        label = f"{port}-{token}"
        grant = Grant(workspace, session_id, created_at, port, key_id, now + expires_in)
        if self.shared is not None:
            self.shared.put(label, grant, now)
        self._grants[label] = grant
        self._latest[which] = label
        return label, grant

    def origin(self, label: str) -> str:
        """The origin the preview of `label` is reached at."""
        if self.settings.domain is not None:
            return f"{self.settings.scheme}://{label}.{self.settings.domain}"
        if self.listener_port is None:
            raise ApiError(503, ErrorCode.NOT_READY, "the preview listener is not listening yet", "retry shortly")
        return f"http://{label}.{LISTENER_BASE}:{self.listener_port}"

    def is_preview_host(self, host: str) -> bool:
        """Whether the API's listener must answer `host` with a preview (it names the preview domain)."""
        domain = self.settings.domain
        name = _hostname(host)
        return domain is not None and (name == domain or name.endswith("." + domain))

    def is_listener_host(self, host: str) -> bool:
        """Whether `host` is spelt as the preview listener's addresses are (another node's listener may
        forward such a request to this node's API)."""
        label, _, base = _hostname(host).partition(".")
        return self.sandboxed and base == LISTENER_BASE and LABEL.fullmatch(label) is not None

    async def find(self, host: str) -> tuple[str, Grant]:
        """`resolve`, looking in the cluster's shared grants for a label another node gave out."""
        label = _hostname(host).split(".", 1)[0]
        if self.shared is not None and label not in self._grants and LABEL.fullmatch(label):
            grant = await asyncio.to_thread(self.shared.get, label)
            if grant is not None:
                self._prune(self.clock())
                self._grants[label] = grant
        return self.resolve(host)

    def resolve(self, host: str) -> tuple[str, Grant]:
        """The label and grant a request's Host names; a 404 ApiError when it names none alive."""
        name = _hostname(host)
        label = name.split(".", 1)[0]
        grant = self._grants.get(label) if LABEL.fullmatch(label) else None
        if grant is not None and self.clock() >= grant.expires:
            self._forget(label)
            grant = None
        if grant is None:
            raise ApiError(404, ErrorCode.PREVIEW_NOT_FOUND, f"no preview is served at {name!r} (an unknown or "
                           "expired address, or one given out before the service restarted)",
                           "ask the API for a new link: POST /v1/sessions/{id}/ports/{port}:presign")
        return label, grant

    def _prune(self, now: float) -> None:
        """At the cap: the expired go, then the oldest."""
        if len(self._grants) < MAX_GRANTS:
            return
        for label in [label for label, grant in self._grants.items() if grant.expires <= now]:
            self._forget(label)
        while len(self._grants) >= MAX_GRANTS:
            self._forget(next(iter(self._grants)))

    def _forget(self, label: str) -> None:
        grant = self._grants.pop(label)
        which = (grant.workspace, grant.session_id, grant.created_at, grant.port, grant.key_id)
        if self._latest.get(which) == label:
            del self._latest[which]


def _hostname(host: str) -> str:
    """`host` (a Host header) without its port, lower-cased, without a trailing dot."""
    if host.startswith("["):
        return host.split("]", 1)[0].lower() + "]"
    return host.rsplit(":", 1)[0].rstrip(".").lower() if ":" in host else host.rstrip(".").lower()


PREVIEWS = web.AppKey("previews", PreviewOrigins)
