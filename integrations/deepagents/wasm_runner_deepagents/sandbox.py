"""`WasmRunnerSandbox`: a Deep Agents `BaseSandbox` over one wasm-runner session.

`BaseSandbox` builds every file tool (ls, read, edit, grep, glob) from shell commands that call `python3`,
so commands run in the service's native tier (`bash`, bubblewrap) as `bash -c <command>`, in the session's
workspace. Uploads and downloads go through the service's file API, which reaches the workspace only: a
path must be absolute and under /workspace (where commands see the same files); any other path is
`invalid_path` before any call, so a model-chosen path never names a host file.
"""

from __future__ import annotations

import posixpath
from typing import Any

from deepagents.backends.protocol import (
    ExecuteResponse,
    FileDownloadResponse,
    FileOperationError,
    FileUploadResponse,
)
from deepagents.backends.sandbox import BaseSandbox

from wasm_runner_client import (
    ApiError,
    BadRequestError,
    Client,
    NotFoundError,
    PermissionDeniedError,
)

WORKSPACE = "/workspace"
"""Where the session's files are, for commands and for the file API alike."""

DEFAULT_PROFILE = "bash"


def workspace_relative(path: str) -> str | None:
    """The workspace-relative form of an absolute path under /workspace, or None when it is not one."""
    if not path.startswith("/") or "\x00" in path:
        return None
    normal = posixpath.normpath(path)
    if normal == WORKSPACE or not normal.startswith(WORKSPACE + "/"):
        return None
    if ".." in path.split("/"):
        return None  # normpath resolves it lexically; a symlink could resolve it elsewhere: refuse
    return normal[len(WORKSPACE) + 1:]


def file_error(exc: ApiError) -> FileOperationError:
    """Deep Agents' code for a failed file call (the service's `code` says what happened)."""
    if isinstance(exc, NotFoundError):
        return "file_not_found"
    if isinstance(exc, PermissionDeniedError):
        return "permission_denied"
    if exc.code in ("not_a_file", "is_a_directory"):
        return "is_directory"
    if isinstance(exc, BadRequestError):
        return "invalid_path"
    raise exc  # not about the path (quota, auth, service down): the caller should see it as it is


class WasmRunnerSandbox(BaseSandbox):
    """A Deep Agents sandbox backed by the wasm-runner session `session_id`.

    `profile` names the native profile the commands run under (a shell with `python3`, as `BaseSandbox`'s
    helpers need); `timeout_s` is the default limit of one command. `close()` deletes the session when this
    object created it (`create`)."""

    def __init__(self, client: Client, session_id: str, *, profile: str = DEFAULT_PROFILE,
                 timeout_s: float | None = None, owns_session: bool = False) -> None:
        self.client = client
        self.session_id = session_id
        self.profile = profile
        self.timeout_s = timeout_s
        self._owns_session = owns_session

    @classmethod
    def create(cls, client: Client, *, profile: str = DEFAULT_PROFILE, timeout_s: float | None = None,
               **session: Any) -> WasmRunnerSandbox:
        """A new session (`session`: `create_session`'s keywords, e.g. `ttl_s`, `egress`), deleted by `close()`."""
        info = client.create_session(profile=profile, **session)
        return cls(client, info.id, profile=profile, timeout_s=timeout_s, owns_session=True)

    @property
    def id(self) -> str:
        return self.session_id

    def close(self) -> None:
        if self._owns_session:
            self._owns_session = False
            self.client.delete_session(self.session_id)

    def __enter__(self) -> WasmRunnerSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def execute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse:
        seconds = timeout if timeout is not None else self.timeout_s
        limits = {"timeout_s": seconds} if seconds else None
        result = self.client.process(self.session_id, ["bash", "-c", command], profile=self.profile, limits=limits)
        output = result.stdout + result.stderr  # the service keeps the two apart; the protocol has one
        notes = []
        if result.limit is not None:
            notes.append(f"[stopped: the {result.limit} limit was reached]")
        if result.error is not None:
            notes.append(f"{result.error.type}: {result.error.message}")
        if notes:
            output = "\n".join(([output.rstrip("\n")] if output else []) + notes)
        exit_code = result.exit_code if result.exit_code is not None or not notes else 1
        return ExecuteResponse(output=output, exit_code=exit_code, truncated=bool(result.truncated))

    def upload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        responses = []
        for path, content in files:
            relative = workspace_relative(path)
            if relative is None:
                responses.append(FileUploadResponse(path=path, error="invalid_path"))
                continue
            try:
                self.client.write_file(self.session_id, relative, content)
            except ApiError as exc:
                responses.append(FileUploadResponse(path=path, error=file_error(exc)))
            else:
                responses.append(FileUploadResponse(path=path))
        return responses

    def download_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        responses = []
        for path in paths:
            relative = workspace_relative(path)
            if relative is None:
                responses.append(FileDownloadResponse(path=path, error="invalid_path"))
                continue
            try:
                content = self.client.read_file(self.session_id, relative)
            except ApiError as exc:
                responses.append(FileDownloadResponse(path=path, error=file_error(exc)))
            else:
                responses.append(FileDownloadResponse(path=path, content=content))
        return responses
