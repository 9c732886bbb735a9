"""The host side of one run's tool calls: every call a guest makes is decided here.

A guest's request is JSON, `{"name": str, "args": [...], "kwargs": {...}}`, and its answer JSON,
`{"ok": true, "value": ...}` or `{"ok": false, "error": {"kind", "message"}}` (the guest raises
`ToolError`); `{"describe": true}` asks for the run's tools and their schemas (not a call).
Before a tool runs the host checks, in order: the run is still on, the request's size, that
the run was given the tool, the budget (calls, total tool time) and the arguments against the
tool's JSON schema, and for a tool that needs approval, the run's approver's decision (refused
when none is given by the call's timeout). The tool then runs on a thread of the run's own, waited for no
longer than the call's timeout, the budget's remaining time and the run's deadline; its result
must be JSON no larger than the cap. Each call is recorded (`ToolCall`) whatever its outcome.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import inspect
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from wasm_runner.errors import WasmRunnerError
from wasm_runner.tools.registry import Tool, ToolRegistry
from wasm_runner_protocol.tools import ApprovalState, ToolCall, ToolOutcome

__all__ = ["ApprovalRefused", "ApprovalRequest", "Approver", "ToolPolicy", "ToolRun", "refusal"]

log = logging.getLogger("wasm_runner")
ANSWER_MARGIN_S = 0.2
"""A tool call's wait bounded by the run's deadline ends this long before it, so that the guest gets
the timeout as a ToolError it can handle before its own stop (on a loaded machine a thread's wake-up
alone took more than 50 ms)."""


@dataclass(frozen=True)
class ToolPolicy:
    """How much tool use one run gets."""

    max_calls: int = 200
    """Calls per run; the next one is refused (`budget`)."""
    max_total_s: float = 60.0
    """The tools' own time per run, summed; once spent, calls are refused (`budget`)."""
    call_timeout_s: float = 30.0
    """The longest the guest waits for one call (`timeout`); the run's deadline bounds it too."""
    max_argument_bytes: int = 256 * 1024
    """Size of one request as the guest wrote it (`too_large`)."""
    max_result_bytes: int = 1024 * 1024
    """Size of one result as JSON (`too_large`)."""
    threads: int = 4
    """Threads running one run's tools (a timed-out call keeps its thread until its function returns)."""
    inline: bool = False
    """Run plain (not coroutine) tools on the thread of the guest's call: no hand-off to another thread
    (the cheapest call), but a call is then not cut at its timeout, nor at the run's end; for tools
    known to return promptly."""
    allow: frozenset[str] | None = None
    """The only tool names this run may use (None: any it was given); a name the run lacks is ignored.
    Per run, so that two calls of one session under different rules never see each other's."""
    audit: Callable[[ToolCall], None] | None = None
    """Told of each decided call of this run (a service's audit log, under the caller's key); given,
    it takes the place of the session's `on_tool_call` for this run."""

    def __post_init__(self) -> None:
        for field in ("max_calls", "max_argument_bytes", "max_result_bytes", "threads"):
            if getattr(self, field) < 1:
                raise ValueError(f"ToolPolicy.{field} must be at least 1")
        for field in ("max_total_s", "call_timeout_s"):
            if not getattr(self, field) > 0:
                raise ValueError(f"ToolPolicy.{field} must be positive")


@dataclass(frozen=True)
class ApprovalRequest:
    """A guest's call of a tool that needs approval, its arguments checked, waiting for a decision."""

    tool: str
    arguments: dict[str, Any]
    timeout_s: float
    """How long the call waits; with no decision by then it is refused (`timeout`)."""


Approver = Callable[[ApprovalRequest], "bool | Awaitable[bool]"]
"""Decides a call of a tool that needs approval: True runs it. A coroutine function runs on the run's
loop; a plain one on a thread of the run's (it may block, e.g. to ask a person). Raising
`ApprovalRefused` refuses the call with a reason the guest is told."""


class ApprovalRefused(WasmRunnerError):
    """Raised by an approver: the call is refused, and the guest's ToolError says why (the message)."""


def arguments_digest(arguments: dict[str, Any]) -> str:
    """What the record keeps of a call's arguments: SHA-256 of them as compact JSON, keys sorted."""
    return hashlib.sha256(msgspec.json.encode(arguments, order="sorted")).hexdigest()


