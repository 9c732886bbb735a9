"""Preview origins: which host name serves which session's port, and for how long.

A preview is served at a host of its own, `{port}-{grant}.{base}`: `base` is the configured
preview domain, or `localhost` on the preview listener's port (browsers resolve `*.localhost` to
loopback). The grant is 128 random bits handed out by the API to a caller who may see the
session (a preview link, or the redirect of the old API path); the host is therefore both the
preview's origin and its credential. A browser sends it on every request, also those a
sandboxed (opaque-origin) page makes, which carry no cookie, so module scripts, `fetch` and
WebSockets (hot reload) all reach the preview without any key on the preview origin.

Grants live in memory: a restart ends them (ask for a new link), as it ends the servers they
point to.
"""

from __future__ import annotations

import base64
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_server.config import PreviewSettings
from wasm_runner_server.errors import ApiError

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


class PreviewOrigins:
    """The grants given out and the origin each is served at."""

    def __init__(self, settings: PreviewSettings, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.clock = clock
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
