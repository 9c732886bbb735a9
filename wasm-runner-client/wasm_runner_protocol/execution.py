"""The wire shapes of wasm-runner: one request, one result, whatever runs it.

These msgspec Structs are the single definition used by the library, the HTTP
service, the MCP tools and the client; schemas are generated from them.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from wasm_runner_protocol.egress import DENY, Credential, EgressPolicy, NetworkEvent
from wasm_runner_protocol.tools import ToolCall, ToolSpec

MiB = 1024 * 1024
MAX_LIMIT = 2**63 - 1
"""The largest value of an integer limit: it must cross the worker pipes and reach wasmtime (64 bits)."""

Language = Literal["python", "javascript", "typescript", "bash", "sh"]
ProviderName = Literal["wasm", "native"]
LimitName = Literal["timeout", "fuel", "memory", "output", "disk", "stack", "cancelled"]
Harness = Literal["script", "check", "io"]
Verdict = Literal["passed", "failed", "timeout", "error", "limit"]
Comparison = Literal["exact", "whitespace", "numeric"]
TypeCheck = bool | Literal["block"]
"""`true`: check, then run whatever it found; `"block"`: a program with type errors does not run."""
"""How the `io` harness compares a case's stdout with its expected output: byte for byte;
as whitespace-separated tokens; as tokens where numbers match within `tolerance`."""


LIMIT_MESSAGES: dict[str, str] = {
    # What each limit hit means and what to do about it (shown to callers).
    "timeout": "stopped at the wall-clock deadline (limits.timeout_s); raise it or make the program faster",
    "fuel": "ran out of fuel (limits.fuel); raise it or make the program do less work",
    "memory": "ran out of memory (limits.memory_bytes); raise it or use less memory",
    "output": "printed more than limits.output_bytes; print less or write large output to a file",
    "disk": "the workspace passed its quota (limits.disk_bytes / limits.disk_files); delete files or raise the quota",
    "stack": "the call stack overflowed (too deep recursion)",
    "cancelled": "cancelled by the caller",
}


class Limits(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, kw_only=True, frozen=True):
    """Hard limits for one execution. Every field has a documented default."""

    timeout_s: float = 10.0
    """Wall-clock deadline, including time the guest spends blocked (sleep, select)."""
    fuel: int | None = None
    """Instruction budget (wasmtime fuel units); None runs unmetered and faster."""
    memory_bytes: int = 256 * MiB
    """Largest linear memory the guest may grow to."""
    output_bytes: int = 1 * MiB
    """Captured bytes kept per stream (stdout, stderr); the guest is stopped past it."""
    disk_bytes: int = 256 * MiB
    """Workspace quota: total bytes of regular files."""
    disk_files: int = 10_000
    """Workspace quota: number of files and directories."""

    def __post_init__(self) -> None:
        if not 0 < self.timeout_s <= 3600:
            raise ValueError("timeout_s must be in (0, 3600]")
        if self.fuel is not None and self.fuel <= 0:
            raise ValueError("fuel must be positive (or null for unmetered)")
        if self.memory_bytes < 32 * MiB:
            raise ValueError("memory_bytes must be at least 32 MiB (the interpreters need it to start)")
        for name in ("output_bytes", "disk_bytes", "disk_files"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")
        for name in ("fuel", "memory_bytes", "output_bytes", "disk_bytes", "disk_files"):
            if (getattr(self, name) or 0) > MAX_LIMIT:
                raise ValueError(f"{name} must be at most 2**63 - 1")


class IoCase(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, kw_only=True, frozen=True):
    """One test case of the `io` harness: the program reads `stdin` and must print `expected`."""

    stdin: str = ""
    expected: str
    timeout_s: float | None = None
    """This case's wall-clock limit; None takes the request's `limits.timeout_s`."""

    def __post_init__(self) -> None:
        if self.timeout_s is not None and not 0 < self.timeout_s <= 3600:
            raise ValueError("a case's timeout_s must be in (0, 3600]")


class CaseResult(msgspec.Struct, omit_defaults=True, kw_only=True):
    """What one `io` case gave (its output is in the result only for the first failing case)."""

    verdict: Verdict
    exit_code: int = 0
    limit: LimitName | None = None
    duration_ms: float = 0.0


class ExecRequest(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, kw_only=True):
    """Run `code` in `language` (or `command`, an argv run natively); `fresh` asks for a new
    instance instead of the session's kernel."""

    code: str = ""
    language: Language = "python"
    command: list[str] | None = None
    """A program and its arguments, run by the native provider instead of `code`."""
    provider: ProviderName | None = None
    """Who runs it; None routes by language (python/javascript/typescript -> wasm, bash/sh/command -> native)."""
    stdin: str = ""
    env: dict[str, str] = {}
    limits: Limits = Limits()
    fresh: bool = False
    harness: Harness = "script"
    """`script` runs `code`; `check` runs `code` (the program), then `tests` against it, and
    gives a verdict; `io` runs `code` once per case of `cases` with its stdin and compares
    its stdout with the case's expected output."""
    tests: str = ""
    cases: list[IoCase] = []
    """The `io` harness's test cases, run in order, each in a fresh instance."""
    compare: Comparison = "exact"
    tolerance: float = 1e-6
    """`compare: numeric`: numbers match when within this absolute or relative difference."""
    group: str | None = None
    """What the item belongs to (e.g. a task id), echoed in the result: a batch summary
    counts by it and computes pass@k over the samples of each group."""
    id: str | None = None
    """Caller's correlation id, echoed in the result (batch runs)."""
    egress: EgressPolicy | None = None
    """Where the run may connect; None: the session's policy in a session, else deny. A session's call
    that names one may only narrow the session's (the service resolves it from the profile)."""
    credentials: tuple[Credential, ...] = ()
    """Secrets the host adds on the way out (from the profile, never from a client)."""
    typecheck: TypeCheck = False
    """TypeScript: type-check the program with the TypeScript compiler (tsc, natively, in its own
    sandbox) before it runs; the result's `diagnostics` lists what it found. With `true` the program
    runs either way; with `"block"` a program with type errors does not run (error `TypeCheckError`)."""
    typecheck_timeout_s: float = 60.0
    """The type check's own wall-clock limit (apart from `limits.timeout_s`)."""
    tool_specs: tuple[ToolSpec, ...] = ()
    """The tools the run was given (set by the host, never from a client): with `typecheck`, the
    program is checked against their declaration (the `tools` global)."""

    @property
    def effective_egress(self) -> EgressPolicy:
        """The policy the run is held to: `egress`, or deny where it names none."""
        return self.egress if self.egress is not None else DENY

    def __post_init__(self) -> None:
        if not 0 < self.typecheck_timeout_s <= 600:
            raise ValueError("typecheck_timeout_s must be in (0, 600]")
        if self.typecheck and self.language != "typescript":
            raise ValueError("typecheck applies to language typescript only")
        if self.harness == "io" and not self.cases:
            raise ValueError("harness io needs at least one case in `cases` (stdin and expected output)")
        if self.cases and self.harness != "io":
            raise ValueError("`cases` applies to harness io only")
        if not 0 <= self.tolerance < 1:
            raise ValueError("tolerance must be in [0, 1)")


