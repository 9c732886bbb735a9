"""From a request body and a profile to a core ExecRequest, and running it under admission control.

Limits are layered: the server defaults, then the profile, then the request; the
result must stay within the server maxima or the request is refused (422) rather
than silently clamped. Environment variables a request passes must be allowed by
the profile's allowlist. Every execution holds a slot of the `ExecutionGate` while
it runs, and is counted in the metrics whatever its outcome.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

import msgspec

from wasm_runner import ExecRequest, ExecResult, GuestError, Limits, OutputListener, Runner, Session
from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_protocol.execution import Harness
from wasm_runner_protocol.wire import LimitsPatch
from wasm_runner_server.config import Profile, ServiceConfig
from wasm_runner_server.errors import ApiError
from wasm_runner_server.metrics import Metrics
from wasm_runner_server.sessions.backpressure import ExecutionGate

log = logging.getLogger("wasm_runner.server")

CANCELLED_MESSAGE = "cancelled by the caller"

ExecutionObserver = Callable[[Runner | Session, ExecRequest, ExecResult | None, str], None]
"""Called with (target, request, result or None when aborted, mode) after every admitted execution, before
the result is given out (the audit log's row is on disk when it returns)."""


class Execution:
    """Profiles, limits, admission and metrics for every execution of the service."""

    def __init__(self, config: ServiceConfig, gate: ExecutionGate, metrics: Metrics,
                 observers: Sequence[ExecutionObserver] = ()) -> None:
        self.config = config
        self.gate = gate
        self.metrics = metrics
        self.profiles = config.all_profiles()
        self.default_profile = config.default_profile
        self.base_limits = Limits(**config.limits.default.values())
        self.max_limits = config.limits.max
        self.inflight: set[asyncio.Task] = set()
        self.observers = tuple(observers)
        """Told of every admitted execution when it ends (the audit log is one)."""
        self._profile_limits: dict[int, Limits] = {}
        """Resolved limits of each profile (the profiles are fixed for the service's life)."""

    # -- resolving a request ------------------------------------------------------------

    def profile(self, name: str | None) -> tuple[str, Profile]:
        name = name or self.default_profile
        profile = self.profiles.get(name)
        if profile is None:
            raise ApiError(422, ErrorCode.UNKNOWN_PROFILE, f"no profile named {name!r}",
                           f"available: {', '.join(sorted(self.profiles))} (GET /v1/profiles)")
        return name, profile

    def limits(self, profile: Profile, patch: LimitsPatch | None) -> Limits:
        if patch is None:
            cached = self._profile_limits.get(id(profile))
            if cached is not None:
                return cached
        values: dict[str, object] = {f: getattr(self.base_limits, f) for f in Limits.__struct_fields__}
        values.update(profile.limits.values())
        if patch is not None:
            for name in Limits.__struct_fields__:
                value = getattr(patch, name)
                if value is not msgspec.UNSET:
                    value_cap = getattr(self.max_limits, name)
                    if value is None and name == "fuel" and value_cap is not None:
                        raise ApiError(422, ErrorCode.LIMIT_EXCEEDS_MAXIMUM, "unmetered fuel (null) is not allowed here",
                                       f"set limits.fuel to at most {value_cap}")
                    values[name] = value
        for name, value in values.items():
            cap = getattr(self.max_limits, name)
            if cap is not None and value is not None and value > cap:
                raise ApiError(422, ErrorCode.LIMIT_EXCEEDS_MAXIMUM, f"limits.{name} = {value} exceeds the server maximum {cap}",
                               f"ask for at most {cap} (GET /v1/profiles lists the maxima)")
        try:
            limits = Limits(**values)
        except (ValueError, TypeError) as exc:
            raise ApiError(422, ErrorCode.INVALID_LIMITS, str(exc)) from None
        if patch is None:
            self._profile_limits[id(profile)] = limits
        return limits

    def env(self, profile: Profile, env: dict[str, str]) -> dict[str, str]:
        refused = sorted(name for name in env if not profile.allows_env(name))
        if refused:
            raise ApiError(422, ErrorCode.ENV_NOT_ALLOWED, f"the profile does not allow setting {', '.join(refused)}",
                           f"allowed names: {', '.join(profile.env_allowlist) or 'none'}")
        return {**profile.env, **env}

    def request(self, profile: Profile, *, language: object, code: str | None, command: list[str] | None,
                stdin: str, env: dict[str, str], limits: LimitsPatch | None, fresh: bool, id: str | None,
                path_language: str | None = None, harness: Harness = "script", tests: str = "") -> ExecRequest:
        if language is msgspec.UNSET or language is None:
            language = path_language or profile.language
        return ExecRequest(
            code=code or "", language=language, command=command,
            provider="native" if command is not None else profile.provider,
            stdin=stdin, env=self.env(profile, env), limits=self.limits(profile, limits), fresh=fresh, id=id,
            harness=harness, tests=tests,
        )

    @staticmethod
    def check_provider(runner: Runner, request: ExecRequest) -> None:
        try:
            runner.provider_for(request)
        except ValueError as exc:
            raise ApiError(422, ErrorCode.PROVIDER_UNAVAILABLE, str(exc),
                           "this server cannot run that; pick another profile or language (GET /v1/profiles)") from None

    # -- running -------------------------------------------------------------------------

    async def run(self, target: Runner | Session, request: ExecRequest, *, mode: str,
                  listener: OutputListener | None = None, on_start: Callable[[], None] | None = None,
                  on_task: Callable[[asyncio.Task | None], None] | None = None) -> ExecResult:
        """Run in a session (or one-shot on a runner) while holding a gate slot.

        `on_start` is called once the execution is admitted (a streaming response starts
        then); `on_task` is told the task running the guest, so it can be cancelled. An
        explicit cancel (that task cancelled, not our caller) is a `cancelled` result; our
        caller being cancelled (client gone, shutdown) cancels the guest and propagates.
        """
        language = metric_language(request)
        try:
            async with self.gate.slot() as waited:
                self.metrics.queue_wait_seconds.observe(waited)
                if on_start is not None:
                    on_start()
                started = time.perf_counter()
                result = None
                try:
                    result = await self._run_task(target, request, listener, on_task)
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
                       ) -> AsyncGenerator[ExecResult, None]:
        """Batch items through the runner's lanes (`Runner.run_many`), each admitted as one execution.

        An item holds `hold()` (the caller's own admission, e.g. its workspace's quotas) and a
        gate slot from when it is handed to a lane until its result is out; at most
        `concurrency` are held at once, so an admitted item is one a lane runs now. Each is
        counted in the metrics and seen by the observers exactly like an execution of
        `run`. An item refused admission gets a result saying why, and the batch goes on; an
        `ExecResult` among `items` (a line that could not become a request) passes through.
        Close the iterator (`contextlib.aclosing`) to stop the items still running.
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
                    waited = await stack.enter_async_context(self.gate.slot())
                except ApiError as exc:
                    await stack.aclose()
                    self.metrics.executions.inc(metric_language(item), mode, "rejected", "")
                    decided.append(refused_result(item, exc))
                    continue
                except BaseException:
                    await stack.aclose()
                    raise
                self.metrics.queue_wait_seconds.observe(waited)
                number += 1
                key = str(number)  # the item's own id may repeat; the result is matched by this one
                admitted[key] = _Admitted(item, stack, time.perf_counter())
                yield msgspec.structs.replace(item, id=key)

        results = runner.run_many(admit(), concurrency=concurrency)
        try:
            async for result in results:
                while decided:
                    yield decided.popleft()
                entry = admitted.pop(result.id or "", None)
                if entry is not None:
                    result.id = entry.request.id
                    try:
                        self._finished(runner, entry.request, result, mode, entry.started)  # audited before sent
                    finally:
                        await entry.stack.aclose()
                    self.metrics.executions.inc(metric_language(entry.request), mode, outcome(result),
                                                result.limit or "")
                yield result
            while decided:
                yield decided.popleft()
        finally:
            try:
                await results.aclose()  # stops the guests still running
            finally:
                left = list(admitted.values())
                admitted.clear()
                for entry in left:
                    await entry.stack.aclose()
                for entry in left:
                    self._finished(runner, entry.request, None, mode, entry.started)

    async def _run_task(self, target: Runner | Session, request: ExecRequest, listener: OutputListener | None,
                        on_task: Callable[[asyncio.Task | None], None] | None) -> ExecResult:
        task = asyncio.ensure_future(target.run(request, listener=listener))
        self.inflight.add(task)
        if on_task is not None:
            on_task(task)
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            return cancelled_result(request)
        except ValueError as exc:
            if "provider" in str(exc):
                raise ApiError(422, ErrorCode.PROVIDER_UNAVAILABLE, str(exc)) from None
            raise
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

