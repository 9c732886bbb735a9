"""What a native sandbox sees: its own identity, its workspace, nothing else of the host."""

from __future__ import annotations

import os
import socket
import uuid

import pytest

from wasm_runner import Limits, Runner
from wasm_runner.providers.native import NativeProvider, SandboxPolicy, process_request
from wasm_runner.providers.native.bwrap import find_bwrap, probe, sandbox_env
from wasm_runner.providers.native.egress import CA_VARIABLES

_path = find_bwrap()
SANDBOX_PROBLEM = "bubblewrap is not installed (run scripts/install-native.sh)" if _path is None else probe(_path)
pytestmark = pytest.mark.skipif(SANDBOX_PROBLEM is not None, reason=f"no usable sandbox: {SANDBOX_PROBLEM}")


@pytest.fixture(scope="module")
def native_runner(tmp_path_factory):
    with Runner(tmp_path_factory.mktemp("native-policy"), isolation="in-process", providers=[NativeProvider()]) as runner:
        yield runner


def test_classic_check_shows_the_sandbox_identity_and_workspace_not_the_host(native_runner):
    session = native_runner.session()
    session.workspace.ensure()
    (session.path / "data").mkdir()
    (session.path / "data" / "numbers.csv").write_text("1,2\n")
    result = session.run_sync("whoami; hostname; uname -n; pwd; id -u; ls -R", language="bash")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:5] == ["sandbox", "sandbox", "sandbox", "/workspace", "1000"]
    assert ".:" in lines and "data" in lines and "./data:" in lines and "numbers.csv" in lines
    host = socket.gethostname()
    if host != "sandbox":
        assert host not in result.stdout
    assert str(session.path) not in result.stdout


