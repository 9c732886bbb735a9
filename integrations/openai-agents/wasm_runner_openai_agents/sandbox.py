"""`WasmRunnerSandboxClient` and `WasmRunnerSandboxSession`: an OpenAI Agents SDK sandbox backend over
wasm-runner sessions.

A sandbox is a session of a native profile (`bash` by default: a shell with coreutils and python3, as the
SDK's capabilities expect); its workspace is the session's, `/workspace`, the manifest root the SDK uses by
default. Commands run in bubblewrap through `POST /v1/sessions/{id}/process`; files move through the file
API, which reaches the workspace only, so the SDK's path policy and the service's agree.
"""

from __future__ import annotations

import io
import tarfile
import uuid
from pathlib import Path, PurePosixPath
from typing import Literal

from agents.sandbox import ExecResult, Manifest, User
from agents.sandbox.errors import (
    ExecTimeoutError,
    ExecTransportError,
    WorkspaceArchiveReadError,
    WorkspaceArchiveWriteError,
    WorkspaceReadNotFoundError,
)
from agents.sandbox.session import SandboxSession, SandboxSessionState
from agents.sandbox.session.base_sandbox_session import BaseSandboxSession
from agents.sandbox.session.sandbox_client import BaseSandboxClient, BaseSandboxClientOptions
from agents.sandbox.snapshot import SnapshotBase, SnapshotSpec, resolve_snapshot

from wasm_runner_client import ApiError, AsyncClient, NotFoundError, TransportError

WORKSPACE = "/workspace"
BACKEND_ID = "wasm_runner"


def one_user(user: str | User | None) -> None:
    """Refuses a file call as another user rather than making it as the sandbox's only one."""
    if user is not None:
        raise ValueError("a wasm-runner sandbox has one user: file calls as another user (run_as) are not supported")


class WasmRunnerSandboxClientOptions(BaseSandboxClientOptions):
    type: Literal["wasm_runner"] = "wasm_runner"
    profile: str = "bash"
    """The native profile of the sessions made (a shell with python3)."""
    ttl_s: float | None = None


class WasmRunnerSandboxSessionState(SandboxSessionState):
    type: Literal["wasm_runner"] = "wasm_runner"
    wasm_runner_session_id: str
    profile: str = "bash"


class WasmRunnerSandboxSession(BaseSandboxSession):
    """One wasm-runner session as an SDK sandbox session."""

    state: WasmRunnerSandboxSessionState

    def __init__(self, *, state: WasmRunnerSandboxSessionState, client: AsyncClient) -> None:
        self.state = state
        self.client = client

    @property
    def wasm_runner_session_id(self) -> str:
        return self.state.wasm_runner_session_id

    def _relative(self, path: Path | str, *, for_write: bool = False) -> str:
        """The workspace-relative path the file API takes (the SDK's policy refuses escapes first)."""
        normal = PurePosixPath(self.normalize_path(path, for_write=for_write).as_posix())
        return normal.relative_to(WORKSPACE).as_posix() if normal != PurePosixPath(WORKSPACE) else ""

    async def _exec_internal(self, *command: str | Path, timeout: float | None = None) -> ExecResult:
        argv = [str(part) for part in command]
        limits = {"timeout_s": timeout} if timeout else None
        try:
            result = await self.client.process(self.wasm_runner_session_id, argv, limits=limits,
                                               profile=self.state.profile)
        except (TransportError, ApiError) as exc:
            raise ExecTransportError(command=argv, cause=exc) from exc
        if result.limit == "timeout":
            raise ExecTimeoutError(command=argv, timeout_s=timeout, context={"stdout": result.stdout[-2000:]})
        stderr = result.stderr
        if result.error is not None:
            stderr += f"{result.error.type}: {result.error.message}\n"
        exit_code = result.exit_code if result.error is None or result.exit_code else 1
        return ExecResult(stdout=result.stdout.encode(), stderr=stderr.encode(), exit_code=exit_code)

    async def read(self, path: Path, *, user: str | User | None = None) -> io.IOBase:
        one_user(user)
        relative = self._relative(path)
        try:
            return io.BytesIO(await self.client.read_file(self.wasm_runner_session_id, relative))
        except NotFoundError as exc:
            raise WorkspaceReadNotFoundError(path=path, cause=exc) from exc
        except (TransportError, ApiError) as exc:
            raise WorkspaceArchiveReadError(path=path, cause=exc) from exc

    async def write(self, path: Path, data: io.IOBase, *, user: str | User | None = None) -> None:
        one_user(user)
        relative = self._relative(path, for_write=True)
        payload = data.read()
        content = payload.encode() if isinstance(payload, str) else bytes(payload)
        try:
            await self.client.write_file(self.wasm_runner_session_id, relative, content)
        except (TransportError, ApiError) as exc:
            raise WorkspaceArchiveWriteError(path=path, cause=exc) from exc

    async def running(self) -> bool:
        try:
            await self.client.get_session(self.wasm_runner_session_id)
        except NotFoundError:
            return False
        return True

    async def persist_workspace(self) -> io.IOBase:
        """The workspace as a tar stream with workspace-relative member names (the service makes tar.gz)."""
        buffer = io.BytesIO()
        try:
            await self.client.download_archive(self.wasm_runner_session_id, buffer, format="tar.gz")
        except (TransportError, ApiError) as exc:
            raise WorkspaceArchiveReadError(path=Path(WORKSPACE), cause=exc) from exc
        buffer.seek(0)
        return buffer

    async def hydrate_workspace(self, data: io.IOBase) -> None:
        """Writes each regular file of the tar stream through the file API (which refuses escapes)."""
        files: dict[str, bytes] = {}
        try:
            with tarfile.open(fileobj=data, mode="r:*") as archive:
                for member in archive:
                    if member.isfile():
                        extracted = archive.extractfile(member)
                        if extracted is not None:
                            files[PurePosixPath(member.name).as_posix().removeprefix("./")] = extracted.read()
            for name, content in files.items():
                await self.client.write_file(self.wasm_runner_session_id, name, content)
        except (tarfile.TarError, TransportError, ApiError) as exc:
            raise WorkspaceArchiveWriteError(path=Path(WORKSPACE), cause=exc) from exc


