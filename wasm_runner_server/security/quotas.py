"""Admission by workspace quota, chosen once from `auth.enabled`: the checks made before a request runs.

With keys, a workspace may hold `auth.quotas.sessions` sessions, run `concurrent_executions` at
once and starts no write while it holds its `disk_bytes` (a run in a session still starts: it
gets no room to grow, and may delete); without keys nothing is checked up front. (The bytes a
write takes, and the room a run may grow by, are reserved against the workspace's quota either
way: see `Security.workspace_quota` and `sessions.run_disk`.)
"""

from __future__ import annotations

import asyncio
import contextlib
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Container
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING

from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_server.errors import ApiError, overloaded
from wasm_runner_server.http.disk_quota import WorkspaceDisk, unmeasurable
from wasm_runner_server.http.policy import ItemHold, Principal
from wasm_runner_server.security.ratelimit import Counter
from wasm_runner_server.security.settings import WorkspaceQuotas
from wasm_runner_server.security.tenants import TenantStore

if TYPE_CHECKING:
    from wasm_runner_server.security.running_pg import SharedRunning


class Quotas(ABC):
    @abstractmethod
    async def check_disk(self, principal: Principal) -> None:
        """Refuse a write (a 429) while the caller's workspace holds its disk quota."""

    @abstractmethod
    def execution(self, principal: Principal) -> AbstractAsyncContextManager[None]:
        """Held while one execution of the caller runs (a 429 when its workspace runs its maximum)."""

    @abstractmethod
    def batch_item_hold(self, principal: Principal) -> ItemHold | None:
        """What each batch item holds, as an execution of its own, waiting for a free one."""

    @abstractmethod
    def check_session_quota(self, principal: Principal, sessions: Container[str], count: int = 1) -> None:
        """Refuse creating `count` sessions (a 429) when the workspace would pass its maximum of `sessions`
        that exist."""


class Unlimited(Quotas):
    """auth.enabled = false: nothing is refused up front."""

    async def check_disk(self, principal: Principal) -> None:
        return None

    def execution(self, principal: Principal) -> AbstractAsyncContextManager[None]:
        return contextlib.nullcontext()

    def batch_item_hold(self, principal: Principal) -> ItemHold | None:
        return None

    def check_session_quota(self, principal: Principal, sessions: Container[str], count: int = 1) -> None:
        return None


class Enforced(Quotas):
    """auth.enabled: the quotas of `auth.quotas`, per workspace (running executions counted on this node,
    or across the cluster with `shared`)."""

    def __init__(self, settings: WorkspaceQuotas, disk: WorkspaceDisk, tenants: TenantStore,
                 shared: SharedRunning | None = None) -> None:
        self.settings = settings
        self.disk = disk
        self.tenants = tenants
        self.running = Counter()
        self.shared = shared
        self._tokens: dict[str, list[str]] = {}
        """The shared rows this node holds, by workspace (any of them ends with any execution of it)."""

    async def check_disk(self, principal: Principal) -> None:
        try:
            used, _ = await self.disk.measure_async(principal.workspace)
        except OSError as exc:
            raise unmeasurable("the workspace", exc) from None
        quota = self.disk.quota
        if used >= quota:
            raise ApiError(429, ErrorCode.WORKSPACE_DISK_QUOTA, f"this workspace holds {used} bytes, its quota is {quota}",
                           "delete files or sessions, then retry after the seconds in Retry-After",
                           {"Retry-After": "30"})

    @contextlib.asynccontextmanager
    async def execution(self, principal: Principal) -> AsyncIterator[None]:
        cap = self.settings.concurrent_executions
        if not await self._acquire(principal.workspace, cap):
            raise overloaded(1, f"this workspace already runs its maximum of {cap} executions at once",
                             ErrorCode.WORKSPACE_BUSY)
        try:
            yield
        finally:
            await self._release(principal.workspace)

    async def _acquire(self, workspace: str, cap: int) -> bool:
        if not self.running.acquire(workspace, cap):
            return False
        if self.shared is None:
            return True
        try:
            token = await asyncio.to_thread(self.shared.acquire, workspace, cap)
        except BaseException:
            self.running.release(workspace)
            raise
        if token is None:
            self.running.release(workspace)
            return False
        self._tokens.setdefault(workspace, []).append(token)
        return True

    async def _release(self, workspace: str) -> None:
        self.running.release(workspace)
        tokens = self._tokens.get(workspace)
        if self.shared is not None and tokens:
            token = tokens.pop()
            if not tokens:
                del self._tokens[workspace]
            await asyncio.to_thread(self.shared.release, token)

    def batch_item_hold(self, principal: Principal) -> ItemHold | None:
        cap = self.settings.concurrent_executions

        @contextlib.asynccontextmanager
        async def hold() -> AsyncIterator[None]:
            await self.check_disk(principal)
            if self.shared is None:
                await self.running.wait_acquire(principal.workspace, cap)
            else:  # another node's executions end unseen here: look again, less often the longer it takes
                pause = 0.05
                while not await self._acquire(principal.workspace, cap):
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, 1.0)
            try:
                yield
            finally:
                await self._release(principal.workspace)

        return hold

    def check_session_quota(self, principal: Principal, sessions: Container[str], count: int = 1) -> None:
        held = sum(1 for s in self.tenants.sessions_of(principal.workspace) if s in sessions)
        cap = self.settings.sessions
        if held + count > cap:
            more = f"; {count} more would pass it" if held < cap else ""
            raise ApiError(429, ErrorCode.WORKSPACE_SESSION_QUOTA,
                           f"this workspace holds {held} of its maximum of {cap} sessions{more}",
                           "delete sessions you no longer need, then retry", {"Retry-After": "60"})
