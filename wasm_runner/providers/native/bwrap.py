"""The bubblewrap command line: what a native sandbox sees and which namespaces it gets.

Default policy (every field of `SandboxPolicy` can only narrow it, except the ones marked
*wider*, which are off by default and documented as such):

- the session workspace read-write at /workspace (the path the WASI guest sees), the
  session's private tmp directory read-write at /tmp (counted by the same disk quota);
- /usr and the top-level /bin, /sbin, /lib* (links or read-only binds) read-only;
  /usr/local hidden behind an empty tmpfs (host-local software is not "the system"), holding only
  links of the usual names of commands Debian renames (`fd` for `fdfind`);
- /etc: only what the tools need (dynamic linker cache, alternatives links, fontconfig,
  ImageMagick config, whose policy.xml is the sandbox's own: PDF allowed, see
  imagemagick-policy.xml), plus generated passwd/group/hosts/hostname/nsswitch.conf naming the
  sandbox user; no /home, /root, /var, /run, /sys, /srv, /mnt, /media, /opt of the host
  (only the python-data venv, read-only at /opt/python-data, and a read-only /run/wasm-runner
  holding the script of the run);
- with python-data, /usr/local/bin/pandoc a wrapper making WeasyPrint pandoc's PDF engine;
- a fresh /proc (own PID namespace) and a minimal /dev; /dev/shm a small private tmpfs;
- the root itself read-only (nothing can be written outside /workspace, /tmp, /dev/shm);
- new user namespace (uid/gid 1000 "sandbox", no capabilities, no further user namespaces,
  no new privileges); uid 1000 maps to the host user bwrap runs as: the service's own when it
  is not root, else the unprivileged sandbox user (identity.py), so a guest is never root on
  the host and files it writes belong to that user;
- a seccomp filter (syscall_filter.py) refusing the keyring, ptrace, bpf, mount-family and
  namespace calls, and setuid/setgid modes; every bind and tmpfs nosuid and nodev;
  new network (loopback only, nothing reachable), PID, IPC, UTS (hostname "sandbox") and
  cgroup namespaces; `--new-session` (no TIOCSTI injection into a terminal);
  `--die-with-parent`;
- the environment cleared and rebuilt from `sandbox_env` (15 keys with PWD) plus the
  caller's variables.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from wasm_runner.errors import SandboxPolicyError
from wasm_runner.guest import Mount
from wasm_runner.manifests import RUNTIMES_DIR
from wasm_runner.workspace.process_dirs import process_dir
from wasm_runner_protocol.guest import GUEST_TMP, GUEST_WORKSPACE

GUEST_PYTHON_DATA = "/opt/python-data"
GUEST_CODE_DIR = "/run/wasm-runner"
SANDBOX_UID = 1000
SANDBOX_USER = "sandbox"
SANDBOX_HOSTNAME = "sandbox"

TOP_LEVEL_SYSTEM = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
ETC_READ_ONLY = (  # copied into the sandbox's generated /etc
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "fonts",
    "ImageMagick-6", "ImageMagick-7", "localtime", "mime.types", "magic", "papersize",
)
"""Host /etc entries the tools need (copied where they exist); nothing else of the host's /etc."""

IMAGEMAGICK_POLICY = RUNTIMES_DIR / "native" / "imagemagick-policy.xml"
"""The sandbox's ImageMagick policy (PDF allowed; the reasoning is in the file), put in place of the host's."""
PANDOC_WRAPPER = RUNTIMES_DIR / "native" / "pandoc"
"""pandoc with WeasyPrint as its default PDF engine, shown at /usr/local/bin/pandoc with python-data."""
SYSTEM_PANDOC = "/usr/bin/pandoc"

BASE_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
RENAMED_COMMANDS = (("fd", "fdfind"), ("bat", "batcat"))
"""(the name scripts use, Debian's name): commands Debian renames for a clash with another package;
the sandbox's own /usr/local/bin links the usual name where the system lacks it."""


