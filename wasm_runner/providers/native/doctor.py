"""`wasm-runner doctor`: which native tools and isolation features this machine has.

`doctor()` returns a plain dict (JSON-ready); `format_report()` turns it into the text the
CLI prints; `main()` is a ready-made command (`python -m wasm_runner.providers.native doctor`).
"""

from __future__ import annotations

import ctypes.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from wasm_runner.providers.native.bwrap import IMAGEMAGICK_POLICY
from wasm_runner.providers.native.identity import account_name, sandbox_identity
from wasm_runner.providers.native.js_toolchain import PINS, find_js_toolchain, js_toolchain_dir
from wasm_runner.providers.native.toolchain import REQUIREMENTS, find_python_data, python_data_dir
from wasm_runner.providers.native.web_starters import find_starter, starter_names, starters_dir
from wasm_runner.workspace.disk_enforcement import disk_enforcement

TOOLS: tuple[tuple[str, tuple[str, ...], list[str], str], ...] = (
    # (name, executables tried in order, version arguments, Debian package)
    ("bash", ("bash",), ["--version"], "bash"),
    ("sh", ("sh",), [], "dash"),
    ("pandoc", ("pandoc",), ["--version"], "pandoc"),
    ("tesseract", ("tesseract",), ["--version"], "tesseract-ocr"),
    ("imagemagick", ("magick", "convert-im6.q16", "convert"), ["-version"], "imagemagick"),
    ("pdftotext", ("pdftotext",), ["-v"], "poppler-utils"),
    ("ghostscript", ("gs",), ["--version"], "ghostscript"),
    ("node", ("node",), ["--version"], "nodejs"),
    # What an agent's first scripts reach for (installed by scripts/install-native.sh).
    ("tree", ("tree",), ["--version"], "tree"),
    ("jq", ("jq",), ["--version"], "jq"),
    ("ripgrep", ("rg",), ["--version"], "ripgrep"),
    ("fd", ("fdfind", "fd"), ["--version"], "fd-find"),
    ("git", ("git",), ["--version"], "git"),
    ("curl", ("curl",), ["--version"], "curl"),
    ("wget", ("wget",), ["--version"], "wget"),
    ("zip", ("zip",), ["-v"], "zip"),
    ("unzip", ("unzip",), ["-v"], "unzip"),
    ("sqlite3", ("sqlite3",), ["--version"], "sqlite3"),
    ("file", ("file",), ["--version"], "file"),
    ("make", ("make",), ["--version"], "make"),
    ("httpie", ("http",), ["--version"], "httpie"),
)
OPTIONAL_TOOLS = {"node"}
SYSTEM_TOOLS = tuple(name for name, *_ in TOOLS if name != "node")
"""What every native profile's sandbox shows (the system's /usr): a shell, the document tools and
the command-line tools; each profile adds its own runtime (see `_offers`)."""
WASM_OFFERS = {
    "python": ["CPython in WebAssembly with its standard library (no native packages: python-data has those)"],
    "javascript": ["QuickJS in WebAssembly"],
    "typescript": ["TypeScript transpiled in WebAssembly, run by QuickJS"],
}
"""The WebAssembly profiles run no command-line tools."""