class GuestError(msgspec.Struct, omit_defaults=True):
    """An uncaught exception in the guest program."""

    type: str
    message: str
    traceback: str = ""
    line: int | None = None
    """Line of the submitted code where it was raised (innermost frame in that code)."""
    source: str | None = None
    """That line's text, e.g. the failing `assert`."""
    hint: str | None = None
    """What to do about it, for the common sandbox failures (network denied, a variable not
    passed, a path outside the workspace)."""


class Diagnostic(msgspec.Struct, omit_defaults=True):
    """One finding of the type checker, as tsc reports it."""

    file: str
    """`<input>` for the program itself."""
    line: int
    column: int
    code: int
    """TypeScript's code (2322 for TS2322); 0 when the checker itself could not run."""
    message: str
    category: Literal["error", "warning", "suggestion", "message", "checker"] = "error"
    """`checker`: the type check did not run or did not finish (the message says why and what to do)."""


class FileChanges(msgspec.Struct, omit_defaults=True):
    """Workspace paths (relative, `/`-separated) changed during one execution."""

    created: list[str] = []
    modified: list[str] = []
    deleted: list[str] = []


OutputType = Literal["text/plain", "text/html", "image/png"]


class RichOutput(msgspec.Struct, omit_defaults=True, frozen=True):
    """One rich output of a call, in the order the program made it: a matplotlib figure shown
    or left open, a `display()`ed object, the last expression."""

    type: OutputType
    data: str
    """The text, or base64 for image/png."""
    plain: str | None = None
    """A plain-text rendering of the same object (e.g. a DataFrame's repr beside its HTML table)."""