Bind = Mount
"""An extra host path the sandbox sees at `guest`, read-only unless `writable` (a *wider* policy)."""


@dataclass(frozen=True)
class SandboxPolicy:
    """What a native sandbox may see and do. Defaults are the narrow policy described above."""

    network: bool = False
    """*Wider*: share the host's network namespace (off: own namespace, loopback only)."""
    binds: tuple[Bind, ...] = ()
    """*Wider*: extra host paths, read-only."""
    show_usr_local: bool = False
    """*Wider*: show the host's /usr/local (hidden by default)."""
    max_processes: int = 256
    """Processes and threads the run may have at once (cgroup pids.max, else RLIMIT_NPROC)."""
    cpus: float | None = 1.0
    """CPU share of the run (cgroup CPU quota); None leaves it unlimited."""
    max_timeout_s: float = 300.0
    """Cap on `limits.timeout_s` for native runs."""
    kill_grace_s: float = 1.0
    """Time between SIGTERM and SIGKILL when a run is stopped."""
    shm_bytes: int = 64 * 1024 * 1024
    """Size of the private /dev/shm tmpfs."""

    def __post_init__(self) -> None:
        if self.max_processes < 1:
            raise SandboxPolicyError("max_processes must be at least 1")
        if self.cpus is not None and self.cpus <= 0:
            raise SandboxPolicyError("cpus must be positive (or None for unlimited)")
        if not 0 < self.max_timeout_s <= 3600:
            raise SandboxPolicyError("max_timeout_s must be in (0, 3600]")
        if not 0 <= self.kill_grace_s <= 10:
            raise SandboxPolicyError("kill_grace_s must be in [0, 10]")


def find_bwrap(explicit: str | None = None) -> str | None:
    """The bwrap executable: `explicit`, $WASM_RUNNER_BWRAP, or `bwrap` on PATH."""
    candidate = explicit or os.environ.get("WASM_RUNNER_BWRAP") or shutil.which("bwrap")
    if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
        return candidate
    return None


def probe(bwrap: str, as_user: tuple[int, int] | None = None) -> str | None:
    """None when bwrap can make the namespaces the policy needs here, else why not (its stderr).

    `as_user` (uid, gid) runs the probe as that user, as a root service runs its sandboxes:
    unprivileged user namespaces may be allowed to root alone."""
    prefix = []
    if as_user is not None:
        prefix = [shutil.which("setpriv", path="/usr/bin:/bin") or "setpriv", f"--reuid={as_user[0]}", f"--regid={as_user[1]}",
                  "--clear-groups", "--"]
    argv = [*prefix, bwrap, "--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
            "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--disable-userns",
            "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--ro-bind", "/", "/", "--", "/bin/true"]
    try:
        done = subprocess.run(argv, check=False, capture_output=True, timeout=10, env={"PATH": BASE_PATH})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"could not run {bwrap}: {exc}"
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip() or f"exit status {done.returncode}"
        return (f"bubblewrap cannot create the sandbox's namespaces here ({message}); "
                "user namespaces may be disabled (sysctl kernel.unprivileged_userns_clone / "
                "user.max_user_namespaces, or an AppArmor restriction)")
    return None


_ETC_GENERATED = {
    "passwd": (f"root:x:0:0:root:/nonexistent:/usr/sbin/nologin\n"
               f"{SANDBOX_USER}:x:{SANDBOX_UID}:{SANDBOX_UID}:sandbox:{GUEST_WORKSPACE}:/bin/bash\n"
               "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"),
    "group": f"root:x:0:\n{SANDBOX_USER}:x:{SANDBOX_UID}:\nnogroup:x:65534:\n",
    "hosts": f"127.0.0.1\tlocalhost {SANDBOX_HOSTNAME}\n::1\tlocalhost ip6-localhost ip6-loopback\n",
    "hostname": f"{SANDBOX_HOSTNAME}\n",
    "nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\nhosts: files\nnetworks: files\n"
                     "protocols: files\nservices: files\n",
}
_etc_lock = threading.Lock()
_etc_current: tuple[tuple[tuple[str, int, int], ...], Path] | None = None