def refusal(kind: ToolOutcome, message: str) -> str:
    """An answer refusing the guest's call, as JSON (the guest raises it as ToolError)."""
    return json.dumps({"ok": False, "error": {"kind": kind, "message": message}})


class _Refused(Exception):
    def __init__(self, kind: ToolOutcome, message: str, approval: ApprovalState | None = None) -> None:
        super().__init__(message)
        self.kind: ToolOutcome = kind
        self.approval = approval


class ToolRun:
    """One run's tools, budget and record. `handle` answers the guest (any thread); `close` ends
    the run's calls: those in flight get `cancelled` at once and later ones are refused."""

    def __init__(self, tools: ToolRegistry, policy: ToolPolicy = ToolPolicy(), *,
                 deadline: float | Callable[[], float | None] | None = None,
                 loop: asyncio.AbstractEventLoop | None = None,
                 on_call: Callable[[ToolCall], None] | None = None,
                 approver: Approver | None = None) -> None:
        self.tools = tools
        self.policy = policy
        self.deadline = deadline
        """time.monotonic() at which the run ends (or how to know it once the guest started): no call
        waits past it. None: the one waiting for the answer bounds its wait (a worker process)."""
        self.loop = loop
        """Where coroutine tools run (the caller's loop); None: each on a loop of its own."""
        self.on_call = on_call
        """Told of every call once decided (the service's audit rows)."""
        self.approver = approver
        """Decides the calls of tools that need approval (None: such calls are refused)."""
        self.calls: list[ToolCall] = []
        self._lock = threading.Lock()
        self._spent_s = 0.0
        self._closed: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._validators: dict[str, Any] = {}
        self._in_flight = 0
        self._made = 0
        """Calls counted against `max_calls`: those that passed the allowlist and the schema."""
        self._settled = threading.Condition(self._lock)
        self._described = msgspec.json.encode(
            {"ok": True, "value": [{"name": s.name, "parameters": s.parameters} for s in tools.specs()]}).decode()
        """The answer to a guest's `{"describe": true}`: the run's tools and their argument schemas, with
        which the guest checks a call's arguments before it leaves (the host checks them again)."""

    # -- the guest's side --------------------------------------------------------------

    def handle(self, request: str) -> str:
        """Answer one call of the guest's (JSON in, JSON out); never raises."""
        with self._lock:
            self._in_flight += 1
        try:
            return self._handle(request)
        finally:
            with self._lock:
                self._in_flight -= 1
                self._settled.notify_all()

    def _handle(self, request: str) -> str:
        started = time.perf_counter()
        name = "?"
        digest = ""
        tool_s = 0.0
        approval: ApprovalState | None = None
        try:
            if self._closed.done():
                raise _Refused("cancelled", "the run has ended: no tool call is made after it")
            if len(request) > self.policy.max_argument_bytes:
                raise _Refused("too_large", f"the call's arguments are over {self.policy.max_argument_bytes} bytes")
            try:
                message = msgspec.json.decode(request)
            except msgspec.DecodeError as exc:
                raise _Refused("invalid_arguments", f"the call is not JSON: {exc}") from None
            if not isinstance(message, dict):
                raise _Refused("invalid_arguments", "the call is not a JSON object")
            if message.get("describe") is True:  # a guest's question, not a call: what may this run call?
                return self._described
            asked = message.get("name")
            found = self.tools.get(asked) if isinstance(asked, str) else None
            name = found.name if found is not None else (asked[:80] if isinstance(asked, str) else "?")
            if found is None:
                available = ", ".join(sorted(self.tools.names())) or "none"
                raise _Refused("not_allowed", f"no tool named {name!r} is available to this run (available: {available})")
            arguments = self._bind(found, message.get("args") or [], message.get("kwargs") or {})
            digest = arguments_digest(arguments)
            self._take_budget()
            self._check(found, arguments)
            if found.spec.approval:
                self._approve(found, arguments)
                approval = "granted"
            value, tool_s = self._call(found, arguments)
            try:
                encoded = msgspec.json.encode({"ok": True, "value": value})
            except (TypeError, ValueError) as exc:
                raise _Refused("tool_error", f"the tool returned a value JSON cannot carry: {exc}") from None
            if len(encoded) > self.policy.max_result_bytes:
                raise _Refused("too_large", f"the tool's result is over {self.policy.max_result_bytes} bytes")
            self._record(ToolCall(tool=name, outcome="ok", duration_ms=round(tool_s * 1000, 3),
                                  arguments_sha256=digest, approval=approval))
            return encoded.decode()
        except _Refused as refused:
            if refused.kind in ("tool_error", "timeout", "cancelled", "too_large") and not tool_s:
                tool_s = time.perf_counter() - started if refused.kind != "too_large" else 0.0
            message_text = str(refused)
            self._record(ToolCall(tool=name, outcome=refused.kind, duration_ms=round(tool_s * 1000, 3),
                                  arguments_sha256=digest, error=message_text,
                                  approval=refused.approval or approval))
            return refusal(refused.kind, message_text)
        except Exception as exc:  # noqa: BLE001 - the guest gets an answer, the instance stays usable
            log.exception("a guest's tool call failed on the host")
            self._record(ToolCall(tool=name, outcome="tool_error", arguments_sha256=digest, error="host error",
                                  approval=approval))
            return refusal("tool_error", f"the host could not make the call: {type(exc).__name__}")

    def _bind(self, found: Tool, args: Any, kwargs: Any) -> dict[str, Any]:
        """Positional arguments in the order of the schema's properties, then the keywords."""
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise _Refused("invalid_arguments", "the call's args must be a list and its kwargs an object")
        properties = list((found.spec.parameters.get("properties") or {}).keys())
        if len(args) > len(properties):
            raise _Refused("invalid_arguments", f"{found.name}() takes {len(properties)} arguments, "
                                                f"{len(args)} were given positionally")
        arguments = dict(zip(properties, args, strict=False))
        for key, value in kwargs.items():
            if key in arguments:
                raise _Refused("invalid_arguments", f"{found.name}() got two values for {key!r}")
            arguments[key] = value
        return arguments

    def _take_budget(self) -> None:
        with self._lock:
            if self._made >= self.policy.max_calls:
                raise _Refused("budget", f"this run's tool budget is spent: {self.policy.max_calls} calls")
            self._made += 1  # a call that goes on to fail its schema check gives its unit back
            if self._spent_s >= self.policy.max_total_s:
                raise _Refused("budget", f"this run's tool budget is spent: {self.policy.max_total_s:g} s of tool time")

    def _check(self, found: Tool, arguments: dict[str, Any]) -> None:
        validator = self._validators.get(found.name)
        if validator is None:
            validator = self._validators[found.name] = found.validator()
        if validator.is_valid(arguments):
            return
        with self._lock:
            self._made -= 1
        error = next(iter(validator.iter_errors(arguments)))
        where = "/".join(str(p) for p in error.instance_path)
        raise _Refused("invalid_arguments", f"{found.name}(): {where + ': ' if where else ''}{error.message}")

    def _wait_s(self) -> float:
        """How long the next wait of a call may last: the call's timeout, bounded by the run's deadline
        (less a margin: the guest then gets the timeout as a ToolError it can handle, where a wait to
        the deadline itself raced the guest's own stop)."""
        wait = self.policy.call_timeout_s
        deadline = self.deadline() if callable(self.deadline) else self.deadline
        if deadline is not None:
            wait = min(wait, deadline - time.monotonic() - ANSWER_MARGIN_S)
        return wait

    def _approve(self, found: Tool, arguments: dict[str, Any]) -> None:
        """Returns once the call is approved; else _Refused (denied, no decision in time, run over).
        The wait for a decision is not tool time: the tool then gets its own timeout."""
        if self.approver is None:
            raise _Refused("refused", f"{found.name}() needs approval and this run has no one to give it "
                                      f"(over HTTP: an exec with Accept: text/event-stream)", "refused")
        wait = self._wait_s()
        if wait <= 0:
            raise _Refused("timeout", "the run's deadline has passed", "timeout")
        request = ApprovalRequest(tool=found.name, arguments=arguments, timeout_s=round(wait, 3))
        approver = self.approver
        future: concurrent.futures.Future[Any]
        if inspect.iscoroutinefunction(approver):
            if self.loop is not None and self.loop.is_running():
                future = asyncio.run_coroutine_threadsafe(approver(request), self.loop)
            else:
                future = self._ensure_pool().submit(asyncio.run, approver(request))
        else:
            future = self._ensure_pool().submit(approver, request)
        done, _ = concurrent.futures.wait([future, self._closed], timeout=wait,
                                          return_when=concurrent.futures.FIRST_COMPLETED)
        if self._closed.done():
            future.cancel()
            raise _Refused("cancelled", "the run ended while the call waited for approval")
        if future not in done:
            future.cancel()
            raise _Refused("timeout", f"{found.name}() needs approval and none was given within {wait:.3g} s: "
                                      f"the call was refused", "timeout")
        failure = future.exception()
        decision = future.result() if failure is None else False
        if isinstance(failure, ApprovalRefused):
            raise _Refused("refused", f"{found.name}() needs approval and it was refused: {failure}", "refused")
        if failure is not None:
            log.warning("a tool call's approver failed: the call is refused", exc_info=failure)
        if inspect.isawaitable(decision):  # a plain function returning an awaitable: not a decision
            raise _Refused("refused", f"{found.name}(): the approver gave no decision", "refused")
        if decision is not True:
            raise _Refused("refused", f"{found.name}() needs approval and it was refused", "refused")

    def _ensure_pool(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(self.policy.threads, thread_name_prefix="tool")
            return self._pool

    def _call(self, found: Tool, arguments: dict[str, Any]) -> tuple[Any, float]:
        with self._lock:
            remaining = self.policy.max_total_s - self._spent_s
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(self.policy.threads, thread_name_prefix="tool")
            pool = self._pool
        wait = min(self._wait_s(), remaining)
        if wait <= 0:
            raise _Refused("timeout" if remaining > 0 else "budget", "the run's deadline has passed"
                           if remaining > 0 else "this run's tool budget is spent")
        started = time.perf_counter()
        if self.policy.inline and not inspect.iscoroutinefunction(found.function):
            try:
                value = found.function(**arguments)
            except Exception as exc:  # noqa: BLE001 - the guest gets the tool's message
                raise _Refused("tool_error", str(exc) or type(exc).__name__) from None
            finally:
                took = time.perf_counter() - started
                with self._lock:
                    self._spent_s += took
            return value, took
        future = self._start(found, arguments, pool)
        done, _ = concurrent.futures.wait([future, self._closed], timeout=wait,
                                          return_when=concurrent.futures.FIRST_COMPLETED)
        took = time.perf_counter() - started
        with self._lock:
            self._spent_s += took
        if self._closed.done():  # whether or not the tool has answered meanwhile: the run is over
            future.cancel()
            raise _Refused("cancelled", "the run ended while the tool was running")
        if future not in done:
            future.cancel()
            raise _Refused("timeout", f"{found.name}() did not answer within {wait:.3g} s")
        failure = future.exception()
        if failure is not None:
            raise _Refused("tool_error", str(failure) or type(failure).__name__)
        return future.result(), took

    def _start(self, found: Tool, arguments: dict[str, Any],
               pool: concurrent.futures.ThreadPoolExecutor) -> concurrent.futures.Future[Any]:
        if found.start is not None:
            return found.start(**arguments)
        function = found.function
        if inspect.iscoroutinefunction(function):
            if self.loop is not None and self.loop.is_running():
                return asyncio.run_coroutine_threadsafe(function(**arguments), self.loop)
            return pool.submit(asyncio.run, function(**arguments))
        return pool.submit(function, **arguments)

    def _record(self, call: ToolCall) -> None:
        with self._lock:
            self.calls.append(call)
        if self.on_call is not None:
            try:
                self.on_call(call)
            except Exception:  # noqa: BLE001 - a failing observer must not fail the guest's call
                log.exception("a tool call observer failed")

    # -- the host's side ---------------------------------------------------------------

    def close(self) -> list[ToolCall]:
        """End the run's calls (those waiting get `cancelled`); returns the record."""
        if not self._closed.done():
            self._closed.set_result(None)
        with self._lock:
            # calls in flight end at once (their waits watch `_closed`): their records are kept
            self._settled.wait_for(lambda: self._in_flight == 0, timeout=5)
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        return list(self.calls)
