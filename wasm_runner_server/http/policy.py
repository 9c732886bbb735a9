"""Who is calling and what they may do, as the HTTP handlers ask it: the `AccessPolicy` interface.

`create_app(config, policy)` builds the service around one policy: its middleware runs after the
error middleware (so its refusals have the service's error shape), its routes are added, its
`context` opens and closes what it needs after the service, and the service is opened with its
session mounts and its execution observer. The handlers ask only the hooks below, so they never
know which policy runs; `OpenAccess` lets every caller be the local admin (embedders, unit tests).
"""

from __future__ import annotations

import contextvars
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

from aiohttp import web

from wasm_runner import ExecRequest, ExecResult, Mount, Runner, Session
from wasm_runner.processes import BackgroundProcess
from wasm_runner_protocol.egress import EgressPolicy
from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_protocol.packages import InstallResult, PackageRequest
from wasm_runner_protocol.tools import ToolCall
from wasm_runner_protocol.wire import SessionCreate
from wasm_runner_server.errors import ApiError
from wasm_runner_server.http.disk_quota import WorkspaceMeasure
from wasm_runner_server.sessions.manager import LiveSession
from wasm_runner_server.sessions.service import SERVICE
from wasm_runner_server.sessions.session_disk import OWN_DIRECTORY, SessionDisk

LOCAL_WORKSPACE = "local"
NO_KEY_HINT = ("send Authorization: Bearer <key>; an administrator creates keys with "
               "`wasm-runner keys create --workspace W --name N`")


@dataclass(frozen=True)
class Principal:
    workspace: str
    key_id: str
    kind: str  # member | app | admin | link
    member: str | None = None
    """The person the caller acts for (a member or admin key's member; None for apps and links)."""
    scopes: frozenset[str] | None = None
    """An OAuth access token's scopes (what routes it opens: security.oauth.scopes); None for keys and links."""

    @property
    def shared(self) -> bool:
        """Sessions opened with this key see the workspace's shared/ directory."""
        return self.kind in ("member", "admin")


LOCAL = Principal(LOCAL_WORKSPACE, "local", "admin", "local")
"""The caller when no keys are in use."""
CURRENT: contextvars.ContextVar[Principal | None] = contextvars.ContextVar("wasm_runner_principal", default=None)
"""The principal of the request being handled (read by the execution observer)."""
PRINCIPAL = web.RequestKey("principal", Principal)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
WorkspaceQuota = tuple[str, int, WorkspaceMeasure]
"""What a write reserves against besides its session's limit: (workspace, quota, async measure)."""
ItemHold = Callable[[], AbstractAsyncContextManager[None]]


def principal_of(request: web.Request) -> Principal:
    principal = request.get(PRINCIPAL)
    if principal is None:
        raise ApiError(401, ErrorCode.UNAUTHORIZED, "this endpoint needs an API key", NO_KEY_HINT)
    return principal