def _etc_signature() -> tuple[tuple[str, int, int], ...]:
    signature: list[tuple[str, int, int]] = []
    for name in ETC_READ_ONLY:
        try:
            st = os.lstat(f"/etc/{name}")
        except OSError:
            continue
        signature.append((name, st.st_mtime_ns, st.st_size))
    return tuple(signature)


def etc_dir() -> Path:
    """The sandbox's whole /etc, as one host directory bound read-only (one mount, not twenty).

    It holds the generated passwd/group/hosts/hostname/nsswitch.conf naming the sandbox user
    and copies of the few host entries in ETC_READ_ONLY (links copied as links). It is rebuilt
    when one of those host entries changes (checked by mtime and size at each run).
    """
    global _etc_current
    signature = _etc_signature()
    with _etc_lock:
        if _etc_current is not None and _etc_current[0] == signature and _etc_current[1].is_dir():
            return _etc_current[1]
        root = process_dir("etc", 0o755)
        for name in ETC_READ_ONLY:
            host = Path("/etc") / name
            try:
                if host.is_symlink() or not host.is_dir():
                    shutil.copy2(host, root / name, follow_symlinks=False)
                else:
                    shutil.copytree(host, root / name, symlinks=True)
            except OSError:
                continue  # absent or unreadable here: the sandbox does without it
        for version in ("ImageMagick-6", "ImageMagick-7"):
            if (root / version).is_dir() and not (root / version).is_symlink():
                (root / version / "policy.xml").unlink(missing_ok=True)
                shutil.copyfile(IMAGEMAGICK_POLICY, root / version / "policy.xml")
                (root / version / "policy.xml").chmod(0o444)  # whatever the service's umask
        for name, text in _ETC_GENERATED.items():
            (root / name).write_text(text)
            (root / name).chmod(0o444)
        # An older copy stays until the process ends: sandboxes still running read through their bind of it.
        _etc_current = (signature, root)
        return root


def command_aliases(system_bin: str = "/usr/bin") -> list[str]:
    """bwrap options linking the usual names of renamed commands in the sandbox's empty
    /usr/local/bin (a tmpfs of its own: the host's /usr/local is untouched and unseen)."""
    args: list[str] = []
    for usual, debian in RENAMED_COMMANDS:
        if not os.path.exists(f"{system_bin}/{usual}") and os.path.exists(f"{system_bin}/{debian}"):
            args += ["--symlink", f"{system_bin}/{debian}", f"/usr/local/bin/{usual}"]
    return args


def sandbox_env(*, python_data: bool, extra: dict[str, str]) -> dict[str, str]:
    """The whole environment of a sandboxed program: an allowlist plus the caller's variables.

    14 keys here, plus PWD that bwrap's --chdir sets: 15.
    """
    path = BASE_PATH
    if python_data:
        path = f"{GUEST_PYTHON_DATA}/bin:{path}"
    env = {
        "PATH": path,
        "HOME": GUEST_WORKSPACE,
        "USER": SANDBOX_USER,
        "SHELL": "/bin/bash",
        "TMPDIR": GUEST_TMP,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TERM": "dumb",
        "TZ": "UTC",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONDONTWRITEBYTECODE": "1",  # no __pycache__ in the workspace's file changes
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": f"{GUEST_TMP}/.matplotlib",
        "XDG_CACHE_HOME": f"{GUEST_TMP}/.cache",
    }
    env.update(extra)
    return env


