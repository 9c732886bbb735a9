"""`wasm-runner sessions create|list|show|hibernate|delete|fork|publish|templates|unpublish`, and
`wasm-runner templates publish|list|delete`."""

from __future__ import annotations

import argparse

from wasm_runner_client.cli.connection import connect
from wasm_runner_client.cli.display import fields, print_json, table, when
from wasm_runner_client.cli.status import OK, CliError, guarded
from wasm_runner_client.wire import SessionInfo
from wasm_runner_protocol.egress import EgressPolicy


def policy(mode: str | None, allow: list[str]) -> EgressPolicy | None:
    """The egress policy the options name (None: none named); `--allow` alone means an allowlist."""
    if mode is None and not allow:
        return None
    mode = mode or "allowlist"
    if allow and mode == "deny":
        raise CliError("--allow does not go with --egress deny (nothing is reachable under deny)")
    if mode == "allowlist" and not allow:
        raise CliError("an allowlist needs at least one --allow HOST", hint="e.g. --allow pypi.org --allow '*.example.com'")
    return EgressPolicy(mode=mode, allow=tuple(allow))  # type: ignore[arg-type]  # argparse checked the choice


def describe_egress(egress: EgressPolicy) -> str:
    return egress.mode + (f" ({', '.join(egress.allow)})" if egress.allow else "")




def _show(info: SessionInfo) -> None:
    pairs = [("id", info.id), ("profile", info.profile), ("state", info.state),
             ("kernels", ", ".join(info.kernels) or "-"), ("executions", str(info.executions)),
             ("created", when(info.created_at)), ("last used", when(info.last_used_at)),
             ("expires", when(info.expires_at)), ("idle timeout", f"{info.idle_timeout_s:g} s"),
             ("egress", describe_egress(info.egress))]
    pairs += [(f"metadata.{key}", value) for key, value in sorted(info.metadata.items())]
    fields(pairs)


@guarded
def create_command(args: argparse.Namespace) -> int:
    egress = policy(args.egress, args.allow)
    with connect(args) as client:
        info = client.create_session(args.id, profile=args.profile, idle_timeout_s=args.idle_timeout,
                                     ttl_s=args.ttl, metadata=dict(args.metadata), temporary=args.temporary,
                                     egress=egress, template=args.template, starter=args.starter)
    if args.json:
        print_json(info)
    else:
        print(info.id)
    return OK


@guarded
def list_command(args: argparse.Namespace) -> int:
    with connect(args) as client:
        sessions = list(client.iter_sessions())
    if args.json:
        print_json(sessions)
        return OK
    table(["ID", "PROFILE", "STATE", "RUNS", "LAST USED", "EGRESS"],
          [[s.id, s.profile, s.state, str(s.executions), when(s.last_used_at), describe_egress(s.egress)]
           for s in sessions])
    return OK


@guarded
def show_command(args: argparse.Namespace) -> int:
    with connect(args) as client:
        info = client.get_session(args.session)
    if args.json:
        print_json(info)
    else:
        _show(info)
    return OK


@guarded
def delete_command(args: argparse.Namespace) -> int:
    with connect(args) as client:
        for session in args.sessions:
            client.delete_session(session)
            if not args.quiet:
                print(f"deleted {session}")
    return OK


@guarded
def hibernate_command(args: argparse.Namespace) -> int:
    with connect(args) as client:
        for session in args.sessions:
            info = client.hibernate(session)
            if args.json:
                print_json(info)
            elif not args.quiet:
                print(f"{info.id}: {info.state}")
    return OK


@guarded
def fork_command(args: argparse.Namespace) -> int:
    with connect(args) as client:
        result = client.fork(args.session, args.count)
    if args.json:
        print_json(result)
        return OK
    for info in result.sessions:
        print(info.id)
    for language, why in sorted(result.fresh_kernels.items()):
        print(f"note: the copies start a new {language} kernel: {why}")
    for failure in result.failed:
        print(f"copy {failure.index} failed: {failure.error}")
    if result.failed and not result.sessions:
        raise CliError("no copy could be made")
    return OK


@guarded
def publish_command(args: argparse.Namespace) -> int:
    with connect(args) as client:
        info = client.publish_template(args.name, args.session)
    if args.json:
        print_json(info)
    else:
        print(f"published {info.name} ({info.bytes} bytes; kernels: {', '.join(info.kernels) or 'none'})")
    return OK


@guarded
def templates_command(args: argparse.Namespace) -> int:
    with connect(args) as client:
        templates = client.list_templates()
    if args.json:
        print_json(templates)
        return OK
    table(["NAME", "KERNELS", "BYTES", "CREATED"],
          [[t.name, ", ".join(t.kernels) or "-", str(t.bytes), when(t.created_at)] for t in templates])
    return OK


@guarded
def unpublish_command(args: argparse.Namespace) -> int:
    with connect(args) as client:
        for name in args.names:
            client.delete_template(name)
            if not args.quiet:
                print(f"deleted template {name}")
    return OK
