"""Web starters: a session gets a project whose node_modules resolve inside the sandbox at once,
read-only and shared, counted once on the host and not per session; a stale install is not used."""

from __future__ import annotations

import json
import os

import pytest

from wasm_runner import Limits, Runner
from wasm_runner.errors import InvalidRequestError
from wasm_runner.providers.native import NativeProvider
from wasm_runner.providers.native.bwrap import find_bwrap, probe
from wasm_runner.providers.native.doctor import doctor, format_report
from wasm_runner.providers.native.web_starters import (
    GUEST_STARTERS,
    MARKER,
    find_starter,
    starter_catalog,
    starter_names,
)

_path = find_bwrap()
SANDBOX_PROBLEM = "bubblewrap is not installed (run scripts/install-native.sh)" if _path is None else probe(_path)
needs_sandbox = pytest.mark.skipif(SANDBOX_PROBLEM is not None, reason=f"no usable sandbox: {SANDBOX_PROBLEM}")
needs_starters = pytest.mark.skipif(any(find_starter(n) is None for n in starter_names()),
                                    reason="the web starters are not installed (wasm-runner prepare)")


@pytest.fixture
def runner(tmp_path):
    with Runner(tmp_path, isolation="in-process", providers=[NativeProvider()]) as runner:
        yield runner


def test_both_starters_ship_with_a_pinned_lockfile() -> None:
    assert starter_names() == ["tanstack-start", "vite-react"]


@needs_starters
def test_a_session_from_a_starter_holds_the_project_and_only_a_link_to_the_shared_node_modules(runner) -> None:
    session = runner.session(starter="vite-react")
    files = session.workspace.files
    assert (files / "package.json").is_file() and (files / "src" / "App.tsx").is_file()
    assert os.readlink(files / "node_modules") == f"{GUEST_STARTERS}/vite-react/node_modules"
    used_bytes, _ = session.workspace.usage()
    installed = find_starter("vite-react")
    assert installed is not None and used_bytes < 64 * 1024 < installed.bytes  # the session pays for its files only


@needs_sandbox
@needs_starters
def test_the_starters_packages_resolve_in_the_sandbox_and_cannot_be_changed(runner) -> None:
    session = runner.session(starter="tanstack-start")
    result = session.run_sync(
        "node -e \"console.log(require.resolve('react'), require('react').version)\"; "
        "echo x >> node_modules/react/index.js; echo write=$?; grep ' /opt/web-starters ' /proc/self/mountinfo",
        language="bash", limits=Limits(timeout_s=60))
    assert result.ok, result
    mount = next(line.split() for line in result.stdout.splitlines() if " /opt/web-starters " in line)
    assert "ro" in mount[5].split(","), mount  # a read-only mount, whatever the files' modes
    assert f"{GUEST_STARTERS}/tanstack-start/node_modules/react/index.js 19.3.1" in result.stdout
    assert "write=1" in result.stdout  # read-only files on a read-only mount
    installed = find_starter("tanstack-start")
    assert installed is not None and not (installed.path / "node_modules/react/index.js").read_text().endswith("x\n")


def test_a_starter_and_a_template_together_or_an_unknown_starter_are_refused(runner) -> None:
    with pytest.raises(InvalidRequestError, match="not both"):
        runner.session(starter="vite-react", template="mine")
    with pytest.raises(InvalidRequestError, match="vite-react"):
        runner.session(starter="../../etc")


@needs_starters
def test_an_install_made_from_another_lockfile_is_not_used(tmp_path) -> None:
    installed = find_starter("vite-react")
    assert installed is not None
    stale = tmp_path / "vite-react"
    (stale / "node_modules").mkdir(parents=True)
    marker = json.loads((installed.path / MARKER).read_text())
    (stale / MARKER).write_text(json.dumps(marker))
    assert find_starter("vite-react", tmp_path) is not None  # the same lockfile: used
    (stale / MARKER).write_text(json.dumps({**marker, "digest": "0" * 64 + "-node24.19.0"}))
    assert find_starter("vite-react", tmp_path) is None  # another lockfile: installed again by prepare


def test_doctor_lists_the_starters_ready_or_not() -> None:
    report = doctor()
    assert set(report["web_starters"]) == {"vite-react", "tanstack-start"}
    text = format_report(report)
    for name, info in report["web_starters"].items():
        assert name in text
        assert info["ready"] == (find_starter(name) is not None)


def test_the_catalog_says_which_starters_are_installed_here(tmp_path, monkeypatch) -> None:
    assert {s.name for s in starter_catalog() if s.ready} == set(starter_names())  # prepared on this machine
    monkeypatch.setenv("WASM_RUNNER_WEB_STARTERS", str(tmp_path))  # a server that never ran prepare
    catalog = starter_catalog()
    assert [s.name for s in catalog] == starter_names() and not any(s.ready for s in catalog)
    assert all(s.description and s.port for s in catalog)
