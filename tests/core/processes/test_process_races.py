"""A start racing the end of its session's processes: refused, or ended at once and waited for;
never left running with nothing that would end it."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from host_processes import host_processes_running

from wasm_runner import ExecRequest, Runner
from wasm_runner.processes import ProcessesClosed, ProcessManager
from wasm_runner.providers.native.bwrap import find_bwrap, probe

_path = find_bwrap()
SANDBOX_PROBLEM = "bubblewrap is not installed (run scripts/install-native.sh)" if _path is None else probe(_path)
pytestmark = pytest.mark.skipif(SANDBOX_PROBLEM is not None, reason=f"no usable sandbox: {SANDBOX_PROBLEM}")


class SlowSpawn:
    """The native provider, whose spawn first waits until the test lets it go on."""

    def __init__(self, provider: Any) -> None:
        self._provider = provider
        self.spawning = threading.Event()
        self.go_on = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._provider, name)

    def spawn(self, *args: Any, **kwargs: Any) -> Any:
        self.spawning.set()
        self.go_on.wait(10)
        return self._provider.spawn(*args, **kwargs)


@pytest.fixture
def slow(tmp_path) -> Any:
    with Runner(tmp_path / "data", isolation="in-process") as runner:
        session = runner.session("racing")
        provider = SlowSpawn(runner.provider_for(ExecRequest(command=["true"], provider="native")))
        yield session, ProcessManager(lambda: provider, session.workspace), provider


def start_in_background(manager: ProcessManager, marker: str) -> tuple[threading.Thread, list[object]]:
    outcome: list[object] = []

    def start() -> None:
        try:
            outcome.append(manager.start(ExecRequest(command=["sleep", marker], provider="native")))
        except ProcessesClosed as exc:
            outcome.append(exc)

    thread = threading.Thread(target=start)
    thread.start()
    return thread, outcome


def close_in_background(manager: ProcessManager, final: bool) -> threading.Thread:
    thread = threading.Thread(target=manager.close, args=("stopped: the session was deleted", 0.2, final))
    thread.start()
    return thread


@pytest.mark.parametrize("final", [True, False], ids=["delete", "hibernate"])
def test_a_start_under_way_when_the_processes_close_is_ended_at_once_and_waited_for(slow, final: bool) -> None:
    _, manager, provider = slow
    marker = "4321.0625" if final else "4321.1875"
    starting, outcome = start_in_background(manager, marker)
    assert provider.spawning.wait(10)  # the start is setting its sandbox up
    closing = close_in_background(manager, final)
    time.sleep(0.1)
    assert closing.is_alive()  # the close waits for the start under way
    provider.go_on.set()
    starting.join(10)
    closing.join(15)
    assert not closing.is_alive()
    assert isinstance(outcome[0], ProcessesClosed) and "stopped as it started" in str(outcome[0])
    assert host_processes_running(["sleep", marker]) == []  # ended before the close returned
    (process,) = manager.all()
    assert process.state == "killed"
    if final:
        with pytest.raises(ProcessesClosed, match="ended for good"):
            manager.start(ExecRequest(command=["sleep", marker], provider="native"))
    else:  # after hibernation the session's processes may start again
        again = manager.start(ExecRequest(command=["sleep", marker], provider="native"))
        assert again.state in ("starting", "running")
        manager.close("stopped: the test ended", 0)
        assert host_processes_running(["sleep", marker]) == []


def test_a_start_after_the_session_was_destroyed_is_refused_even_with_no_process_before(tmp_path) -> None:
    with Runner(tmp_path / "data", isolation="in-process") as runner:
        session = runner.session("gone")
        session.destroy()
        with pytest.raises(ProcessesClosed, match="deleted"):
            session.start_process(["sleep", "4321.3125"])
        assert host_processes_running(["sleep", "4321.3125"]) == []
        assert not session.workspace.root.exists()
