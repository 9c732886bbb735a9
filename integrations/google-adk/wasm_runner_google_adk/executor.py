"""`WasmRunnerCodeExecutor`: ADK's `BaseCodeExecutor` over wasm-runner sessions.

ADK's LLM flow extracts the first code block of a model response, calls `execute_code` on a worker thread and
turns the `CodeExecutionResult` into a code-execution-result part: a non-empty `stderr` marks the run failed
(and counts towards `error_retry_attempts`), `output_files` are saved as artifacts of the ADK session.

One wasm-runner session per ADK session: when the executor is `stateful` (the default here), ADK passes the
ADK session's id as `execution_id`, and the executor keeps one wasm-runner session (its Python kernel and
workspace) for each, so variables and files persist across the turns of that conversation, while two ADK
sessions (two users of one agent definition) never share state. Not stateful, each call runs in a fresh
kernel (`fresh=True`) of the ADK session's wasm-runner session: variables do not persist, files do.
"""

from __future__ import annotations

import base64
import binascii
import mimetypes
import threading
from typing import Any

from google.adk.agents.invocation_context import InvocationContext
from google.adk.code_executors import BaseCodeExecutor
from google.adk.code_executors.code_execution_utils import CodeExecutionInput, CodeExecutionResult, File
from pydantic import PrivateAttr
from typing_extensions import override

from wasm_runner_client import ApiError, Client, ExecResult, NotFoundError

USER_SCOPE = "user:"


class WasmRunnerCodeExecutor(BaseCodeExecutor):
    """Runs each code block in the Python kernel of the ADK session's wasm-runner session.

    `client` reaches the service (made from `base_url` and `api_key`, or $WASM_RUNNER_URL and
    $WASM_RUNNER_API_KEY, when not given). `profile` is the sessions' profile: `python-data` (native, with
    numpy, pandas and matplotlib) by default, or `python` (WebAssembly). `timeout_seconds` bounds each run
    (the profile's limit when None). Files the code creates or changes, and its figures, come back as
    `output_files` (ADK saves them as artifacts): at most `max_output_files`, of `max_output_file_bytes`
    each. `close()` deletes the sessions the executor made.
    """

    stateful: bool = True
    profile: str = "python-data"
    max_output_file_bytes: int = 10 * 1024 * 1024
    max_output_files: int = 20

    _client: Client = PrivateAttr()
    _owns_client: bool = PrivateAttr(default=False)
    _sessions: dict[str, str] = PrivateAttr(default_factory=dict)
    _written: dict[str, set[str]] = PrivateAttr(default_factory=dict)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def __init__(self, client: Client | None = None, *, base_url: str | None = None, api_key: str | None = None,
                 **data: Any) -> None:
        super().__init__(**data)
        self._owns_client = client is None
        self._client = client if client is not None else Client(base_url, api_key=api_key)

    @property
    def client(self) -> Client:
        return self._client

    def session_id(self, key: str) -> str | None:
        """The wasm-runner session of the ADK session `key`, if the executor made one."""
        return self._sessions.get(key)

    @override
    def execute_code(self, invocation_context: InvocationContext,
                     code_execution_input: CodeExecutionInput) -> CodeExecutionResult:
        key = code_execution_input.execution_id or invocation_context.session.id
        session, new = self._session(key)
        try:
            return self._run(session, key, code_execution_input, fresh=not self.stateful, new=new)
        except NotFoundError:
            # The service dropped the session (idle timeout, deleted): a new one, without the old state.
            with self._lock:
                if self._sessions.get(key) == session:
                    del self._sessions[key]
                    self._written.pop(key, None)
            session, _ = self._session(key)
            return self._run(session, key, code_execution_input, fresh=not self.stateful, new=True,
                             note="The sandbox session had expired: this ran in a new one, without earlier "
                                  "variables and files.\n")

    def close(self) -> None:
        """Deletes the wasm-runner sessions made by this executor (and closes the client it made)."""
        with self._lock:
            sessions = list(self._sessions.values())
            self._sessions.clear()
            self._written.clear()
        for session in sessions:
            try:
                self._client.delete_session(session)
            except NotFoundError:
                pass
        if self._owns_client:
            self._client.close()

    def _session(self, key: str) -> tuple[str, bool]:
        with self._lock:
            if key in self._sessions:
                return self._sessions[key], False
            info = self._client.create_session(profile=self.profile, metadata={"adk_session": key[:200]})
            self._sessions[key] = info.id
            self._written[key] = set()
            return info.id, True

    def _run(self, session: str, key: str, run: CodeExecutionInput, *, fresh: bool, new: bool,
             note: str = "") -> CodeExecutionResult:
        written = self._written.setdefault(key, set())
        inputs = [file for file in run.input_files if file.name not in written]
        for file in inputs:
            # ADK hands every input file to every call: each is written once, so the code's changes stay.
            self._client.write_file(session, file.name, content_bytes(file.content))
            written.add(file.name)
        limits = {"timeout_s": float(self.timeout_seconds)} if self.timeout_seconds else None
        result = self._client.exec(session, run.code, limits=limits, fresh=fresh)
        if result.kernel_restarted and not new and not fresh and not result.kernel_restored:
            note += f"The sandbox's Python kernel restarted ({result.restart_reason}): earlier variables are gone.\n"
        files, skipped = self._output_files(session, result, {file.name for file in inputs})
        return CodeExecutionResult(stdout=note + stdout_of(result) + skipped, stderr=stderr_of(result),
                                   output_files=files, exit_code=exit_code_of(result))

    def _output_files(self, session: str, result: ExecResult, inputs: set[str]) -> tuple[list[File], str]:
        files: list[File] = []
        skipped = ""
        for index, output in enumerate(item for item in result.outputs if item.type == "image/png"):
            files.append(File(name=f"figure_{index + 1}.png", content=base64.b64decode(output.data),
                              mime_type="image/png"))
        changed = []
        for path in [*result.files.created, *result.files.modified]:
            if path.startswith(USER_SCOPE):
                # ADK saves an artifact named "user:..." for the user across sessions, not for this session.
                skipped += f"\n(not returned as an artifact: {path}, a name ADK reads as user-scoped)"
            elif path not in inputs:
                changed.append(path)
        sizes: dict[str, int] = {}
        for folder in dict.fromkeys(path.rpartition("/")[0] for path in changed[:self.max_output_files]):
            # Sizes first, from the folders' listings, so an oversized file is never downloaded.
            try:
                entries = self._client.list_files(session, folder).entries
            except ApiError:
                continue
            sizes.update((entry.path, entry.size) for entry in entries if entry.type == "file")
        for count, path in enumerate(changed):
            if count >= self.max_output_files:
                skipped += f"\n(not returned as artifacts: {len(changed) - count} more changed files)"
                break
            size = sizes.get(path)
            if size is None:  # gone again, or not a regular file
                continue
            if size > self.max_output_file_bytes:
                skipped += f"\n(not returned as an artifact: {path}, {size} bytes, over the executor's limit)"
                continue
            try:
                data = self._client.read_file(session, path)
            except ApiError:
                continue
            mime_type, _ = mimetypes.guess_type(path)
            files.append(File(name=path, content=data, mime_type=mime_type or "application/octet-stream"))
        return files, skipped


