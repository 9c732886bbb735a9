"""The native sandbox as an attacker meets it: an unprivileged host user, no setuid file left
behind, a seccomp filter on the dangerous calls, no host path in its own processes."""

from __future__ import annotations

import ctypes
import os
import platform
import stat
import uuid
from pathlib import Path

import pytest

from wasm_runner import ExecRequest, Runner
from wasm_runner.providers.native import NativeProvider
from wasm_runner.providers.native.bwrap import find_bwrap, probe
from wasm_runner.providers.native.identity import SandboxIdentity, sandbox_identity
from wasm_runner.providers.native.ownership import normalize

bwrap_path = find_bwrap()
SANDBOX_PROBLEM = "bubblewrap is not installed" if bwrap_path is None else probe(bwrap_path)
needs_sandbox = pytest.mark.skipif(SANDBOX_PROBLEM is not None, reason=f"no usable sandbox: {SANDBOX_PROBLEM}")
x86_64 = pytest.mark.skipif(platform.machine() != "x86_64", reason="syscall numbers below are x86_64's")


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    with Runner(tmp_path_factory.mktemp("hardening"), isolation="in-process", providers=[NativeProvider()]) as runner:
        yield runner


def _bash(session, script: str, **fields):
    result = session.run_sync(script, language="bash", **fields)
    assert result.error is None or result.error.type != "SandboxError", result.error
    return result


def _tree(root: Path):
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            yield Path(dirpath) / name


@needs_sandbox
def test_guest_is_unprivileged_on_the_host_and_owns_what_it_writes(runner):
    identity = sandbox_identity()
    assert isinstance(identity, SandboxIdentity) and identity.uid != 0 and identity.gid != 0
    session = runner.session()
    session.workspace.ensure()
    result = _bash(session, "id -u; echo x > mine.txt; echo y > /tmp/t.txt")
    assert result.stdout == "1000\n"
    for path in (session.path / "mine.txt", session.workspace.tmp / "t.txt"):
        st = path.lstat()
        assert (st.st_uid, st.st_gid) == (identity.uid, identity.gid)
    if os.geteuid() == 0:
        assert identity.dropped
        # A file the service (root) wrote between runs stays writable by the next run.
        (session.path / "from-api.txt").write_text("api\n")
        appended = _bash(session, "echo guest >> from-api.txt && cat from-api.txt")
        assert appended.exit_code == 0, appended.stderr
        assert appended.stdout == "api\nguest\n"


@needs_sandbox
def test_setuid_copy_leaves_no_setuid_file_and_nothing_owned_by_root(runner):
    session = runner.session()
    result = _bash(session, (
        "cp /usr/bin/id s; chmod 6755 s; chmod u+s s; chmod g+s s\n"
        "install -m 6755 /usr/bin/id t 2>/dev/null\n"
        "python3 -c \"import os; os.close(os.open('u', os.O_CREAT | os.O_WRONLY, 0o6755))\" 2>/dev/null\n"
        "mkdir d; chmod 2775 d; cp /usr/bin/id /tmp/s; chmod 4755 /tmp/s\n"
        "ls -l s"))
    assert "s" in result.stdout
    found = list(_tree(session.path)) + list(_tree(session.workspace.tmp))
    assert session.path / "s" in found
    for path in found:
        st = path.lstat()
        assert not st.st_mode & (stat.S_ISUID | stat.S_ISGID), f"{path} kept a special bit: {oct(st.st_mode)}"
        assert st.st_uid != 0 or os.geteuid() != 0, f"{path} is owned by root"


