"""A typed Python client for the wasm-runner HTTP API, sync and async.

    from wasm_runner.client import Client

    with Client("http://127.0.0.1:8080", api_key=None) as client:
        sid = client.create_session().id
        client.write_file(sid, "data.csv", "a,b\\n1,2\\n")
        result = client.exec(sid, "print(open('data.csv').read())")
        with client.exec_stream(sid, "for i in range(3): print(i)") as stream:
            for chunk in stream:
                print(chunk.stream, chunk.text)
        print(stream.result.exit_code)

Results are the core's `ExecResult` (wasm_runner.api) and the Structs of
`wasm_runner.client.wire`, whose field names are the service's wire. Calls answered
429/503 are retried with backoff honouring Retry-After (`Retry`); errors raise
`ApiError` subclasses with the server's `code`, `message` and `hint`. This package
needs httpx; the rest of wasm_runner does not import it.
"""

import importlib
from typing import TYPE_CHECKING

from wasm_runner_client.calls import Retry
from wasm_runner_client.errors import (
    ApiError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RateLimitedError,
    ServerError,
    ServiceUnavailableError,
    TransportError,
    WasmRunnerError,
)
from wasm_runner_client.wire import (
    CancelResult,
    DeleteResult,
    EditResult,
    FileEntry,
    FileListing,
    GlobResult,
    GrepMatch,
    GrepResult,
    LimitsPatch,
    OneShotResult,
    OutputChunk,
    OutputFile,
    PresignResult,
    PreviewLink,
    ProcessExit,
    ProcessInfo,
    ProcessList,
    ProcessOutput,
    ProcessStdinResult,
    ProfileList,
    SessionInfo,
    SessionList,
    TextEdit,
    UploadResult,
    WriteResult,
)
from wasm_runner_protocol import __version__ as __version__
from wasm_runner_protocol.egress import EgressPolicy, NetworkEvent
from wasm_runner_protocol.execution import ExecResult, Limits, RichOutput
from wasm_runner_protocol.packages import InstalledPackage, InstallResult, PackageError, PackageLock, PackageRequest

if TYPE_CHECKING:
    from wasm_runner_client.async_client import AsyncClient, AsyncExecStream, AsyncProcessOutputStream
    from wasm_runner_client.sync_client import Client, ExecStream, ProcessOutputStream

_CLIENTS = {name: "async_client" for name in ("AsyncClient", "AsyncExecStream", "AsyncProcessOutputStream")} | {
    name: "sync_client" for name in ("Client", "ExecStream", "ProcessOutputStream")}


def __getattr__(name: str) -> object:
    """The clients, imported on first use: they load httpx (tens of milliseconds), which the
    wire types and the command line's parsers (`wasm-runner run`'s start) do without."""
    module = _CLIENTS.get(name)
    if module is None:
        raise AttributeError(f"module 'wasm_runner_client' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"wasm_runner_client.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "ApiError",
    "AsyncClient",
    "AsyncExecStream",
    "AsyncProcessOutputStream",
    "AuthenticationError",
    "BadRequestError",
    "CancelResult",
    "Client",
    "ConflictError",
    "DeleteResult",
    "EditResult",
    "EgressPolicy",
    "ExecResult",
    "ExecStream",
    "FileEntry",
    "FileListing",
    "GlobResult",
    "GrepMatch",
    "GrepResult",
    "InstallResult",
    "InstalledPackage",
    "Limits",
    "LimitsPatch",
    "NetworkEvent",
    "NotFoundError",
    "OneShotResult",
    "OutputChunk",
    "OutputFile",
    "PackageError",
    "PackageLock",
    "PackageRequest",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "PresignResult",
    "PreviewLink",
    "ProcessExit",
    "ProcessInfo",
    "ProcessList",
    "ProcessOutput",
    "ProcessOutputStream",
    "ProcessStdinResult",
    "ProfileList",
    "RateLimitedError",
    "Retry",
    "RichOutput",
    "ServerError",
    "ServiceUnavailableError",
    "SessionInfo",
    "SessionList",
    "TextEdit",
    "TransportError",
    "UploadResult",
    "WasmRunnerError",
    "WriteResult",
]