def content_bytes(content: str | bytes) -> bytes:
    """An ADK `File`'s content: bytes as they are, a string as base64 (ADK's own reading)."""
    if isinstance(content, bytes):
        return content
    try:
        return base64.b64decode(content, validate=True)
    except (binascii.Error, ValueError):
        return content.encode()


def failed(result: ExecResult) -> bool:
    return result.error is not None or result.limit is not None or result.exit_code != 0


def stdout_of(result: ExecResult) -> str:
    """What the code printed and, like a notebook, its last expression's value; a successful run's stderr
    (warnings) follows, as ADK reads any stderr as a failure."""
    text = result.stdout
    if result.value is not None:
        text += ("" if not text or text.endswith("\n") else "\n") + result.value + "\n"
    if result.stderr and not failed(result):
        text += result.stderr
    return text


def stderr_of(result: ExecResult) -> str:
    """The failure as the model should see it: the code's stderr (the traceback), then what stopped it."""
    if not failed(result):
        return ""
    text = result.stderr
    reasons = []
    if result.error is not None:
        error = f"{result.error.type}: {result.error.message}"
        if error not in text:
            reasons.append(result.error.traceback.rstrip() or error)
        if result.error.hint:
            reasons.append(f"Hint: {result.error.hint}")
    if result.limit is not None:
        reasons.append(f"Stopped by the sandbox's {result.limit} limit.")
    if not text and not reasons:
        reasons.append(f"The code exited with status {result.exit_code}.")
    return "\n".join([text.rstrip(), *reasons]).strip() + "\n"


def exit_code_of(result: ExecResult) -> int:
    if result.exit_code:
        return result.exit_code
    return 1 if failed(result) else 0
