"""The first scripts a user runs in a `bash` session find the tools they expect, by their usual names,
and `wasm-runner doctor` says which profile offers what."""

from __future__ import annotations

import shutil

import pytest

from wasm_runner import Limits, Runner
from wasm_runner.providers.native import NativeProvider
from wasm_runner.providers.native.bwrap import command_aliases, find_bwrap, probe
from wasm_runner.providers.native.doctor import doctor, format_report

_path = find_bwrap()
SANDBOX_PROBLEM = "bubblewrap is not installed (run scripts/install-native.sh)" if _path is None else probe(_path)
needs_sandbox = pytest.mark.skipif(SANDBOX_PROBLEM is not None, reason=f"no usable sandbox: {SANDBOX_PROBLEM}")

# (what a script types, Debian's command) for the tools scripts/install-native.sh installs
FIRST_TOOLS = [("tree --version", "tree"), ("jq --version", "jq"), ("rg --version", "rg"),
               ("fd --version", "fdfind"), ("git --version", "git"), ("curl --version", "curl"),
               ("wget --version", "wget"), ("zip -v", "zip"), ("unzip -v", "unzip"),
               ("sqlite3 --version", "sqlite3"), ("file --version", "file"), ("make --version", "make"),
               ("http --version", "http")]
MISSING = [debian for _, debian in FIRST_TOOLS if shutil.which(debian, path="/usr/bin:/bin") is None]
needs_tools = pytest.mark.skipif(bool(MISSING), reason=f"{', '.join(MISSING)} not installed "
                                                       "(scripts/install-native.sh installs them)")


@pytest.fixture(scope="module")
def bash_session(tmp_path_factory):
    with Runner(tmp_path_factory.mktemp("first-script"), isolation="in-process",
                providers=[NativeProvider()]) as runner:
        session = runner.session()
        session.workspace.ensure()
        yield lambda script: session.run_sync(script, language="bash", limits=Limits(timeout_s=60))


@needs_sandbox
@needs_tools
def test_the_try_it_script_succeeds_as_written(bash_session):
    result = bash_session("whoami; hostname; uname -a; pwd; tree")
    assert result.exit_code == 0 and result.error is None, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == ["sandbox", "sandbox"] and lines[2].startswith("Linux sandbox ") and lines[3] == "/workspace"
    assert lines[4:] == [".", "", "0 directories, 0 files"]


@needs_sandbox
@needs_tools
@pytest.mark.parametrize("command", [typed for typed, _ in FIRST_TOOLS], ids=[d for _, d in FIRST_TOOLS])
def test_each_first_tool_runs_by_its_usual_name(bash_session, command):
    result = bash_session(command)
    assert result.exit_code == 0, (command, result.stderr)
    assert result.stdout.strip(), command


def test_renamed_commands_get_their_usual_name_only_where_the_system_lacks_it(tmp_path):
    (tmp_path / "fdfind").touch()
    assert command_aliases(str(tmp_path)) == ["--symlink", f"{tmp_path}/fdfind", "/usr/local/bin/fd"]
    (tmp_path / "fd").touch()  # the system has its own fd: left alone
    assert command_aliases(str(tmp_path)) == []


@needs_tools
def test_doctor_lists_what_each_profile_offers():
    report = doctor()
    offers = report["offers"]
    assert set(offers) >= {"python", "javascript", "typescript", "python-data", "node", "typescript-native", "bun",
                           "bash"}
    bash = " ".join(offers["bash"])
    for name in ("tree", "jq", "ripgrep", "fd", "git", "curl", "wget", "zip", "unzip", "sqlite3", "file", "make"):
        assert f"{name} " in bash + " ", name
    assert not any("tree" in item for item in offers["python"])  # the WebAssembly tier runs no tools
    if report["python_data"]["ready"]:
        assert "pandas" in offers["python-data"][0] and offers["python-data"][1:] == offers["bash"]
    text = format_report(report)
    assert "what each profile offers:" in text and "\n  bash: bash " in text