def _version(path: str, args: list[str]) -> str | None:
    if not args:
        return None
    try:
        done = subprocess.run([path, *args], check=False, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (done.stdout or done.stderr).strip()
    for line in text.splitlines():
        match = re.search(r"\d+(\.\d+)+(-\d+)?", line)
        if match:
            return match.group(0)
    return text.splitlines()[0][:80] if text else None


def _tool(executables: tuple[str, ...], args: list[str]) -> dict[str, Any]:
    for name in executables:
        # /usr/local is hidden in the sandbox by default: look where the sandbox looks.
        path = shutil.which(name, path="/usr/bin:/bin:/usr/sbin:/sbin")
        if path:
            return {"present": True, "path": path, "version": _version(path, args)}
    return {"present": False, "path": None, "version": None}


def doctor(provider: Any = None) -> dict[str, Any]:
    """A report of native tools and isolation features; `missing` lists what to install."""
    from wasm_runner.providers.native.provider import NativeProvider

    provider = provider or NativeProvider()
    report: dict[str, Any] = {"platform": f"{platform.system()} {platform.release()}", "missing": []}
    missing: list[str] = report["missing"]

    bwrap_path, problem, support = provider.environment()
    isolation: dict[str, Any] = {
        "bubblewrap": {"present": bwrap_path is not None, "path": bwrap_path,
                       "version": _version(bwrap_path, ["--version"]) if bwrap_path else None},
        "namespaces": {"ok": problem is None, "detail": problem or
                       "user, PID, network, IPC, UTS and cgroup namespaces available"},
        "resource_limits": {"enforcement": support.enforcement,
                            "detail": support.reason or ", ".join(f"{c or 'unified'}: {p}"
                                                                  for c, p in support.parents.items())},
        "sandbox_user": _sandbox_user(provider),
        "seccomp": {"ok": provider.seccomp_program is not None,
                    "detail": (f"libseccomp filter {provider.seccomp_program} (keyring, ptrace, bpf, mount and "
                               "namespace calls, setuid/setgid modes refused)") if provider.seccomp_program
                    else (problem or "not generated")},
        "mounts": "workspace, /tmp and every bind nosuid,nodev; setuid/setgid bits cleared after each run",
        "network": "shared with the host (policy.network)" if provider.policy.network else "denied (own namespace)",
        "unsandboxed_fallback": provider.allow_unsandboxed,
        "sandbox_usable": problem is None,
    }
    report["isolation"] = isolation
    data_home = Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local" / "share")) / "wasm-runner"
    disk = disk_enforcement(data_home)
    isolation["disk_quota"] = {"path": disk.path, "filesystem": disk.fs_type, "mount": disk.mount_point,
                               "kernel": disk.kernel, "detail": disk.detail,
                               "enforcement": "host accounting: running guests re-measured every 50 ms, "
                                              "API writes reserved before they are written"}
    if bwrap_path is None:
        missing.append("bubblewrap (apt-get install bubblewrap)")
    elif problem is not None:
        missing.append(f"user namespaces for bubblewrap: {problem}")
    if support.enforcement == "rlimit":
        missing.append(f"cgroups (memory/pids/cpu limits fall back to rlimits): {support.reason}")

    tools: dict[str, Any] = {}
    for name, executables, args, package in TOOLS:
        info = _tool(executables, args)
        info["package"] = package
        if name == "tesseract" and info["present"]:
            info["languages"] = _tesseract_languages(info["path"])
            if "eng" not in info["languages"]:
                missing.append("tesseract English data (apt-get install tesseract-ocr-eng)")
        tools[name] = info
        if not info["present"]:
            optional = " (optional: the node profile)" if name in OPTIONAL_TOOLS else ""
            missing.append(f"{name} (apt-get install {package}){optional}")
    report["tools"] = tools

    found = find_python_data(provider.python_data_path)
    report["python_data"] = {
        "ready": found is not None,
        "path": str(found.path if found else provider.python_data_path or python_data_dir()),
        "python": found.python_version if found else None,
        "requirements": str(REQUIREMENTS),
    }
    if found is None:
        missing.append("the python-data environment (wasm-runner prepare)")
    js = find_js_toolchain()
    report["js_toolchain"] = {
        "ready": js is not None,
        "path": str(js.path if js else js_toolchain_dir()),
        "tools": js.versions if js else {},
        "pins": str(PINS),
    }
    if js is None:
        missing.append("the JavaScript toolchain: node, bun, tsc, biome, uv (wasm-runner prepare)")
    report["web_starters"] = {name: _starter_report(name) for name in starter_names()}
    if any(not info["ready"] for info in report["web_starters"].values()):
        missing.append("web starters' node_modules (wasm-runner prepare)")
    report["profiles"] = {
        "python-data": found is not None and problem is None,
        "node": (tools["node"]["present"] or js is not None) and problem is None,
        "typescript-native": js is not None and problem is None,
        "bun": js is not None and problem is None,
        "bash": problem is None or provider.allow_unsandboxed,
    }
    pango = ctypes.util.find_library("pango-1.0") is not None and ctypes.util.find_library("pangoft2-1.0") is not None
    report["pdf"] = {
        "weasyprint": found is not None and pango,
        "pandoc_engine": "weasyprint" if found is not None and pango and tools["pandoc"]["present"] else None,
        "imagemagick_policy": f"{IMAGEMAGICK_POLICY.name} (PDF read and write; PostScript, EPS and XPS refused)",
    }
    if found is not None and not pango:
        missing.append("Pango for WeasyPrint (apt-get install libpango-1.0-0 libpangoft2-1.0-0 libharfbuzz-subset0)")
    report["offers"] = _offers(tools, found, js, pdf_engine=report["pdf"]["pandoc_engine"])
    report["ok"] = problem is None or provider.allow_unsandboxed
    return report


def _offers(tools: dict[str, Any], data: Any, js: Any, pdf_engine: str | None = None) -> dict[str, list[str]]:
    """Per built-in profile, what its code can run here (present tools only, with their versions)."""
    def named(name: str) -> str:
        version = tools[name]["version"]
        return f"{name} {version}" if version else name

    system = [named(name) for name in SYSTEM_TOOLS if tools[name]["present"]]
    # A sandbox given python-data (a shell script's, a Python program's, a command's; not a Node or
    # bun program's) also shows weasyprint, and pandoc as the wrapper making it its PDF engine.
    with_data = system
    if pdf_engine is not None:
        with_data = [f"{item} (PDF by {pdf_engine})" if item.startswith("pandoc") else item for item in system]
        with_data.append(f"weasyprint {_pinned_version('weasyprint') or ''}".strip())
    offers: dict[str, list[str]] = {name: list(items) for name, items in WASM_OFFERS.items()}
    if data is not None:
        from wasm_runner.providers.native.inventory import python_data_modules

        modules = sorted(python_data_modules(data.path) or (), key=str.lower)
        offers["python-data"] = [f"python {data.python_version} with {', '.join(modules)}", *with_data]
    else:
        offers["python-data"] = []
    js_tools = [f"{tool} {version}" for tool, version in (js.versions if js else {}).items()]
    # The node profile runs the toolchain's Node.js when it is built, else the system's.
    node = [t for t in js_tools if t.startswith("node ")] or ([named("node")] if tools["node"]["present"] else [])
    offers["node"] = [*node, *system] if node else []
    offers["typescript-native"] = [*js_tools, *system] if js else []
    offers["bun"] = [*js_tools, *system] if js else []
    offers["bash"] = with_data
    return offers


def _pinned_version(distribution: str) -> str | None:
    try:
        lines = REQUIREMENTS.read_text().splitlines()
    except OSError:
        return None
    prefix = f"{distribution.lower()}=="
    return next((line[len(prefix):].strip() for line in lines if line.lower().startswith(prefix)), None)


def _sandbox_user(provider: Any) -> dict[str, Any]:
    """Which host user guests run as (see identity.py)."""
    found = sandbox_identity()
    if isinstance(found, str):
        return {"ok": False, "name": account_name(), "uid": None, "dropped": None, "detail": found}
    return {"ok": True, "name": found.name, "uid": found.uid, "dropped": found.dropped, "detail": found.describe()}


def _tesseract_languages(path: str) -> list[str]:
    try:
        done = subprocess.run([path, "--list-langs"], check=False, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return []
    lines = (done.stdout + done.stderr).splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("List of")]


def format_report(report: dict[str, Any]) -> str:
    """The human-readable form of `doctor()`."""
    mark = {True: "ok  ", False: "MISS"}
    iso = report["isolation"]
    lines = [f"wasm-runner native provider on {report['platform']}", "", "isolation:"]
    bw = iso["bubblewrap"]
    lines.append(f"  {mark[bw['present']]} bubblewrap {bw['version'] or ''} {bw['path'] or ''}".rstrip())
    lines.append(f"  {mark[iso['namespaces']['ok']]} namespaces: {iso['namespaces']['detail']}")
    limits = iso["resource_limits"]
    lines.append(f"  {mark[limits['enforcement'] != 'rlimit']} resource limits: {limits['enforcement']} "
                 f"({limits['detail']})")
    user = iso["sandbox_user"]
    lines.append(f"  {mark[user['ok']]} sandbox user: {user['detail']}")
    lines.append(f"  {mark[iso['seccomp']['ok']]} seccomp: {iso['seccomp']['detail']}")
    lines.append(f"  ok   mounts: {iso['mounts']}")
    lines.append(f"  ok   network: {iso['network']}")
    if "disk_quota" in iso:
        quota = iso["disk_quota"]
        lines.append(f"  ok   disk quotas: {quota['enforcement']}; kernel quotas: {'not used' if quota['kernel'] else 'none'} "
                     f"({quota['detail']})")
    if iso["unsandboxed_fallback"]:
        lines.append("  !!   unsandboxed fallback allowed: results say isolation \"none\" where bubblewrap is unusable")
    lines += ["", "tools:"]
    for name, info in report["tools"].items():
        extra = f" [{', '.join(info['languages'])}]" if info.get("languages") else ""
        version = f"{info['version']} " if info["version"] else ""
        where = f"{version}{info['path']}{extra}" if info["present"] else f"apt-get install {info['package']}"
        lines.append(f"  {mark[info['present']]} {name}: {where}".rstrip())
    data = report["python_data"]
    lines += ["", "python-data:",
              f"  {mark[data['ready']]} {('Python ' + data['python']) if data['ready'] else 'not built'} at {data['path']}"]
    js = report.get("js_toolchain")
    if js is not None:
        lines += ["", "JavaScript toolchain (mounted read-only at /opt/js-toolchain):"]
        if js["ready"]:
            lines += [f"  ok   {tool} {version}" for tool, version in js["tools"].items()]
            lines.append(f"       at {js['path']}")
        else:
            lines.append(f"  MISS not built (wasm-runner prepare) at {js['path']}")
    starters = report.get("web_starters")
    if starters:
        lines += ["", "web starters (POST /v1/sessions {\"starter\": name}; node_modules read-only at /opt/web-starters):"]
        for name, info in starters.items():
            state = (f"ready, {info['files']} files, {info['bytes'] / 2**20:.0f} MiB" if info["ready"]
                     else "not installed (wasm-runner prepare)")
            lines.append(f"  {mark[info['ready']]} {name}: {state}")
    lines += ["", "profiles: " + ", ".join(f"{k} {'ready' if v else 'unavailable'}" for k, v in report["profiles"].items())]
    offers = report.get("offers")
    if offers:
        lines += ["", "what each profile offers:"]
        for profile, items in offers.items():
            lines.append(f"  {profile}: {'; '.join(items) if items else 'nothing here (see missing)'}")
    if report["missing"]:
        lines += ["", "missing:"] + [f"  - {item}" for item in report["missing"]]
    return "\n".join(lines)


def _starter_report(name: str) -> dict[str, Any]:
    starter = find_starter(name)
    return {"ready": starter is not None, "path": str(starter.path if starter else starters_dir() / name),
            "bytes": starter.bytes if starter else 0, "files": starter.files if starter else 0}


def main(argv: list[str] | None = None) -> int:
    """Print the report (text, or JSON with --json); exit 1 when native runs cannot be sandboxed."""
    args = sys.argv[1:] if argv is None else argv
    report = doctor()
    if "--json" in args:
        print(json.dumps(report, indent=2))
    else:
        print(format_report(report))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
