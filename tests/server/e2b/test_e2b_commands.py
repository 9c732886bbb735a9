"""envd's processes, driven by the real `e2b` SDK: commands run natively in the sandbox's session."""

from __future__ import annotations

import time

import pytest
from e2b import CommandExitException, Sandbox
from e2b.exceptions import InvalidArgumentException

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture
def sandbox(e2b_service):
    sandbox = Sandbox.create()
    yield sandbox
    sandbox.kill()


def test_foreground_run_streams_output_and_sees_the_files(sandbox):
    sandbox.files.write("/home/user/data.txt", "from the files API\n")
    out, err = [], []
    result = sandbox.commands.run("cat data.txt; echo to-stderr >&2; pwd; echo $LC_GREETING",
                                  envs={"LC_GREETING": "hi"}, on_stdout=out.append, on_stderr=err.append)
    assert result.exit_code == 0
    assert result.stdout == "from the files API\n/workspace\nhi\n"
    assert result.stderr == "to-stderr\n"
    assert "".join(out) == result.stdout and "".join(err) == result.stderr
    sandbox.commands.run("mkdir -p made && echo made-by-a-command > made/f.txt")
    assert sandbox.files.read("made/f.txt") == "made-by-a-command\n"
    assert sandbox.commands.run("pwd", cwd="/home/user/made").stdout == "/workspace/made\n"


def test_environment_names_outside_the_profiles_allowlist_are_refused(sandbox):
    with pytest.raises(InvalidArgumentException, match="does not allow setting AWS_SECRET"):
        sandbox.commands.run("env", envs={"AWS_SECRET": "x"})


def test_a_failing_command_raises_with_its_exit_code(sandbox):
    with pytest.raises(CommandExitException) as failure:
        sandbox.commands.run("echo partial; exit 3")
    assert failure.value.exit_code == 3 and failure.value.stdout == "partial\n"


def test_background_command_wait_list_stdin_and_kill(sandbox):
    handle = sandbox.commands.run("read line; echo got:$line", background=True, stdin=True)
    assert handle.pid in [p.pid for p in sandbox.commands.list()]
    sandbox.commands.send_stdin(handle.pid, "hello\n")
    result = handle.wait()
    assert result.stdout == "got:hello\n" and result.exit_code == 0

    counter = sandbox.commands.run("wc -l", background=True, stdin=True)
    counter.send_stdin("a\nb\nc\n")
    counter.close_stdin()  # EOF: wc answers
    assert counter.wait().stdout.strip() == "3"

    sleeper = sandbox.commands.run("sleep 300", background=True)
    assert sandbox.commands.kill(sleeper.pid) is True
    with pytest.raises(CommandExitException):
        sleeper.wait()
    assert sandbox.commands.kill(sleeper.pid) is False  # no longer running
    assert sleeper.pid not in [p.pid for p in sandbox.commands.list()]


def test_connect_follows_a_running_command(sandbox):
    handle = sandbox.commands.run("for i in 1 2 3 4 5 6 7 8 9 10; do echo tick$i; sleep 0.2; done",
                                  background=True)
    handle.disconnect()
    again = sandbox.commands.connect(handle.pid)
    result = again.wait()
    assert result.exit_code == 0 and "tick10" in result.stdout


def test_a_timeout_ends_the_wait(sandbox):
    started = time.monotonic()
    with pytest.raises(Exception, match="(?i)timeout|deadline"):
        sandbox.commands.run("sleep 30", timeout=1)
    assert time.monotonic() - started < 25