class AccessPolicy(ABC):
    """The hooks the service's handlers call; each default lets the request through unchanged."""

    @abstractmethod
    def authenticate(self, request: web.Request) -> Principal:
        """The caller of `request` (an ApiError refuses it)."""

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        principal = self.authenticate(request)
        request[PRINCIPAL] = principal
        token = CURRENT.set(principal)
        try:
            return await handler(request)
        finally:
            CURRENT.reset(token)

    def check_session_quota(self, request: web.Request, count: int = 1) -> None:
        """Refuse creating `count` more sessions (a 429), or return."""
        return None

    def session_owner(self, session_id: str) -> str:
        """The workspace a session belongs to ("" without tenants): its kernel snapshots and
        templates are that workspace's only."""
        return ""

    def caller_workspace(self, request: web.Request) -> str:
        """The workspace of the caller ("" without tenants): whose templates it sees."""
        return ""

    def session_ephemeral(self, session_id: str) -> bool:
        """Whether the session leaves no persistent trace (its forks neither)."""
        return False

    def on_session_event(self, request: web.Request, mode: str, session_id: str | None, detail: dict,
                         error: str | None = None) -> None:
        """A session was forked or hibernated on request, or a template published, started or deleted."""
        return None

    def admit_link(self, key_id: str) -> None:
        """A link (a preview's address) given out to `key_id` is used: refuse it (an ApiError), or return."""
        return None

    def scope_session_id(self, request: web.Request, body: SessionCreate) -> SessionCreate:
        """The creation request with the session id the caller's namespace gives it."""
        return body

    def check_session_disk(self, request: web.Request, body: SessionCreate) -> None:
        """Refuse, before anything is made, a creation request the disk layout cannot place (a 4xx)."""
        return None

    def claim_session(self, request: web.Request, session_id: str, ephemeral: bool,
                      body: SessionCreate | None = None) -> None:
        """The caller created `session_id` (an ephemeral one never outlives the process); `body`, its
        creation request, places its /workspace under the disk layout (None: a copy of a session,
        in a directory of its own)."""
        return None

    def session_disk(self, session_id: str) -> SessionDisk:
        """Where the session's /workspace is (its own directory unless a disk layout says otherwise)."""
        return OWN_DIRECTORY

    def visible_page(self, request: web.Request, cursor: str | None,
                     limit: int) -> tuple[list[LiveSession], str | None]:
        """The page of sessions the caller may list, oldest first, and the next cursor."""
        return request.app[SERVICE].sessions.page(cursor, limit)

    def workspace_quota(self, session_id: str) -> WorkspaceQuota | None:
        """What a write into the session, and each of its runs, reserves against besides the
        session's own limit."""
        return None

    def disk_changed(self, session_id: str) -> None:
        """A run or background process of the session ended: its files (and shared ones) changed."""
        return None

    def batch_item_hold(self, request: web.Request) -> ItemHold | None:
        """What each item of the caller's batch holds while it runs, as an execution of its own."""
        return None

    def execution_share(self) -> str:
        """Whose turn the current request's executions queue in: its workspace (the service serves
        workspaces' queued calls in turn, so one workspace cannot starve another)."""
        principal = CURRENT.get()
        return principal.workspace if principal is not None else LOCAL_WORKSPACE

    def session_mounts(self, session_id: str) -> tuple[Mount, ...]:
        """Mounts a session gets besides its profile's."""
        return ()

    def on_execution(self, target: Runner | Session, request: ExecRequest, result: ExecResult | None,
                     mode: str) -> None:
        """An admitted execution ended (result None: it was aborted)."""
        return None

    def on_packages(self, principal: Principal, session_id: str, body: PackageRequest, result: InstallResult) -> None:
        """An install into a session by `principal` ended (its result holds the session's lock): one the
        API made, or one the guest asked for in a call of the principal's."""
        return None

    def on_egress_change(self, request: web.Request, session_id: str, profile: str, previous: EgressPolicy,
                         requested: EgressPolicy | None, error: str | None) -> None:
        """A change of a session's network policy was made (`error` None) or refused (`requested`
        None: back to the profile's)."""
        return None

    def on_process(self, event: str, session_id: str, process: BackgroundProcess, owner: object) -> None:
        """A session's background process started or ended (`owner`: the Principal that started it)."""
        return None

    def on_tool_call(self, request: web.Request, session_id: str, call: ToolCall) -> None:
        """A guest's tool call was decided (made, refused or failed); any thread."""
        return None

    def routes(self) -> Iterable[web.AbstractRouteDef]:
        """Routes the policy serves itself."""
        return ()

    async def context(self, app: web.Application) -> AsyncIterator[None]:
        """A cleanup context run after the service's (app[SERVICE] is set): open, yield, close."""
        yield


class OpenAccess(AccessPolicy):
    """Every caller is the local admin; no quotas, no audit, no routes of its own."""

    def authenticate(self, request: web.Request) -> Principal:
        return LOCAL


POLICY = web.AppKey("policy", AccessPolicy)