class WasmRunnerSandboxClient(BaseSandboxClient[WasmRunnerSandboxClientOptions | None]):
    """Makes SDK sandbox sessions from wasm-runner sessions, through `client`."""

    backend_id = BACKEND_ID
    supports_default_options = True

    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    async def create(self, *, snapshot: SnapshotSpec | SnapshotBase | None = None, manifest: Manifest | None = None,
                     options: WasmRunnerSandboxClientOptions | None = None) -> SandboxSession:
        options = options or WasmRunnerSandboxClientOptions()
        manifest = manifest or Manifest()
        if manifest.root != WORKSPACE:
            raise ValueError(f"a wasm-runner sandbox's workspace is {WORKSPACE}; the manifest's root is {manifest.root!r}")
        self._validate_manifest_for_create(manifest)
        info = await self.client.create_session(profile=options.profile, ttl_s=options.ttl_s)
        session_id = uuid.uuid4()
        state = WasmRunnerSandboxSessionState(session_id=session_id, manifest=manifest,
                                              snapshot=resolve_snapshot(snapshot, str(session_id)),
                                              wasm_runner_session_id=info.id, profile=options.profile)
        return self._wrap_session(WasmRunnerSandboxSession(state=state, client=self.client))

    async def delete(self, session: SandboxSession) -> SandboxSession:
        inner = session._inner
        if not isinstance(inner, WasmRunnerSandboxSession):
            raise TypeError("WasmRunnerSandboxClient.delete expects a WasmRunnerSandboxSession")
        try:
            await self.client.delete_session(inner.wasm_runner_session_id)
        except NotFoundError:
            pass  # already gone (expired or deleted): the goal is reached
        return session

    async def resume(self, state: SandboxSessionState) -> SandboxSession:
        """Reattaches to the state's session; when it is gone, a new one is made, which the SDK then
        hydrates from the state's snapshot."""
        if not isinstance(state, WasmRunnerSandboxSessionState):
            raise TypeError("WasmRunnerSandboxClient.resume expects a WasmRunnerSandboxSessionState")
        try:
            await self.client.get_session(state.wasm_runner_session_id)
        except NotFoundError:
            info = await self.client.create_session(profile=state.profile)
            state = state.model_copy(update={"wasm_runner_session_id": info.id, "workspace_root_ready": False})
        return self._wrap_session(WasmRunnerSandboxSession(state=state, client=self.client))

    def deserialize_session_state(self, payload: dict[str, object]) -> SandboxSessionState:
        return self._deserialize_session_state_payload(payload, WasmRunnerSandboxSessionState)
