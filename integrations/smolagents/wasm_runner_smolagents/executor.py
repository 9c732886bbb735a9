"""`WasmRunnerExecutor`: smolagents' `RemotePythonExecutor` over the Python kernel of one wasm-runner session.

Built as smolagents' own E2B executor is: `RemotePythonExecutor` sends the tools (as source) and the
variables into the kernel and patches `final_answer` to raise `FinalAnswerException`; this class runs each
code action in the session's kernel (variables, imports and definitions persist between steps), reads that
exception back as the final answer, and raises any other error as smolagents' own `AgentError`, which the
agent turns into an `AgentExecutionError` the model sees and can correct.
"""

from __future__ import annotations

import ast
from typing import Any

from smolagents.local_python_executor import CodeOutput
from smolagents.monitoring import AgentLogger, LogLevel
from smolagents.remote_executors import RemotePythonExecutor
from smolagents.utils import AgentError

from wasm_runner_client import Client, ExecResult

DEFAULT_PROFILE = "python-data"
"""The native data kernel (bubblewrap): variables outlive a call, and numpy, pandas and PIL are there, which
the tools' source sent by `send_tools` imports at its top (as it does in E2B's sandboxes)."""

IMPORT_NAMES = {"pillow": "PIL", "scikit-learn": "sklearn", "beautifulsoup4": "bs4"}
"""Distributions whose module has another name."""


class WasmRunnerExecutor(RemotePythonExecutor):
    """Runs a `CodeAgent`'s code in the session `session_id`, or in a new session of `profile` (deleted by
    `cleanup()`). `additional_imports` are packages to install into the session (wheels the service's
    package policy allows); `timeout_s` limits each code action."""

    def __init__(self, client: Client, *, session_id: str | None = None, profile: str = DEFAULT_PROFILE,
                 additional_imports: list[str] | None = None, logger: AgentLogger | None = None,
                 timeout_s: float | None = None, allow_pickle: bool = False, **session: Any) -> None:
        super().__init__(list(additional_imports or ()), logger or AgentLogger(level=LogLevel.INFO), allow_pickle)
        self.client = client
        self.timeout_s = timeout_s
        self._owns_session = session_id is None
        self._kernel_used = False
        self.session_id = session_id or client.create_session(profile=profile, **session).id
        self.installed_packages = self.install_packages(self.additional_imports)
        self.logger.log(f"wasm-runner session {self.session_id} is ready", level=LogLevel.INFO)

    def run_code_raise_errors(self, code: str) -> CodeOutput:
        limits = {"timeout_s": self.timeout_s} if self.timeout_s else None
        result = self.client.exec(self.session_id, code, limits=limits)
        if result.kernel_restarted and not result.kernel_restored and self._kernel_used:
            self.logger.log(f"The sandbox's Python kernel restarted ({result.restart_reason}): variables "
                            "from earlier steps are gone", level=LogLevel.INFO)
        self._kernel_used = True
        logs = result.stdout
        error = result.error
        if error is not None and error.type.rpartition(".")[2] == self.FINAL_ANSWER_EXCEPTION:
            return CodeOutput(output=self._deserialize_final_answer(error.message, self.allow_pickle), logs=logs,
                              is_final_answer=True)
        if error is not None or result.limit is not None:
            raise AgentError(f"{logs}\nExecuting code yielded an error:\n{describe_failure(result)}", self.logger)
        return CodeOutput(output=result.value, logs=logs, is_final_answer=False)

    def install_packages(self, additional_imports: list[str]) -> list[str]:
        """Installs through the service (its resolver and package policy), not `pip` in the sandbox.

        A refusal is logged, not raised, as smolagents' own remote executors do: `send_tools` asks for every
        module a tool's source names, optional ones included (`final_answer` names numpy and PIL, which it
        imports only if present), and code that needs a missing package fails at its import, which the
        model sees."""
        missing = self.missing_modules(additional_imports)
        if not missing:
            return list(additional_imports)
        result = self.client.install(self.session_id, python=missing)
        if not result.ok:
            message = result.error.message if result.error is not None else "refused"
            self.logger.log(f"Installing {', '.join(missing)} into the sandbox failed: {message}", level=LogLevel.INFO)
            return [name for name in additional_imports if name not in missing]
        return list(additional_imports)

    def missing_modules(self, distributions: list[str]) -> list[str]:
        """The distributions whose module the session's Python cannot import yet (asked in the kernel)."""
        if not distributions:
            return []
        modules = {name: IMPORT_NAMES.get(name.lower(), name.replace("-", "_")) for name in distributions}
        probe = ("import importlib.util as _wr_util\n"
                 f"[_d for _d, _m in {sorted(modules.items())!r} if _wr_util.find_spec(_m) is None]")
        result = self.client.exec(self.session_id, probe)
        if result.error is not None or result.value is None:
            return list(distributions)
        missing = ast.literal_eval(result.value)
        return [name for name in distributions if name in missing]

    def cleanup(self) -> None:
        """Deletes the session when this executor created it (`CodeAgent.cleanup()` calls this)."""
        if self._owns_session:
            self._owns_session = False
            self.client.delete_session(self.session_id)

    def delete(self) -> None:
        self.cleanup()


def describe_failure(result: ExecResult) -> str:
    """The error as smolagents' remote executors show it: type, message, traceback (or the limit hit)."""
    if result.error is None:
        return f"The code was stopped by the sandbox's {result.limit} limit."
    parts = [result.error.type, result.error.message, result.error.traceback]
    if result.error.hint:
        parts.append(f"Hint: {result.error.hint}")
    if result.limit is not None:
        parts.append(f"(stopped by the sandbox's {result.limit} limit)")
    return "\n".join(part for part in parts if part)
