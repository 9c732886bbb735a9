"""From a request body and a profile to a core ExecRequest, and running it under admission control.

Requests are resolved under their profile by the core (`wasm_runner.profiles`, which
`wasm-runner run --profile` uses too): limits layered from the server defaults, the
profile and the request, within the server maxima, and the environment checked against
the profile's allowlist; what a profile refuses is answered with 422. Every execution
holds a slot of the `ExecutionGate` while it runs, and is counted in the metrics
whatever its outcome.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgspec

from wasm_runner import ExecRequest, ExecResult, GuestError, Limits, NoProviderError, OutputListener, Runner, Session
from wasm_runner.cluster import ClusterUnavailableError, RayCluster
from wasm_runner.profiles import Profile, ProfileError, Profiles
from wasm_runner_protocol.egress import EgressPolicy
from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_protocol.execution import Harness, TypeCheck
from wasm_runner_protocol.wire import LimitsPatch
from wasm_runner_server.config import ServiceConfig
from wasm_runner_server.errors import ApiError
from wasm_runner_server.metrics import Metrics
from wasm_runner_server.sessions.backpressure import ExecutionGate

if TYPE_CHECKING:
    from wasm_runner.tools import Approver, Tool, ToolPolicy

log = logging.getLogger("wasm_runner.server")

CANCELLED_MESSAGE = "cancelled by the caller"

ExecutionObserver = Callable[[Runner | Session, ExecRequest, ExecResult | None, str], None]
"""Called with (target, request, result or None when aborted, mode) after every admitted execution, before
the result is given out (the audit log's row is on disk when it returns)."""


PROFILES_HINTS = {ErrorCode.UNKNOWN_PROFILE: " (GET /v1/profiles)",
                  ErrorCode.LIMIT_EXCEEDS_MAXIMUM: " (GET /v1/profiles lists the maxima)"}
"""Where a client of the service reads the profiles and maxima, added to the core's hint."""


REFUSAL_STATUS = {ErrorCode.NETWORK_NOT_ALLOWED: 403}
"""A well-formed request asking for more network than its profile allows is forbidden, as at sessions."""


@contextlib.contextmanager
def profile_refusal() -> Iterator[None]:
    """A request its profile refuses (the core's `ProfileError`) is answered with its code: 422, or
    403 for a network policy wider than the profile's."""
    try:
        yield
    except ProfileError as exc:
        hint = exc.hint + PROFILES_HINTS.get(exc.code, "") if exc.hint is not None else None
        raise ApiError(REFUSAL_STATUS.get(exc.code, 422), exc.code, exc.message, hint) from None


PROVIDER_HINT = "this server cannot run that; pick another profile or language (GET /v1/profiles)"


@contextlib.contextmanager
def provider_refusal() -> Iterator[None]:
    """No provider of the runner runs the request (the core's NoProviderError): a 422 that says so."""
    try:
        yield
    except NoProviderError as exc:
        raise ApiError(422, ErrorCode.PROVIDER_UNAVAILABLE, str(exc), PROVIDER_HINT) from None


class Execution:
    """Profiles, limits, admission and metrics for every execution of the service."""

    def __init__(self, config: ServiceConfig, gate: ExecutionGate, metrics: Metrics,
                 observers: Sequence[ExecutionObserver] = ()) -> None:
        self.config = config
        self.gate = gate
        self.metrics = metrics
        self.resolver = Profiles(config)
        self.profiles = self.resolver.profiles
        self.default_profile = self.resolver.default_profile
        self.base_limits = self.resolver.base_limits
        self.max_limits = self.resolver.max_limits
        self.inflight: set[asyncio.Task] = set()
        self.observers = tuple(observers)
        """Told of every admitted execution when it ends (the audit log is one)."""

    # -- resolving a request (the core's profiles, their refusals answered with 422) ----------

    def profile(self, name: str | None) -> tuple[str, Profile]:
        with profile_refusal():
            return self.resolver.get(name)

    def limits(self, profile: Profile, patch: LimitsPatch | None) -> Limits:
        with profile_refusal():
            return self.resolver.limits(profile, patch)

    def env(self, profile: Profile, env: dict[str, str]) -> dict[str, str]:
        with profile_refusal():
            return self.resolver.env(profile, env)

    def request(self, profile: Profile, *, language: object, code: str | None, command: list[str] | None,
                stdin: str, env: dict[str, str], limits: LimitsPatch | None, fresh: bool, id: str | None,
                path_language: str | None = None, harness: Harness = "script", tests: str = "",
                typecheck: TypeCheck = False, typecheck_timeout_s: float = 60.0,
                network: EgressPolicy | None = None) -> ExecRequest:
        """The core request; `network` (a session's own policy) must stay within the profile's, which
        applies when it is None."""
        with profile_refusal():
            return self.resolver.request(profile, language=language, code=code, command=command, stdin=stdin,
                                         env=env, limits=limits, fresh=fresh, id=id, path_language=path_language,
                                         harness=harness, tests=tests, typecheck=typecheck,
                                         typecheck_timeout_s=typecheck_timeout_s, network=network)

    @staticmethod
    def check_provider(runner: Runner, request: ExecRequest) -> None:
        with provider_refusal():
            runner.provider_for(request)

    # -- running -------------------------------------------------------------------------

    async def run(self, target: Runner | Session, request: ExecRequest, *, mode: str,
                  listener: OutputListener | None = None, on_start: Callable[[], None] | None = None,
                  on_task: Callable[[asyncio.Task | None], None] | None = None,
                  tools: list[Tool] | None = None, on_approval: Approver | None = None,
                  tool_policy: ToolPolicy | None = None, queued_since: float | None = None) -> ExecResult:
        """Run in a session (or one-shot on a runner) while holding a gate slot.

        The result's `queued_ms` is the time from the call's arrival to its start when it had to wait:
        for a slot, or since `queued_since` (the `time.monotonic()` a session's call began waiting
        behind its session's earlier calls).

        `on_start` is called once the execution is admitted (a streaming response starts
        then); `on_task` is told the task running the guest, so it can be cancelled. An
        explicit cancel (that task cancelled, not our caller) is a `cancelled` result; our
        caller being cancelled (client gone, shutdown) cancels the guest and propagates.
        """
        language = metric_language(request)
        try:
            caller = target.id if isinstance(target, Session) else ""
            async with self.gate.slot(caller) as waited:
                self.metrics.queue_wait_seconds.observe(waited or 0.0)
                if queued_since is not None:
                    waited = time.monotonic() - queued_since
                if on_start is not None:
                    on_start()
                started = time.perf_counter()
                result = None
                try:
                    result = await self._run_task(target, request, listener, on_task, tools, on_approval, tool_policy)
                    if waited is not None:
                        result.queued_ms = round(waited * 1000, 3)
                finally:
                    self._finished(target, request, result, mode, started)
        except ApiError as exc:
            if exc.status == 429:
                self.metrics.executions.inc(language, mode, "rejected", "")
            raise
        self.metrics.executions.inc(language, mode, outcome(result), result.limit or "")
        return result

    def _finished(self, target: Runner | Session, request: ExecRequest, result: ExecResult | None, mode: str,
                  started: float) -> None:
        """An admitted execution ended (result None: aborted): its time, then the observers (the audit log)."""
        self.metrics.execution_seconds.observe(time.perf_counter() - started, metric_language(request), mode)
        for observe in self.observers:
            observe(target, request, result, mode)

    async def run_many(self, runner: Runner, items: AsyncIterable[ExecRequest | ExecResult], *, concurrency: int,
                       mode: str = "batch", hold: Callable[[], AbstractAsyncContextManager[object]] | None = None,
                       cluster: RayCluster | None = None, tools: list[Tool] | None = None,
                       tool_policy: ToolPolicy | None = None,
                       node_tools: Profile | None = None) -> AsyncGenerator[ExecResult, None]:
        """Batch items through the runner's lanes (`Runner.run_many`), each admitted as one execution.

        An item holds `hold()` (the caller's own admission, e.g. its workspace's quotas) and a
        gate slot from when it is handed to a lane until its result is out; at most
        `concurrency` are held at once, so an admitted item is one a lane runs now. Each is
        counted in the metrics and seen by the observers exactly like an execution of
        `run`. An item refused admission gets a result saying why, and the batch goes on; an
        `ExecResult` among `items` (a line that could not become a request) passes through.
        Close the iterator (`contextlib.aclosing`) to stop the items still running.

        With `cluster`, the items run on that Ray cluster's nodes: they hold no slot of this
        server's gate. If the cluster is lost for good, every item left gets a result saying so.

        With `tools`, each item may call them under `tool_policy` (its own calls, budget and record);
        with `cluster`, `node_tools` (a profile) instead: each node starts the profile's MCP servers for
        its items, and the calls come back in the results (audited by `tool_policy.audit` then).
        """
        admitted: dict[str, _Admitted] = {}
        decided: collections.deque[ExecResult] = collections.deque()
        room = asyncio.Semaphore(concurrency)

        async def admit() -> AsyncIterator[ExecRequest]:
            number = 0
            async for item in items:
                if isinstance(item, ExecResult):
                    decided.append(item)
                    continue
                await room.acquire()
                stack = contextlib.AsyncExitStack()
                stack.callback(room.release)
                try:
                    if hold is not None:
                        await stack.enter_async_context(hold())
                    waited = await stack.enter_async_context(self.gate.slot()) if cluster is None else 0.0
                except ApiError as exc:
                    await stack.aclose()
                    self.metrics.executions.inc(metric_language(item), mode, "rejected", "")
                    decided.append(refused_result(item, exc))
                    continue
                except BaseException:
                    await stack.aclose()
                    raise
                self.metrics.queue_wait_seconds.observe(waited or 0.0)
                number += 1
                key = str(number)  # the item's own id may repeat; the result is matched by this one
                admitted[key] = _Admitted(item, stack, time.perf_counter())
                yield msgspec.structs.replace(item, id=key)

        if node_tools is not None:
            results = runner.run_many(admit(), concurrency=concurrency, cluster=cluster, tool_policy=tool_policy,
                                      mcp_servers=node_tools.mcp_servers, approval_tools=node_tools.approval_tools)
        elif tools is not None:
            results = runner.run_many(admit(), concurrency=concurrency, cluster=cluster, tools=tools,
                                      tool_policy=tool_policy)
        else:
            results = runner.run_many(admit(), concurrency=concurrency, cluster=cluster)
        lost: ClusterUnavailableError | None = None
        try:
            try:
                async for result in results:
                    while decided:
                        yield decided.popleft()
                    yield await self._batch_result(runner, admitted.pop(result.id or "", None), result, mode)
            except ClusterUnavailableError as exc:
                lost = exc
            while decided:
                yield decided.popleft()
            if lost is not None:
                for key in list(admitted):
                    entry = admitted.pop(key)
                    yield await self._batch_result(runner, entry, cluster_lost_result(entry.request, lost), mode)
                async for item in items:  # read to the end: every line gets its result
                    yield item if isinstance(item, ExecResult) else cluster_lost_result(item, lost)
        finally:
            try:
                close = getattr(results, "aclose", None)  # an async generator's: stops the guests still running
                if close is not None:
                    await close()
            finally:
                left = list(admitted.values())
                admitted.clear()
                for entry in left:
                    await entry.stack.aclose()
                for entry in left:
                    self._finished(runner, entry.request, None, mode, entry.started)

    async def _batch_result(self, runner: Runner, entry: _Admitted | None, result: ExecResult, mode: str) -> ExecResult:
        """A batch item's result, once audited and counted (an item no entry admitted passes as it is)."""
        if entry is None:
            return result
        result.id = entry.request.id
        try:
            self._finished(runner, entry.request, result, mode, entry.started)  # audited before sent
        finally:
            await entry.stack.aclose()
        self.metrics.executions.inc(metric_language(entry.request), mode, outcome(result), result.limit or "")
        return result

    async def _run_task(self, target: Runner | Session, request: ExecRequest, listener: OutputListener | None,
                        on_task: Callable[[asyncio.Task | None], None] | None,
                        tools: list[Tool] | None = None, on_approval: Approver | None = None,
                        tool_policy: ToolPolicy | None = None) -> ExecResult:
        task = asyncio.ensure_future(target.run(request, listener=listener, tools=tools, on_approval=on_approval,
                                                tool_policy=tool_policy)
                                     if tools is not None else target.run(request, listener=listener))
        self.inflight.add(task)
        if on_task is not None:
            on_task(task)
        try:
            with provider_refusal():
                return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            return cancelled_result(request)
        finally:
            self.inflight.discard(task)
            if on_task is not None:
                on_task(None)
            if not task.done():
                task.cancel()

    async def drain(self, timeout: float) -> None:
        """Let running executions finish for up to `timeout` seconds, then cancel the rest."""
        pending = {t for t in self.inflight if not t.done()}
        if pending:
            log.info("waiting for executions to finish", extra={"event": "drain", "executions": len(pending)})
            _, pending = await asyncio.wait(pending, timeout=timeout)
        for task in pending:
            task.cancel()
        if pending:
            log.warning("cancelled executions at shutdown", extra={"event": "drain_cancelled", "executions": len(pending)})
            with contextlib.suppress(Exception):
                await asyncio.wait(pending, timeout=5)


@dataclass(eq=False)
class _Admitted:
    """A batch item handed to a lane: what it holds until its result is out."""

    request: ExecRequest
    stack: contextlib.AsyncExitStack
    started: float


def metric_language(request: ExecRequest) -> str:
    return request.language if request.command is None else "command"


def refused_result(request: ExecRequest, exc: ApiError) -> ExecResult:
    """The result of a batch item not admitted (what /exec answers with a 429 or 503)."""
    return ExecResult(exit_code=2, id=request.id, language=request.language,
                      error=GuestError(type="Rejected", message=f"{exc.code}: {exc.message}", hint=exc.hint))


def cluster_lost_result(request: ExecRequest, exc: ClusterUnavailableError) -> ExecResult:
    """The result of a batch item the Ray cluster can no longer run (none of its nodes is left)."""
    return ExecResult(exit_code=2, id=request.id, group=request.group, language=request.language,
                      error=GuestError(type="Rejected", message=f"{ErrorCode.CLUSTER_UNAVAILABLE}: {exc}",
                                       hint="the item did not run: send it again once the cluster is back, "
                                            "or with ?cluster=false to run it on this server"))


def outcome(result: ExecResult) -> str:
    if result.limit == "cancelled":
        return "cancelled"
    if result.limit is not None:
        return "limit"
    if result.error is not None or result.exit_code != 0:
        return "error"
    return "ok"


def cancelled_result(request: ExecRequest) -> ExecResult:
    return ExecResult(exit_code=130, limit="cancelled", language=request.language, id=request.id,
                      error=GuestError(type="Cancelled", message=CANCELLED_MESSAGE))

