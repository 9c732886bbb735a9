"""`WasmRunnerToolset`: pydantic-ai tools that run a model's code in one wasm-runner session.

pydantic-ai has no code-executor interface of its own (its code execution is a model provider's built-in
tool), so the adapter is a toolset, the framework's way to hand an agent tools: `run_python` runs code in the
session's Python kernel (variables persist between calls), `run_shell` runs a command in the native tier
(`bash`) on the same files, `read_file` and `write_file` reach the session's workspace. A failed run is
pydantic-ai's `ModelRetry`, so the model sees the error and may try again.
"""

from __future__ import annotations

from typing import Any

from pydantic_ai import ModelRetry
from pydantic_ai.toolsets import FunctionToolset

from wasm_runner_client import ApiError, AsyncClient, ExecResult


class WasmRunnerToolset(FunctionToolset[Any]):
    """Tools over the session `session_id` (made with `create`, deleted by `aclose`, when not given)."""

    def __init__(self, client: AsyncClient, session_id: str, *, shell_profile: str = "bash",
                 timeout_s: float | None = None, owns_session: bool = False, max_retries: int = 2) -> None:
        super().__init__(max_retries=max_retries)
        self.client = client
        self.session_id = session_id
        self.shell_profile = shell_profile
        self.timeout_s = timeout_s
        self._owns_session = owns_session
        self.add_function(self.run_python, takes_ctx=False)
        self.add_function(self.run_shell, takes_ctx=False)
        self.add_function(self.read_file, takes_ctx=False)
        self.add_function(self.write_file, takes_ctx=False)

    @classmethod
    async def create(cls, client: AsyncClient, *, profile: str = "python", **options: Any) -> WasmRunnerToolset:
        """A toolset over a new session of `profile` (its kernel runs `run_python`)."""
        info = await client.create_session(profile=profile)
        return cls(client, info.id, owns_session=True, **options)

    async def aclose(self) -> None:
        if self._owns_session:
            self._owns_session = False
            await self.client.delete_session(self.session_id)

    def _limits(self) -> dict[str, float] | None:
        return {"timeout_s": self.timeout_s} if self.timeout_s else None

    async def run_python(self, code: str) -> str:
        """Run Python code in a persistent sandboxed kernel (variables and imports stay for later calls).

        Args:
            code: The Python source to run; the value of its last expression is returned after its output.
        """
        result = await self.client.exec(self.session_id, code, limits=self._limits())
        return answer(result)

    async def run_shell(self, command: str) -> str:
        """Run a shell command (bash) in the sandbox, in the same working directory as `run_python`.

        Args:
            command: The command line, as given to `bash -c`.
        """
        result = await self.client.process(self.session_id, ["bash", "-c", command], profile=self.shell_profile,
                                           limits=self._limits())
        return answer(result)

    async def read_file(self, path: str) -> str:
        """Read a text file of the sandbox's working directory.

        Args:
            path: The file's path, relative to the working directory.
        """
        try:
            return await self.client.read_text(self.session_id, path)
        except ApiError as exc:
            raise ModelRetry(f"{path}: {exc.message}") from exc

    async def write_file(self, path: str, content: str) -> str:
        """Write a text file into the sandbox's working directory (parent directories are made).

        Args:
            path: The file's path, relative to the working directory.
            content: The text to write.
        """
        try:
            written = await self.client.write_file(self.session_id, path, content)
        except ApiError as exc:
            raise ModelRetry(f"{path}: {exc.message}") from exc
        return f"wrote {written.size} bytes to {path}"


def answer(result: ExecResult) -> str:
    """The run's output for the model, or `ModelRetry` with the error when it failed."""
    output = result.stdout + result.stderr
    if result.value is not None:
        output += result.value
    if result.error is not None or result.limit is not None or result.exit_code:
        reasons = []
        if result.error is not None and f"{result.error.type}: {result.error.message}" not in output:
            reasons.append(f"{result.error.type}: {result.error.message}")
        if result.limit is not None:
            reasons.append(f"stopped by the sandbox's {result.limit} limit")
        if result.exit_code and result.error is None:
            reasons.append(f"exit code {result.exit_code}")
        raise ModelRetry("\n".join([output.rstrip(), *reasons]).strip())
    return output
