"""The public names of each package, pinned: a change here is a change of the API (and of the version)."""

from __future__ import annotations

import importlib
import importlib.metadata
import re
import tomllib
from pathlib import Path
from types import ModuleType

import msgspec
import pytest

import wasm_runner
import wasm_runner_client
import wasm_runner_protocol
import wasm_runner_server
from wasm_runner_protocol import execution, wire

ROOT = Path(__file__).resolve().parents[2]


def exported(package: ModuleType) -> list[str]:
    names = list(vars(package)["__all__"])
    assert names == sorted(set(names), key=names.index), "duplicates in __all__"
    for name in names:
        assert getattr(package, name) is not None, name
    return sorted(names)


def structs_of(module: ModuleType) -> list[str]:
    return sorted(n for n, o in vars(module).items() if not n.startswith("_") and isinstance(o, type)
                  and issubclass(o, msgspec.Struct) and o.__module__ == module.__name__)


def test_wasm_runner():
    assert exported(wasm_runner) == [
        "Diagnostic", "ExecRequest", "ExecResult", "FileChanges", "GuestError", "InvalidMountError",
        "InvalidRequestError", "InvalidSessionIdError", "Limits", "Mount", "NoProviderError", "OutputListener",
        "PackageSettings", "RichOutput", "Runner", "RunnerClosedError", "RuntimeUnavailableError",
        "SandboxPolicyError", "Session", "WasmRunnerError", "WorkerPolicy",
    ]


def test_wasm_runner_cluster():
    """Batches on Ray: importing the names needs no Ray (only running a batch does)."""
    import wasm_runner.cluster

    assert exported(wasm_runner.cluster) == ["ClusterUnavailableError", "RayCluster"]


def test_wasm_runner_server():
    assert exported(wasm_runner_server) == [
        "AuthSettings", "LimitsSection", "Profile", "ServerSettings", "ServiceConfig", "SessionPolicy",
        "create_app", "load_config",
    ]


def test_wasm_runner_client():
    assert exported(wasm_runner_client) == [
        "ApiError", "AsyncClient", "AsyncExecStream", "AsyncProcessOutputStream", "AuthenticationError",
        "BadRequestError", "CancelResult", "Client",
        "ConflictError", "DeleteResult", "EditResult", "EgressPolicy", "ExecResult", "ExecStream", "FileEntry",
        "FileListing", "GlobResult", "GrepMatch", "GrepResult", "InstallResult", "InstalledPackage", "Limits",
        "LimitsPatch", "NetworkEvent", "NotFoundError", "OneShotResult", "OutputChunk", "OutputFile", "PackageError",
        "PackageLock", "PackageRequest", "PayloadTooLargeError", "PermissionDeniedError", "PresignResult", "PreviewLink",
        "ProcessExit", "ProcessInfo", "ProcessList", "ProcessOutput", "ProcessOutputStream", "ProcessStdinResult",
        "ProfileList",
        "RateLimitedError", "Retry", "RichOutput", "ServerError", "ServiceUnavailableError", "SessionInfo",
        "SessionList", "TextEdit", "TransportError", "UploadResult", "WasmRunnerError", "WriteResult",
    ]


def test_wasm_runner_protocol():
    """The wire schema: its modules and every Struct they define."""
    assert exported(wasm_runner_protocol) == ["execution", "wire"]
    assert structs_of(execution) == ["CaseResult", "Diagnostic", "ExecRequest", "ExecResult", "FileChanges",
                                     "GuestError", "IoCase", "Limits", "RichOutput"]
    assert structs_of(wire) == [
        "ArchiveQuery", "ArtifactCreate", "ArtifactInfo", "ArtifactList", "ArtifactListQuery", "ArtifactPresignBody",
        "Base64File", "CancelResult", "ConsoleLink", "DeleteQuery", "DeleteResult", "DiffQuery", "EditResult", "ErrorDetail",
        "ErrorResponse", "ExecBody", "FileDiff", "FileEdit", "FileEntry", "FileHistory", "FileListing", "FileVersion",
        "ForkFailure", "GlobQuery", "GlobResult", "GrepMatch", "GrepQuery", "GrepResult", "Health", "HistoryQuery", "LimitsPatch",
        "ListQuery", "MountInfo", "OneShotBody", "OneShotResult", "OutputFile", "PresignBody", "PresignResult",
        "ProcessBody", "ProfileInfo", "ProfileList", "PutQuery", "Readiness", "SessionCreate", "SessionFork",
        "SessionForkResult", "SessionInfo", "SessionList", "SessionListQuery", "SessionPatch", "StarterInfo", "StarterList",
        "StreamChunk",
        "TemplateCreate", "TemplateInfo", "TemplateList", "TextEdit", "UploadQuery", "UploadResult",
        "VersionQuery", "WriteResult",
    ]


def test_wasm_runner_client_cli():
    import wasm_runner_client.cli as cli

    assert exported(cli) == ["COMMANDS", "add_service_commands", "main"]
    assert cli.COMMANDS == ("sessions", "exec", "files", "upload", "download", "packages", "egress", "templates",
                            "usage", "console")


@pytest.mark.parametrize("package", ["wasm_runner", "wasm_runner_client", "wasm_runner_protocol", "wasm_runner_server"])
def test_every_package_has_the_one_version(package):
    assert re.fullmatch(r"\d+\.\d+\.\d+", wasm_runner_protocol.__version__)
    assert importlib.import_module(package).__version__ == wasm_runner_protocol.__version__


def test_the_core_pins_the_client_of_its_own_version():
    """Both pyproject files read the version from wasm_runner_protocol; the core's pin is a literal."""
    with (ROOT / "pyproject.toml").open("rb") as f:
        project = tomllib.load(f)["project"]
    assert f"wasm-runner-client=={wasm_runner_protocol.__version__}" in project["dependencies"]
    for pyproject in (ROOT / "pyproject.toml", ROOT / "wasm-runner-client" / "pyproject.toml"):
        with pyproject.open("rb") as f:
            assert tomllib.load(f)["project"]["dynamic"] == ["version"], pyproject
