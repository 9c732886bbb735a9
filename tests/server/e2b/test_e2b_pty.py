"""A terminal, driven by the real `e2b` SDK: an interactive bash on a pseudo-terminal of the sandbox."""

from __future__ import annotations

import pytest
from e2b import CommandExitException, PtySize, Sandbox

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_a_terminal_takes_input_and_shows_its_output(e2b_service):
    sandbox = Sandbox.create()
    try:
        seen = bytearray()
        created = sandbox.pty.create(PtySize(rows=24, cols=80))
        created.disconnect()
        terminal = sandbox.pty.connect(created.pid)  # a terminal followed again, as after a page reload
        sandbox.pty.send_stdin(terminal.pid, b"echo $((6 * 7))-from-the-terminal\n")
        sandbox.pty.send_stdin(terminal.pid, b"exit 0\n")
        result = terminal.wait(on_pty=seen.extend)
        assert b"42-from-the-terminal" in seen
        assert result.exit_code == 0
    finally:
        sandbox.kill()


def test_killing_a_terminal_ends_it(e2b_service):
    sandbox = Sandbox.create()
    try:
        terminal = sandbox.pty.create(PtySize(rows=24, cols=80))
        assert sandbox.pty.kill(terminal.pid) is True
        with pytest.raises(CommandExitException):
            terminal.wait()
    finally:
        sandbox.kill()