def test_only_the_allowlisted_environment_and_the_callers_variables_are_set(native_runner, monkeypatch):
    secret = f"host-secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("WASM_RUNNER_TEST_SECRET", secret)
    result = native_runner.run_sync(process_request("cat", ["/proc/self/environ"], env={"MY_VAR": "42"}))
    env = dict(item.split("=", 1) for item in result.stdout.split("\0") if item)
    allowlist = set(sandbox_env(python_data=True, extra={})) | {"PWD"}  # PWD: set by bwrap --chdir
    assert len(allowlist) <= 15
    # under deny too, the way to the egress proxy (which refuses everything, naming the policy)
    proxy = {name for base in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY") for name in (base, base.lower())}
    assert set(env) <= allowlist | proxy | {"NODE_USE_ENV_PROXY", *CA_VARIABLES} | {"MY_VAR"}
    assert env["MY_VAR"] == "42" and env["HOME"] == "/workspace" and env["USER"] == "sandbox"
    assert secret not in result.stdout


def test_host_secrets_shadow_root_home_and_environment_are_out_of_reach(native_runner, monkeypatch):
    secret = f"host-secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("WASM_RUNNER_TEST_SECRET", secret)
    result = native_runner.run_sync(
        "cat /etc/shadow || echo no-shadow\n"
        "ls /root || echo no-root\n"
        "ls /home || echo no-home\n"
        "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'\n"
        "ls /etc\n"
        "cat /proc/1/cmdline | tr '\\0' ' '; echo\n"
        "ls /proc | grep -c '^[0-9]'\n",
        language="bash")
    out = result.stdout
    assert "no-shadow" in out and "no-root" in out and "no-home" in out
    assert secret not in out and secret not in result.stderr
    assert "shadow" not in out.split("no-shadow")[1]  # /etc holds only the few files the tools need
    pid_count = int(out.strip().splitlines()[-1])
    assert pid_count < 10  # own PID namespace: the host's processes are not there


def test_network_is_denied_both_to_localhost_and_to_names(native_runner):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    try:
        result = native_runner.run_sync(
            f"(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo local-connected || echo local-refused\n"
            "getent hosts pypi.org >/dev/null && echo name-resolved || echo name-failed\n"
            "(exec 3<>/dev/tcp/1.1.1.1/80) 2>/dev/null && echo internet || echo no-internet\n"
            "ls /sys/class/net 2>/dev/null; cat /proc/net/dev | tail -n +3 | cut -d: -f1\n",
            language="bash", limits=Limits(timeout_s=20))
        with pytest.raises(socket.timeout):
            listener.accept()  # nothing reached the host's listener
    finally:
        listener.close()
    out = result.stdout
    assert "local-refused" in out and "name-failed" in out and "no-internet" in out
    interfaces = [line.strip() for line in out.splitlines()[3:] if line.strip()]
    assert interfaces == ["lo"]


def test_nothing_can_be_written_outside_workspace_and_tmp(native_runner):
    result = native_runner.run_sync(
        "for p in /x /etc/x /usr/x /bin/x /opt/x /var/x /run/x /proc/x /sys/x /home/x /root/x; do\n"
        "  touch \"$p\" 2>/dev/null && echo \"wrote $p\"\n"
        "done\n"
        "touch /workspace/in.txt /tmp/in.txt /dev/shm/in.txt && echo inside-ok\n",
        language="bash")
    assert "wrote" not in result.stdout
    assert "inside-ok" in result.stdout
    assert result.files.created == ["in.txt"]
    assert not os.path.exists("/x")


def test_no_capabilities_no_new_privileges_and_a_new_session(native_runner):
    result = native_runner.run_sync(
        "grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs)' /proc/self/status\n"
        "unshare --user true 2>/dev/null && echo nested-userns || echo no-nested-userns\n",
        language="bash")
    out = result.stdout
    assert "CapEff:\t0000000000000000" in out and "CapPrm:\t0000000000000000" in out
    assert "CapBnd:\t0000000000000000" in out
    assert "NoNewPrivs:\t1" in out
    assert "no-nested-userns" in out


def test_tiocsti_terminal_injection_has_no_terminal_to_inject_into(native_runner):
    code = (
        "import fcntl, os, termios\n"
        "try:\n"
        "    os.open('/dev/tty', os.O_RDWR); print('tty-opened')\n"
        "except OSError as e:\n"
        "    print('no-tty', e.errno)\n"
        "for fd in (0, 1, 2):\n"
        "    try:\n"
        "        fcntl.ioctl(fd, termios.TIOCSTI, b'x'); print('injected', fd)\n"
        "    except OSError as e:\n"
        "        print('blocked', fd, e.errno)\n"
        "print('session', os.getsid(0))\n"
    )
    result = native_runner.run_sync(process_request("python3", ["-c", code]))
    out = result.stdout
    assert "tty-opened" not in out and "injected" not in out, out
    assert out.count("blocked") == 3
    assert "session 1\n" in out  # a session made inside the sandbox (--new-session), not the host's


def test_policy_can_be_narrowed_and_only_widened_explicitly(tmp_path):
    with pytest.raises(ValueError):
        SandboxPolicy(max_processes=0)
    with pytest.raises(ValueError):
        SandboxPolicy(max_timeout_s=0)
    from wasm_runner.providers.native.bwrap import Bind, argv

    narrow = argv("/usr/bin/bwrap", SandboxPolicy(), workspace=tmp_path, tmp=tmp_path, env={}, command=["true"])
    assert "--unshare-net" in narrow and "--new-session" in narrow and "--die-with-parent" in narrow
    assert ["--cap-drop", "ALL"] == narrow[narrow.index("--cap-drop"):narrow.index("--cap-drop") + 2]
    assert "/home" not in narrow and "/root" not in narrow
    wide = argv("/usr/bin/bwrap", SandboxPolicy(network=True, binds=(Bind(tmp_path, "/data"),)),
                workspace=tmp_path, tmp=tmp_path, env={}, command=["true"])
    assert "--unshare-net" not in wide and "/data" in wide
    with pytest.raises(ValueError):
        SandboxPolicy(binds=(Bind(tmp_path, "/workspace"),))
