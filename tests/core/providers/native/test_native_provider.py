"""The native provider's core behaviour: commands, scripts, results, streaming, routing, refusal."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
from host_processes import host_processes_with

from wasm_runner import ExecRequest, Limits, Runner
from wasm_runner.providers.base import Job
from wasm_runner.providers.native import (
    NATIVE_PROFILES,
    NativeProvider,
    SandboxPolicy,
    doctor,
    format_report,
    process_request,
)
from wasm_runner.providers.native.bwrap import find_bwrap, probe
from wasm_runner.workspace.layout import Workspace

REPO = Path(__file__).resolve().parents[4]


def _sandbox_problem() -> str | None:
    path = find_bwrap()
    if path is None:
        return "bubblewrap is not installed (run scripts/install-native.sh as root)"
    return probe(path)


SANDBOX_PROBLEM = _sandbox_problem()
needs_sandbox = pytest.mark.skipif(SANDBOX_PROBLEM is not None, reason=f"no usable sandbox: {SANDBOX_PROBLEM}")


@pytest.fixture(scope="module")
def native_runner(tmp_path_factory):
    with Runner(tmp_path_factory.mktemp("native"), isolation="in-process", providers=[NativeProvider()]) as runner:
        yield runner


def _run(provider: NativeProvider, workspace: Workspace, request: ExecRequest, **job_fields):
    return provider.execute(Job(request, workspace, None, **job_fields))


@needs_sandbox
def test_command_argv_runs_in_the_workspace_with_arguments_untouched(native_runner):
    session = native_runner.session()
    session.workspace.ensure()
    (session.path / "in.txt").write_text("x")
    result = session.run_sync(process_request("sh", ["-c", 'pwd; printf "%s|" "$@"; ls', "sh", "a b", "$HOME", "*"]))
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "/workspace\na b|$HOME|*|in.txt\n"
    assert result.isolation == "bubblewrap"
    assert result.enforcement in ("cgroup-v2", "cgroup-v1", "rlimit")


@needs_sandbox
def test_bash_script_reads_stdin_writes_files_and_reports_them(native_runner):
    session = native_runner.session()
    session.workspace.ensure()
    (session.path / "old.txt").write_text("old")
    (session.path / "gone.txt").write_text("bye")
    result = session.run_sync(
        "set -e\nread -r name\necho \"hello $name\" > greeting.txt\necho more >> old.txt\nrm gone.txt\n"
        "mkdir -p out && cp greeting.txt out/\ncat greeting.txt",
        language="bash", stdin="sandbox\n")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "hello sandbox\n"
    assert result.files.created == ["greeting.txt", "out/greeting.txt"]
    assert result.files.modified == ["old.txt"]
    assert result.files.deleted == ["gone.txt"]
    assert result.language == "bash"
    assert result.duration_ms > 0 and result.memory_peak_bytes and result.memory_peak_bytes > 0


@needs_sandbox
def test_sh_language_runs_posix_sh(native_runner):
    result = native_runner.run_sync('x=1; [ "$x" = 1 ] && echo "sh ok"; readlink /proc/$$/exe', language="sh")
    assert result.stdout.splitlines()[0] == "sh ok"
    assert "bash" not in result.stdout  # dash (or the system sh), not bash


@needs_sandbox
def test_large_stdin_and_script_are_passed_whole(native_runner):
    payload = "line\n" * 50_000  # 250 KB, more than a pipe buffer
    script = "# " + "x" * 200_000 + "\nwc -c"  # larger than one argv string may be
    result = native_runner.run_sync(script, language="bash", stdin=payload)
    assert result.stdout.strip() == str(len(payload))


@needs_sandbox
def test_nonzero_exit_is_a_result_not_an_exception(native_runner):
    result = native_runner.run_sync("echo oops >&2; exit 7", language="bash")
    assert result.exit_code == 7
    assert result.stderr == "oops\n"
    assert result.limit is None and result.error is None
    assert not result.ok


@needs_sandbox
def test_missing_command_is_reported_as_command_not_found(native_runner):
    result = native_runner.run_sync(ExecRequest(command=["no-such-tool-xyz", "--help"]))
    assert result.exit_code == 127
    assert result.error is not None and result.error.type == "CommandNotFound"
    assert "no-such-tool-xyz" in result.error.message


@needs_sandbox
def test_output_streams_to_the_listener_while_the_program_runs(native_runner):
    seen: list[tuple[float, str, bytes]] = []
    started = time.monotonic()
    result = native_runner.run_sync(
        "echo first; echo err >&2; sleep 1; echo second", language="bash",
        listener=lambda stream, data: seen.append((time.monotonic() - started, stream, data)))
    assert result.stdout == "first\nsecond\n" and result.stderr == "err\n"
    first = next(t for t, stream, data in seen if stream == "stdout" and b"first" in data)
    second = next(t for t, stream, data in seen if stream == "stdout" and b"second" in data)
    assert second - first >= 0.8  # "first" arrived before the program went to sleep
    assert any(stream == "stderr" for _, stream, _ in seen)


@needs_sandbox
def test_cancel_stops_the_run_and_says_so(tmp_path):
    provider = NativeProvider()
    workspace = Workspace(tmp_path).ensure()
    job = Job(ExecRequest(code="sleep 30", language="bash", limits=Limits(timeout_s=30)), workspace)
    threading.Timer(0.5, job.cancel).start()
    started = time.monotonic()
    result = provider.execute(job)
    assert result.limit == "cancelled"
    assert time.monotonic() - started < 5


@needs_sandbox
def test_timeout_is_capped_by_the_policy(tmp_path):
    provider = NativeProvider(SandboxPolicy(max_timeout_s=1.0, kill_grace_s=0.2))
    result = _run(provider, Workspace(tmp_path).ensure(),
                  ExecRequest(code="sleep 20", language="bash", limits=Limits(timeout_s=20)))
    assert result.limit == "timeout"
    assert result.duration_ms < 5000
    assert "at most 1 s" in result.error.message


@needs_sandbox
def test_caller_environment_reaches_only_the_sandboxed_program(native_runner):
    result = native_runner.run_sync('echo "$GREETING|$LD_PRELOAD"', language="bash",
                                    env={"GREETING": "hi there", "LD_PRELOAD": "/workspace/none.so"})
    # LD_PRELOAD of a missing file makes the loader complain inside the sandbox only; bwrap ran clean.
    assert "hi there|/workspace/none.so" in result.stdout
    assert result.isolation == "bubblewrap"


def test_invalid_environment_names_are_refused(tmp_path):
    result = _run(NativeProvider(), Workspace(tmp_path).ensure(),
                  ExecRequest(code="true", language="bash", env={"A=B": "x"}))
    assert result.error is not None and result.error.type == "InvalidRequest"


def test_missing_bubblewrap_is_refused_with_a_clear_error(tmp_path):
    provider = NativeProvider(bwrap=str(tmp_path / "no-bwrap"))
    workspace = Workspace(tmp_path / "ws").ensure()
    result = _run(provider, workspace, ExecRequest(code="touch ran.txt", language="bash"))
    assert result.error is not None and result.error.type == "SandboxUnavailable"
    assert "bubblewrap" in result.error.message and "install-native.sh" in result.error.message
    assert result.exit_code != 0
    assert not (workspace.files / "ran.txt").exists()  # nothing ran, not even unsandboxed


def test_unsandboxed_fallback_only_when_opted_in_and_then_says_isolation_none(tmp_path):
    provider = NativeProvider(bwrap=str(tmp_path / "no-bwrap"), allow_unsandboxed=True)
    workspace = Workspace(tmp_path / "ws").ensure()
    result = _run(provider, workspace, ExecRequest(code='pwd; echo "$HOME"; touch ran.txt', language="bash",
                                                   limits=Limits(timeout_s=5)))
    assert result.exit_code == 0, result.stderr
    assert result.isolation == "none"
    assert result.stdout.splitlines()[0] == str(workspace.files)
    assert result.files.created == ["ran.txt"]
    # limits still apply without the sandbox
    slow = _run(provider, workspace, ExecRequest(code="sleep 1000.4242 & sleep 30", language="bash",
                                                 limits=Limits(timeout_s=0.5)))
    assert slow.limit == "timeout" and slow.isolation == "none"
    time.sleep(0.2)
    assert not host_processes_with("1000.4242")


def test_process_request_builds_a_native_command_request():
    request = process_request("pandoc", ["in.md", "-o", "out.html"], stdin="x", id="r1")
    assert request.command == ["pandoc", "in.md", "-o", "out.html"]
    assert request.provider == "native" and request.stdin == "x" and request.id == "r1"
    with pytest.raises(ValueError):
        process_request("")


def test_runner_routes_shell_and_commands_to_native_and_python_to_wasm():
    runner = Runner.__new__(Runner)
    native, wasm = NativeProvider(), type("W", (), {"name": "wasm", "languages": frozenset({"python", "javascript"})})()
    runner.providers = [wasm, native]
    assert Runner.provider_for(runner, ExecRequest(code="ls", language="bash")) is native
    assert Runner.provider_for(runner, ExecRequest(command=["ls"])) is native
    assert Runner.provider_for(runner, ExecRequest(code="1", language="python")) is wasm
    assert Runner.provider_for(runner, ExecRequest(code="1", **NATIVE_PROFILES["python-data"])) is native
    assert Runner.provider_for(runner, ExecRequest(code="1", **NATIVE_PROFILES["node"])) is native


def test_default_providers_include_the_native_provider():
    from wasm_runner.runner import default_providers

    assert any(isinstance(p, NativeProvider) for p in default_providers())


def test_doctor_reports_tools_isolation_and_what_is_missing():
    report = doctor()
    assert set(report) >= {"isolation", "tools", "python_data", "missing", "profiles", "ok"}
    assert set(report["tools"]) >= {"bash", "pandoc", "tesseract", "imagemagick", "pdftotext", "node"}
    assert report["isolation"]["resource_limits"]["enforcement"] in ("cgroup-v2", "cgroup-v1", "rlimit")
    assert report["isolation"]["sandbox_usable"] == (SANDBOX_PROBLEM is None)
    for name, info in report["tools"].items():
        if not info["present"]:
            assert any(item.startswith(name) for item in report["missing"])
    text = format_report(report)
    assert "bubblewrap" in text and "pandoc" in text


def test_doctor_says_what_is_missing_without_bubblewrap(tmp_path):
    report = doctor(NativeProvider(bwrap=str(tmp_path / "none")))
    assert report["isolation"]["sandbox_usable"] is False and report["ok"] is False
    assert any("bubblewrap" in item for item in report["missing"])


def test_install_script_is_a_clear_no_op_when_not_root():
    # As root, run it as `nobody` (65534): the script must see a non-root user either way.
    as_nobody = {"user": 65534, "group": 65534, "extra_groups": []} if os.geteuid() == 0 else {}
    done = subprocess.run(["sh", str(REPO / "scripts/install-native.sh")], check=False, capture_output=True,
                          text=True, **as_nobody)
    assert done.returncode == 0
    assert "not root" in done.stderr or "apt-get" in done.stderr


@needs_sandbox
def test_session_mounts_reach_native_runs_too(tmp_path):
    """A workspace's shared/ directory (a writable session mount) is at /workspace/shared natively as in WASI."""
    from wasm_runner import Mount, Runner

    shared = tmp_path / "shared"
    shared.mkdir()
    with Runner(tmp_path / "runner", isolation="in-process") as runner:
        session = runner.session(mounts=(Mount(shared, "/workspace/shared", writable=True),))
        session.workspace.ensure()
        (session.path / "shared").mkdir()
        result = session.run_sync("echo native > shared/from-bash.txt && cat shared/from-bash.txt", language="bash")
        assert result.stdout == "native\n", result
        assert (shared / "from-bash.txt").read_text() == "native\n"