class ExecResult(msgspec.Struct, omit_defaults=False, kw_only=True):
    """The one result shape of the product. A limit hit is a result, never an exception."""

    stdout: str = ""
    stderr: str = ""
    exit_code: int = 0
    value: str | None = None
    """repr() of the last expression (kernel mode), like a REPL."""
    error: GuestError | None = None
    limit: LimitName | None = None
    """Which limit stopped the run, if any."""
    truncated: list[Literal["stdout", "stderr"]] = []
    """Streams whose capture hit `limits.output_bytes`."""
    duration_ms: float = 0.0
    queued_ms: float | None = None
    """Milliseconds from the call's arrival at the service to its start, when it had to wait for an
    execution slot or behind its session's earlier calls (null: it started at once). Waiting calls are
    served in turn across workspaces and sessions; past the service's bound a call gets 429 instead."""
    fuel_used: int | None = None
    memory_peak_bytes: int | None = None
    cpu_ms: float | None = None
    """CPU time the host measured for the run (user + system; null where it was not measured): what
    usage metering counts as cpu_seconds."""
    files: FileChanges = msgspec.field(default_factory=FileChanges)
    outputs: list[RichOutput] = []
    """Rich outputs of Python runs (figures, displayed objects, the last expression), in order."""
    kernel_restarted: bool = False
    """True when the session's kernel was (re)built for this call and earlier state is gone."""
    restart_reason: str | None = None
    """Why the kernel restarted (set whenever `kernel_restarted` is)."""
    kernel_restored: bool = False
    """The session's kernel came back from its saved snapshot for this call (after hibernation or
    a restart): the variables of earlier calls are there."""
    kernel_rolled_back: bool = False
    """This call hit a limit or crashed its kernel, which was put back as it was before the call:
    the next call sees the state of the calls before this one (files it wrote stay)."""
    verdict: Verdict | None = None
    """With harness `check`: passed, failed (see error.line / error.source), timeout, error or
    limit. With harness `io`: passed when every case passed, else the first failing case's."""
    cases: list[CaseResult] | None = None
    """With harness `io`: one verdict per case, in order."""
    failed_case: int | None = None
    """With harness `io`: the index of the first case that did not pass (its output is the result's)."""
    group: str | None = None
    """The request's group, echoed."""
    cached: bool = False
    """The result came from a result cache, not from running the item now."""
    retried: bool = False
    """The item ran again after the worker, actor or node running it was lost."""
    language: str = "python"
    isolation: Literal["wasm", "bubblewrap", "none"] = "wasm"
    enforcement: str | None = None
    """How native resource limits were enforced (e.g. "cgroup-v2", "cgroup-v1", "rlimit")."""
    network: list[NetworkEvent] = []
    """Every egress decision of the run, in order."""
    id: str | None = None
    diagnostics: list[Diagnostic] | None = None
    """With `typecheck`: the type checker's findings (empty: the program type-checks)."""
    tool_calls: list[ToolCall] = []
    """Every tool call the guest made (code mode), in order, with the host's decision on each."""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.error is None and self.limit is None