def test_host_walk_clears_special_bits_and_removes_device_nodes(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    setuid = tmp_path / "a" / "b" / "s"
    setuid.write_bytes(b"x")
    setuid.chmod(0o6755)
    (tmp_path / "g").mkdir()
    (tmp_path / "g").chmod(0o2755)
    target = tmp_path.parent / f"outside-{uuid.uuid4().hex}"
    target.write_bytes(b"y")
    target.chmod(0o4755)
    (tmp_path / "link").symlink_to(target)
    if os.geteuid() == 0:
        os.mknod(tmp_path / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    deep = tmp_path / "deep"
    deep.mkdir()
    current = os.open(deep, os.O_RDONLY)
    for _ in range(300):  # deeper than any path a walk by name could open
        os.mkdir("d" * 250, dir_fd=current)
        following = os.open("d" * 250, os.O_RDONLY, dir_fd=current)
        os.close(current)
        current = following
    os.close(os.open("x", os.O_CREAT | os.O_WRONLY, 0o4755, dir_fd=current))
    os.fchmod(current, 0o2755)
    os.close(current)
    report = normalize(tmp_path)
    current = os.open(deep, os.O_RDONLY)
    for _ in range(300):
        following = os.open("d" * 250, os.O_RDONLY, dir_fd=current)
        os.close(current)
        current = following
    assert stat.S_IMODE(os.fstat(current).st_mode) == 0o755
    assert stat.S_IMODE(os.stat("x", dir_fd=current).st_mode) == 0o755
    os.close(current)
    assert stat.S_IMODE(setuid.stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "g").stat().st_mode) == 0o755
    assert stat.S_IMODE(target.stat().st_mode) == 0o4755  # a link is never followed
    assert not os.path.lexists(tmp_path / "null")
    assert report.cleared >= 4
    target.unlink()


@needs_sandbox
def test_every_writable_mount_is_nosuid_and_nodev(runner):
    result = _bash(runner.session(), "cat /proc/self/mountinfo")
    options = {}
    for line in result.stdout.splitlines():
        fields = line.split()
        options[fields[4]] = set(fields[5].split(","))
    for point in ("/workspace", "/tmp", "/dev/shm", "/etc", "/usr"):
        assert {"nosuid", "nodev"} <= options[point], (point, options[point])
    assert "rw" in options["/workspace"] and "ro" in options["/"]


PROBE = r'''
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(name, number, *args):
    ctypes.set_errno(0)
    got = libc.syscall(number, *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    print(name, got, errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno()) if got < 0 else "ok")
buf = ctypes.create_string_buffer(256)
KEY = int(os.environ["HOST_KEY"])
call("keyctl_read", 250, 11, KEY, buf, 256)          # KEYCTL_READ of the host's key
call("keyctl_get_id", 250, 0, -4, 0)                  # KEYCTL_GET_KEYRING_ID of the user keyring
call("add_key", 248, b"user", b"guest-key", b"v", 1, -4)
call("request_key", 249, b"user", b"wasm-runner-host-key", None, 0)
call("ptrace", 101, 0, 0, 0, 0)                       # PTRACE_TRACEME
call("bpf", 321, 0, None, 0)
call("perf_event_open", 298, None, 0, -1, -1, 0)
call("userfaultfd", 323, 0)
call("io_uring_setup", 425, 1, None)
call("mount", 165, b"none", b"/tmp", b"tmpfs", 0, None)
call("umount2", 166, b"/tmp", 0)
call("pivot_root", 155, b"/tmp", b"/tmp")
call("open_tree", 428, -100, b"/tmp", 0)
call("move_mount", 429, -100, b"/tmp", -100, b"/tmp", 0)
call("fsopen", 430, b"tmpfs", 0)
call("fsconfig", 431, 0, 0, None, None, 0)
call("fsmount", 432, 0, 0, 0)
call("fspick", 433, -100, b"/tmp", 0)
call("unshare", 272, 0x10000000)                      # CLONE_NEWUSER
call("unshare_net", 272, 0x40000000)
call("setns", 308, 0, 0)
call("clone_newuser", 56, 0x10000000 | 17, 0, 0, 0, 0)  # CLONE_NEWUSER | SIGCHLD
call("clone3", 435, None, 0)
call("kexec_load", 246, 0, 0, None, 0)
call("kexec_file_load", 320, -1, -1, 0, None, 0)
call("init_module", 175, None, 0, b"")
call("finit_module", 313, -1, b"", 0)
call("delete_module", 176, b"x", 0)
call("chmod_setuid", 90, b"/workspace/f", 0o4755)
call("fchmodat2", 452, -100, b"/workspace/f", 0o755, 0)
print("Seccomp", [l.split()[1] for l in open("/proc/self/status") if l.startswith("Seccomp:")][0])
'''


@x86_64
@needs_sandbox
def test_seccomp_refuses_each_denied_class_with_a_clear_errno(runner):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    host_key = libc.syscall(248, b"user", b"wasm-runner-host-key", b"host secret", 11, ctypes.c_long(-4))
    assert host_key > 0, f"could not add a host key (errno {ctypes.get_errno()})"
    try:
        session = runner.session()
        session.workspace.ensure()
        (session.path / "f").write_text("f")
        (session.path / "probe.py").write_text(PROBE)
        result = session.run_sync(ExecRequest(command=["/usr/bin/python3", "probe.py"], provider="native",
                                              env={"HOST_KEY": str(host_key)}))
        assert result.exit_code == 0, result.stderr
        outcome = {line.split()[0]: line.split()[-1] for line in result.stdout.splitlines()}
    finally:
        libc.syscall(250, 3, ctypes.c_long(host_key))  # KEYCTL_REVOKE
        libc.syscall(250, 9, ctypes.c_long(host_key), ctypes.c_long(-4))  # KEYCTL_UNLINK
    assert outcome.pop("Seccomp") == "2"  # a filter is loaded
    assert outcome.pop("clone3") == "ENOSYS"
    assert outcome.pop("fchmodat2") == "ENOSYS"
    assert len(outcome) == PROBE.count('\ncall("') - 2  # clone3 and fchmodat2 popped
    assert outcome == {name: "EPERM" for name in outcome}, outcome
    assert "host secret" not in result.stdout


@needs_sandbox
def test_no_host_path_in_what_a_guest_reads_of_its_processes(runner):
    session = runner.session()
    script = ("for p in /proc/[0-9]*; do cat $p/cmdline $p/environ 2>/dev/null | tr '\\0' '\\n'; done\n"
              "sleep 0.2 & cat /proc/$!/cmdline | tr '\\0' '\\n'\n")
    result = _bash(session, script)
    assert "bwrap" in result.stdout  # the sandbox's init is readable: shows `bwrap --args N -- ...`
    for host in (str(runner.data_dir), str(session.path), "wasm-runner-relay", "wasm-runner-etc", "/root"):
        assert host not in result.stdout, host


@needs_sandbox
def test_doctor_says_who_guests_run_as_and_that_the_filter_applies():
    from wasm_runner.providers.native import doctor, format_report

    report = doctor(NativeProvider())
    user, seccomp = report["isolation"]["sandbox_user"], report["isolation"]["seccomp"]
    assert user["ok"] and seccomp["ok"] and user["uid"] != 0
    assert user["dropped"] is (os.geteuid() == 0)
    text = format_report(report)
    assert "sandbox user:" in text and "seccomp:" in text


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root service drops to a sandbox user")
def test_a_root_service_without_its_sandbox_user_refuses_to_run_guests(tmp_path, monkeypatch):
    monkeypatch.setenv("WASM_RUNNER_SANDBOX_USER", f"no-such-user-{uuid.uuid4().hex[:8]}")
    with Runner(tmp_path / "data", isolation="in-process", providers=[NativeProvider()]) as runner:
        result = runner.run_sync("id -u", language="bash")
    assert result.exit_code != 0 and result.stdout == ""
    assert result.error.type == "SandboxUnavailable"
    assert "useradd" in result.error.message and "install-native.sh" in result.error.message


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root service drops to a sandbox user")
def test_the_unsandboxed_fallback_of_a_root_service_still_runs_as_the_sandbox_user(tmp_path):
    identity = sandbox_identity()
    assert isinstance(identity, SandboxIdentity)
    provider = NativeProvider(bwrap=str(tmp_path / "no-bwrap"), allow_unsandboxed=True)
    with Runner(tmp_path / "data", isolation="in-process", providers=[provider]) as runner:
        session = runner.session()
        session.workspace.ensure()
        (session.path / "from-api.txt").write_text("api\n")
        result = session.run_sync("id -u; echo more >> from-api.txt; touch new.txt", language="bash")
    assert result.isolation == "none" and result.exit_code == 0, result.stderr
    assert result.stdout == f"{identity.uid}\n"
    assert (session.path / "new.txt").stat().st_uid == identity.uid
    assert (session.path / "from-api.txt").read_text() == "api\nmore\n"


def test_without_libseccomp_bindings_the_sandbox_is_unusable_with_a_clear_message(tmp_path, monkeypatch):
    import sys

    from wasm_runner.providers.native import syscall_filter

    monkeypatch.setenv("WASM_RUNNER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(sys.modules, "seccomp", None)  # `import seccomp` fails here
    monkeypatch.setattr(syscall_filter, "SYSTEM_PYTHONS", (str(tmp_path / "no-python"),))
    with pytest.raises(syscall_filter.FilterUnavailable, match="python3-seccomp"):
        syscall_filter.ensure_program()
    if SANDBOX_PROBLEM is None:
        _, problem, _ = NativeProvider().environment()
        assert problem is not None and "python3-seccomp" in problem


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root service relays its mounts")
def test_the_relay_binds_once_per_closed_ancestor_and_leaves_reachable_paths_alone(tmp_path):
    from wasm_runner.providers.native.identity import RelayPlan

    identity = sandbox_identity()
    assert isinstance(identity, SandboxIdentity)
    data = tmp_path / "data"
    (data / "sessions" / "s1" / "files").mkdir(parents=True)
    (data / "sessions" / "s1" / "tmp").mkdir()
    data.chmod(0o700)
    closed = tmp_path / "closed"
    (closed / "inner").mkdir(parents=True)
    closed.chmod(0o700)
    (closed / "inner").chmod(0o700)
    plan = RelayPlan(identity)
    files = plan.source(str(data / "sessions" / "s1" / "files"))
    tmp = plan.source(str(data / "sessions" / "s1" / "tmp"))
    inner = plan.source(str(closed / "inner"))
    assert plan.source("/usr/share") == "/usr/share" and plan.mounts[0][0] == str(data / "sessions")
    assert files.endswith("/s1/files") and tmp.endswith("/s1/tmp")
    assert os.path.dirname(os.path.dirname(files)) == os.path.dirname(os.path.dirname(tmp)) == plan.mounts[0][1]
    assert plan.mounts[1] == (str(closed / "inner"), inner)  # even its parent is closed: bound itself
    assert len(plan.mounts) == 2


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root service relays its mounts (and may mount here)")
def test_a_filesystem_mounted_below_a_relayed_source_is_what_the_guest_sees(tmp_path):
    import subprocess

    from wasm_runner.providers.native import Bind, SandboxPolicy

    closed = tmp_path / "closed"
    inner = closed / "outer" / "inner"
    inner.mkdir(parents=True)
    (inner / "underneath.txt").write_text("the directory below the mount")
    closed.chmod(0o700)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(inner)], check=True)
    try:
        (inner / "on-the-mount.txt").write_text("mounted")
        policy = SandboxPolicy(binds=(Bind(closed / "outer", "/data"),))
        with Runner(tmp_path / "data", isolation="in-process", providers=[NativeProvider(policy)]) as runner:
            result = runner.run_sync("ls /data/inner", language="bash")
        assert result.exit_code == 0, result.stderr
        assert result.stdout == "on-the-mount.txt\n"
    finally:
        subprocess.run(["umount", str(inner)], check=True)