def argv(
    bwrap: str,
    policy: SandboxPolicy,
    *,
    workspace: Path,
    tmp: Path,
    env: dict[str, str],
    command: list[str],
    python_data: Path | None = None,
    code_fd: int | None = None,
    code_name: str | None = None,
    status_fd: int | None = None,
    seccomp_fd: int | None = None,
    relay: Callable[[str], str] | None = None,
    data_files: Sequence[tuple[int, str]] = (),
) -> list[str]:
    """The full bwrap argv running `command` under `policy`."""
    return [bwrap, *options(policy, workspace=workspace, tmp=tmp, env=env, python_data=python_data, code_fd=code_fd,
                            code_name=code_name, status_fd=status_fd, seccomp_fd=seccomp_fd, relay=relay,
                            data_files=data_files),
            "--", *command]


def options(
    policy: SandboxPolicy,
    *,
    workspace: Path,
    tmp: Path,
    env: dict[str, str],
    python_data: Path | None = None,
    code_fd: int | None = None,
    code_name: str | None = None,
    status_fd: int | None = None,
    seccomp_fd: int | None = None,
    relay: Callable[[str], str] | None = None,
    data_files: Sequence[tuple[int, str]] = (),
    symlinks: Sequence[tuple[str, str]] = (),
    cwd: str = GUEST_WORKSPACE,
) -> list[str]:
    """bwrap's options for `policy` (everything before `--` and the command).

    `data_files` are (descriptor, guest path) pairs shown read-only, like the code file;
    `symlinks` are (target, guest path) links made in the sandbox's read-only root.
    `relay` maps each host source path to the path bwrap mounts it from (see identity.py);
    the provider passes these options through `--args FD`, so the sandbox's view of its own
    init process (/proc/1/cmdline) holds none of them.
    """
    def source(path: Path | str) -> str:
        return relay(str(path)) if relay is not None else str(path)

    args = [
        "--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--disable-userns",
        "--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try",
        "--hostname", SANDBOX_HOSTNAME,
        "--die-with-parent", "--new-session", "--cap-drop", "ALL",
        "--ro-bind", "/usr", "/usr",
    ]
    if not policy.network:
        args.append("--unshare-net")
    if not policy.show_usr_local and os.path.isdir("/usr/local"):
        args += ["--tmpfs", "/usr/local"]
        args += command_aliases()
        if python_data is not None and os.path.exists(SYSTEM_PANDOC) and os.access(PANDOC_WRAPPER, os.X_OK):
            args += ["--ro-bind", source(PANDOC_WRAPPER), "/usr/local/bin/pandoc"]
    for name in TOP_LEVEL_SYSTEM:
        host = f"/{name}"
        if os.path.islink(host):
            args += ["--symlink", os.readlink(host), host]
        elif os.path.isdir(host):
            args += ["--ro-bind", host, host]
    args += ["--ro-bind", source(etc_dir()), "/etc"]
    # Every bind bwrap makes is nosuid and nodev (bubblewrap adds both to each bind and tmpfs).
    args += [
        "--proc", "/proc",
        "--dev", "/dev",
        "--perms", "1777", "--size", str(policy.shm_bytes), "--tmpfs", "/dev/shm",
        "--bind", source(workspace), GUEST_WORKSPACE,
        "--bind", source(tmp), GUEST_TMP,
        "--symlink", "../tmp", "/var/tmp",
    ]
    if python_data is not None:
        args += ["--ro-bind", source(python_data), GUEST_PYTHON_DATA]
    for bind in policy.binds:
        args += ["--bind" if bind.writable else "--ro-bind", source(bind.host), str(bind.guest)]
    if code_fd is not None and code_name is not None:
        args += ["--ro-bind-data", str(code_fd), f"{GUEST_CODE_DIR}/{code_name}"]
    for fd, guest in data_files:
        args += ["--ro-bind-data", str(fd), guest]
    for target, guest in symlinks:
        args += ["--symlink", target, guest]
    if status_fd is not None:
        args += ["--json-status-fd", str(status_fd)]
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    args += ["--chdir", cwd, "--clearenv"]  # (the session's working directory, under /workspace)
    for key, value in env.items():
        args += ["--setenv", key, value]
    args += ["--remount-ro", "/"]
    return args
