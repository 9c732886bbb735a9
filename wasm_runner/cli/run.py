"""`wasm-runner run`: one run in a sandbox, its output echoed and its exit status returned.

Without --profile or --config the flags alone say how it runs; with them the run is
resolved under a profile as the service resolves a request (`wasm_runner.profiles`):
its language, provider, limits within the maxima, environment allowlist and mounts.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import msgspec

from wasm_runner.errors import WasmRunnerError
from wasm_runner.packages.settings import PackageSettings
from wasm_runner.runner import Runner, default_providers, provider_name
from wasm_runner_protocol.egress import DENY, EgressPolicy
from wasm_runner_protocol.execution import LIMIT_MESSAGES, ExecRequest, ExecResult, Limits, MiB
from wasm_runner_protocol.guest import language_for_path

if TYPE_CHECKING:
    from wasm_runner.guest import Mount
    from wasm_runner.session import Session
    from wasm_runner_protocol.execution import Language


class UsageError(WasmRunnerError):
    """A command line that cannot run: reported on stderr with exit status 2."""


def run_command(args: argparse.Namespace) -> int:
    try:
        code, path_language = _code(args)
        env = _env(args.env)
        if args.profile is not None or args.config is not None:
            request, mounts = _profile_request(args, code, path_language, env)
        else:
            request, mounts = _flags_request(args, code, path_language, env), ()
    except UsageError as exc:
        print(f"wasm-runner run: {exc}", file=sys.stderr)
        return 2
    listener = None if args.json else _echo
    # Runs once and closes: no sandboxes made ahead for runs that will not come. In this process:
    # the command is itself one run's process (a worker would double its start-up), and it ends
    # at once when a guest stuck in a host call holds a thread (below).
    # Only the providers the run needs: a WebAssembly run spares the native one's import.
    native = provider_name(request) != "wasm" or bool(request.typecheck)  # (a type check runs the native tsc)
    providers = None if native else default_providers(mounts, native=False)
    with Runner(isolation="in-process", mounts=mounts, ready_scratch=0, packages=_package_settings(args),
                providers=providers) as runner:
        if args.workspace or args.install:
            if args.workspace:
                os.makedirs(args.workspace, exist_ok=True)
            session = runner.session(workspace_dir=args.workspace)
            if args.install and not _install(session, args.install):
                return 2
            result = session.run_sync(msgspec.structs.replace(request, fresh=True), listener=listener)
        else:
            result = runner.run_sync(request, listener=listener)
    if args.json:
        sys.stdout.buffer.write(msgspec.json.format(msgspec.json.encode(result)) + b"\n")
    else:
        _report(result)
    type_errors = any(d.category in ("error", "checker") for d in result.diagnostics or ())
    status = 1 if result.exit_code == 0 and type_errors else result.exit_code if 0 <= result.exit_code < 256 else 1
    if runner.abandoned_workers:  # its thread, blocked in a host call, would keep the interpreter from exiting
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    return status


def _package_settings(args: argparse.Namespace) -> PackageSettings | None:
    """With --install: the index given (else PyPI's) and a cache that outlives the run."""
    if not args.install:
        return None
    from wasm_runner.engine.module_cache import cache_dir
    from wasm_runner.packages.settings import PYPI_SIMPLE

    return PackageSettings(python_index=args.index or PYPI_SIMPLE, cache_dir=cache_dir() / "packages")


def _install(session: Session, requirements: list[str]) -> bool:
    result = session.install(requirements)
    if result.ok:
        installed = ", ".join(f"{p.name}=={p.version} ({p.source})" for p in result.installed)
        print(f"[wasm-runner] installed {installed or 'nothing new'} in {result.duration_ms:.0f} ms", file=sys.stderr)
        return True
    error = result.error
    message = f"{error.kind}: {error.message}" + (f" ({error.hint})" if error.hint else "") if error else "refused"
    print(f"wasm-runner run: --install failed: {message}", file=sys.stderr)
    return False


def _code(args: argparse.Namespace) -> tuple[str, str | None]:
    """The code to run, and the language its file's name tells (None for -c)."""
    if (args.code is None) == (args.script is None):
        raise UsageError("give either a script file or -c CODE")
    if args.code is not None:
        return args.code, None
    path = Path(args.script)
    if not path.is_file():
        raise UsageError(f"no such file: {path}")
    language = language_for_path(path.name)
    if language is None and args.language is None and args.profile is None and args.config is None:
        raise UsageError(f"cannot tell the language of {path.name}; pass --lang")
    return path.read_text(), language


def _env(items: list[str]) -> dict[str, str]:
    env = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--env takes KEY=VALUE, got {item!r}")
        env[key] = value
    return env


def _stdin(args: argparse.Namespace) -> str:
    return Path(args.stdin_file).read_text() if args.stdin_file else ""


def _limit_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The limits given on the command line, as Limits fields."""
    given = {"timeout_s": args.timeout, "memory_bytes": args.memory_mib and args.memory_mib * MiB,
             "output_bytes": args.output_bytes, "disk_bytes": args.disk_mib and args.disk_mib * MiB,
             "disk_files": args.disk_files}
    limits = {name: value for name, value in given.items() if value is not None}
    if args.fuel is not None:
        limits["fuel"] = args.fuel
    return limits


def _network(args: argparse.Namespace) -> EgressPolicy | None:
    """The allowlist `--allow-net` names (None: no flag, the default policy)."""
    allow = tuple(getattr(args, "allow_net", None) or ())
    if not allow:
        return None
    from wasm_runner.egress.policy import EgressRules, PolicyError

    policy = EgressPolicy(mode="allowlist", allow=allow)
    try:
        EgressRules(policy)
    except PolicyError as exc:
        raise UsageError(f"--allow-net: {exc}") from None
    return policy


def _flags_request(args: argparse.Namespace, code: str, path_language: str | None, env: dict[str, str]) -> ExecRequest:
    try:
        limits = Limits(**_limit_flags(args))
        language = cast("Language", args.language or path_language or "python")  # argparse's choices; a known suffix
        return ExecRequest(code=code, language=language, env=env,
                           stdin=_stdin(args), limits=limits, provider=args.provider, typecheck=args.typecheck,
                           typecheck_timeout_s=args.typecheck_timeout, egress=_network(args) or DENY)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _profile_request(args: argparse.Namespace, code: str, path_language: str | None,
                     env: dict[str, str]) -> tuple[ExecRequest, tuple[Mount, ...]]:
    """The request as the service resolves it under the profile, and the profile's mounts."""
    # Only here: a run without a profile does without pydantic.
    from pydantic import ValidationError

    from wasm_runner.profiles import ProfileError, Profiles, load_profiles
    from wasm_runner_protocol.wire import LimitsPatch

    try:
        profiles = Profiles(load_profiles(args.config))
    except (ValidationError, ValueError, OSError) as exc:
        raise UsageError(f"invalid configuration {args.config}:\n{exc}") from None
    try:
        _, profile = profiles.get(args.profile)
        request = profiles.request(profile, language=args.language, code=code, command=None, stdin=_stdin(args),
                                   env=env, limits=LimitsPatch(**_limit_flags(args)), fresh=False, id=None,
                                   path_language=path_language, typecheck=args.typecheck,
                                   typecheck_timeout_s=args.typecheck_timeout, network=_network(args))
    except ProfileError as exc:
        raise UsageError(f"{exc.message}" + (f" ({exc.hint})" if exc.hint else "")) from None
    if args.provider is not None:
        request = msgspec.structs.replace(request, provider=args.provider)
    return request, profile.runner_mounts()


def _echo(stream: str, data: bytes) -> None:
    out = sys.stdout if stream == "stdout" else sys.stderr
    out.buffer.write(data)
    out.flush()


def _report(result: ExecResult) -> None:
    for d in result.diagnostics or ():  # as tsc prints them
        place = f"{d.file}({d.line},{d.column}): " if d.file else ""
        print(f"{place}{d.category} TS{d.code}: {d.message}" if d.code else f"[wasm-runner] typecheck: {d.message}",
              file=sys.stderr)
    if result.truncated:
        print(f"[wasm-runner] output truncated: {', '.join(result.truncated)}", file=sys.stderr)
    if result.limit is not None:
        message = result.error.message if result.error is not None else LIMIT_MESSAGES[result.limit]
        print(f"[wasm-runner] limit {result.limit}: {message}", file=sys.stderr)
    elif result.error is not None and result.error.type in ("GuestCrash", "RuntimeUnavailable", "TypeCheckError"):
        print(f"[wasm-runner] {result.error.message}", file=sys.stderr)
    if result.error is not None and result.error.hint:  # what to do, under the program's own traceback
        print(f"[wasm-runner] hint: {result.error.hint}", file=sys.stderr)
