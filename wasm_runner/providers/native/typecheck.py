"""Type-checking a TypeScript program with tsc, in a native sandbox of its own.

Full type checking is too slow inside QuickJS (TypeScript 6.0's checker there took about
2.7 s for a four-line program once the standard library's declarations were parsed, which
itself took 4 s), so `typecheck: true` runs the pinned `tsc --noEmit` natively: in a
throwaway workspace (the session's files are neither read nor changed), under its own time
limit, with the program on stdin written to the sandbox's private /tmp. What tsc prints is
parsed into `Diagnostic`s; whatever stops the check is one `checker` diagnostic saying why.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from wasm_runner.providers.base import Job
from wasm_runner.workspace.layout import Workspace
from wasm_runner_protocol.execution import Diagnostic, ExecRequest, ExecResult, Limits, MiB

__all__ = ["TSC_OPTIONS", "parse_tsc_output", "typecheck"]

CHECK_DIR = "/tmp/.wasm-runner-check"
INPUT_NAME = "<input>"
TSC_OPTIONS = ("--noEmit", "--pretty", "false", "--strict", "--target", "es2022", "--module", "esnext",
               "--moduleResolution", "bundler", "--moduleDetection", "force", "--lib", "es2023,dom",
               "--skipLibCheck")
"""Every file a module (top-level await type-checks), the ES2023 library and the DOM's console."""
TYPECHECK_MEMORY_BYTES = 1024 * MiB
"""tsc (Node) needs more than the default run's memory."""

GLOBALS_D_TS = """\
// What the runtimes offer beyond the ES library, loosely typed.
declare module "std"; declare module "os"; declare module "qjs:std"; declare module "qjs:os";
declare const std: any; declare const os: any; declare const scriptArgs: string[];
declare const process: any; declare const Bun: any; declare const Buffer: any;
declare function require(id: string): any;
"""

_LINE = re.compile(r"^(?P<file>.+?)\((?P<line>\d+),(?P<column>\d+)\): (?P<category>error|warning|suggestion|message)"
                   r" TS(?P<code>\d+): (?P<message>.*)$")
_GLOBAL = re.compile(r"^(?P<category>error|warning|suggestion|message) TS(?P<code>\d+): (?P<message>.*)$")


def parse_tsc_output(text: str, input_path: str = f"{CHECK_DIR}/input.ts") -> list[Diagnostic]:
    """tsc's `--pretty false` lines as Diagnostics; indented lines continue the message above.
    tsc names files relative to its working directory: the program is any path ending in `input_path`'s
    last two parts."""
    input_tail = "/".join(input_path.split("/")[-2:])
    found: list[Diagnostic] = []
    for line in text.splitlines():
        match = _LINE.match(line)
        if match:
            file = match["file"]
            if file == input_path or file.endswith(f"/{input_tail}"):
                file = INPUT_NAME
            found.append(Diagnostic(file=file, line=int(match["line"]),
                                    column=int(match["column"]), code=int(match["code"]), message=match["message"],
                                    category=match["category"]))  # type: ignore[arg-type]
            continue
        match = _GLOBAL.match(line)
        if match:
            found.append(Diagnostic(file="", line=0, column=0, code=int(match["code"]), message=match["message"],
                                    category=match["category"]))  # type: ignore[arg-type]
        elif line.startswith(" ") and found:
            last = found[-1]
            found[-1] = Diagnostic(file=last.file, line=last.line, column=last.column, code=last.code,
                                   message=f"{last.message}\n{line.strip()}", category=last.category)
    return found


def _checker(message: str) -> list[Diagnostic]:
    return [Diagnostic(file="", line=0, column=0, code=0, message=message, category="checker")]


def typecheck(execute: Callable[[Job], ExecResult], code: str, timeout_s: float,
              declarations: str = "") -> list[Diagnostic]:
    """tsc's diagnostics for `code` (empty when it type-checks), run by `execute` (the native
    provider's) in a sandbox; `declarations` (a `.d.ts` text: the run's tools) is checked beside it."""
    # stdin carries the program's length in bytes on a line, the program, then the declarations:
    # no text of the request's is put into the script (`read` takes the line byte by byte).
    script = (f"mkdir -p {CHECK_DIR} && {{ IFS= read -r n && head -c \"$n\" > {CHECK_DIR}/input.ts && "
              f"cat > {CHECK_DIR}/tools.d.ts; }} && cat > {CHECK_DIR}/globals.d.ts <<'EOF'\n"
              f"{GLOBALS_D_TS}EOF\n"
              f'exec tsc "$@" {CHECK_DIR}/input.ts {CHECK_DIR}/globals.d.ts {CHECK_DIR}/tools.d.ts')
    stdin = f"{len(code.encode())}\n{code}{declarations}"
    request = ExecRequest(command=["/bin/sh", "-c", script, "tsc", *TSC_OPTIONS], provider="native", stdin=stdin,
                          limits=Limits(timeout_s=timeout_s, memory_bytes=TYPECHECK_MEMORY_BYTES))
    root = Path(tempfile.mkdtemp(prefix="wasm-runner-typecheck-"))
    try:
        result = execute(Job(request, Workspace(root).ensure()))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if result.limit == "timeout":
        return _checker(f"the type check passed its time limit (typecheck_timeout_s = {timeout_s}); raise it")
    if result.limit is not None:
        return _checker(f"the type check stopped: limit {result.limit}")
    if result.error is not None:
        return _checker(f"the type check could not run: {result.error.message}")
    diagnostics = parse_tsc_output(result.stdout)
    if result.exit_code not in (0, 1, 2) or (result.exit_code != 0 and not diagnostics):
        tail = (result.stderr or result.stdout)[-2000:]
        if "tsc: not found" in tail or "tsc: No such file" in tail:
            return _checker("tsc is not installed: build the JavaScript toolchain with `wasm-runner prepare`")
        return _checker(f"tsc failed (exit status {result.exit_code}): {tail}")
    return diagnostics
