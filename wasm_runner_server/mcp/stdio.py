"""`wasm-runner mcp`: serve MCP over stdio, for agents that start the sandbox as a subprocess.

    wasm-runner mcp                                   # a private service in this process
    wasm-runner mcp --data-dir ~/.local/share/wasm-runner-mcp --config wasm-runner.toml
    wasm-runner mcp --url https://runner.example.com --api-key "$KEY"    # a remote service

An MCP client configuration (e.g. Claude Desktop's):

    {"mcpServers": {"wasm-runner": {"command": "wasm-runner", "args": ["mcp"]}}}

The tools are server/mcp_server.py's, calls of the HTTP API. Without --url the process
runs the service itself (the same configuration file as `wasm-runner serve`) on a Unix
socket in a private directory, for this one user: API keys are off there. Without
--data-dir its sessions live in a temporary directory removed at exit; with it they
persist, and the directory must not be shared with another running server. With --url
the tools call that server with --api-key (or $WASM_RUNNER_API_KEY). Logs go to stderr.
Its arguments are defined in wasm_runner_server/cli/commands.py (`add_mcp_command`);
`python -m wasm_runner_server.mcp.stdio ...` runs it standalone.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from wasm_runner_server.cli.serve import configure_logging
from wasm_runner_server.config import ServiceConfig, load_config

log = logging.getLogger("wasm_runner.server.mcp")


def run_mcp(args: argparse.Namespace) -> int:
    if args.url is not None:
        configure_logging(args.log_level, args.log_format, access_log=False)
        api_key = args.api_key if args.api_key is not None else os.environ.get("WASM_RUNNER_API_KEY", "")
        try:  # the [mcp] table applies to this MCP server, in front of any service
            bound = load_config(args.config).mcp.max_result_chars
        except (ValidationError, ValueError, OSError) as exc:
            print(f"wasm-runner mcp: invalid configuration:\n{exc}", file=sys.stderr)
            return 2
        asyncio.run(serve_stdio(None, url=args.url, api_key=api_key, profile=args.profile, max_result_chars=bound))
        return 0
    temporary = None
    data_dir = args.data_dir
    if data_dir is None:
        temporary = data_dir = Path(tempfile.mkdtemp(prefix="wasm-runner-mcp-"))
    try:
        try:
            config = load_config(args.config).with_server(
                data_dir=data_dir, concurrency=args.concurrency, prepare_on_start=args.warm,
                log_level=args.log_level, access_log=False)
            if args.profile is not None and args.profile not in config.all_profiles():
                raise ValueError(f"no profile named {args.profile!r} "
                                 f"(available: {', '.join(sorted(config.all_profiles()))})")
        except (ValidationError, ValueError, OSError) as exc:
            print(f"wasm-runner mcp: invalid configuration:\n{exc}", file=sys.stderr)
            return 2
        configure_logging(config.server.log_level, args.log_format, access_log=False)
        # One user, reached only through a socket in a private directory: no API keys (and no warning).
        config = config.model_copy(update={"auth": config.auth.model_copy(update={"enabled": False})})
        logging.getLogger("wasm_runner.server.auth").setLevel(logging.ERROR)
        try:
            asyncio.run(serve_stdio(config, profile=args.profile))
        except KeyboardInterrupt:
            pass
        return 0
    finally:
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)


async def serve_stdio(config: ServiceConfig | None, *, url: str | None = None, api_key: str = "",
                      profile: str | None = None, max_result_chars: int | None = None) -> None:
    """Serve one MCP connection on stdin/stdout until it closes: over the server at `url`, or over
    a service run here (from `config`) on a Unix socket in a private directory."""
    from wasm_runner_server.mcp.settings import DEFAULT_MAX_RESULT_CHARS
    from wasm_runner_server.mcp.tools import McpTools

    if url is not None:
        await _serve(McpTools(url, api_key=api_key, profile=profile,
                              max_result_chars=max_result_chars or DEFAULT_MAX_RESULT_CHARS))
        return
    from aiohttp import web

    from wasm_runner_server.app import create_app
    from wasm_runner_server.http.service_runner import ServiceRunner

    assert config is not None
    if config.previews.port is None:  # no API port to sit beside: previews take any free one
        config = config.model_copy(update={"previews": config.previews.model_copy(update={"port": 0})})
    socket_dir = tempfile.mkdtemp(prefix="wasm-runner-mcp-")  # mode 0700: this user only
    socket_path = os.path.join(socket_dir, "api.sock")
    runner = ServiceRunner(create_app(config), handle_signals=False, access_log=None, handler_cancellation=True,
                           shutdown_timeout=config.server.shutdown_timeout_s + 5)
    await runner.setup()
    try:
        await web.UnixSite(runner, socket_path).start()
        await _serve(McpTools("http://wasm-runner", uds=socket_path, profile=profile,
                                max_result_chars=config.mcp.max_result_chars))
    finally:
        await runner.cleanup()
        shutil.rmtree(socket_dir, ignore_errors=True)


async def _serve(tools) -> None:
    from mcp.server.stdio import stdio_server

    from wasm_runner_server.mcp.server import build_server

    server = build_server(tools)
    try:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
    finally:
        await tools.aclose()


def main(argv: Sequence[str] | None = None) -> int:
    from wasm_runner_server.cli.commands import add_mcp_command

    parser = argparse.ArgumentParser(prog="wasm-runner")
    commands = parser.add_subparsers(dest="command")
    add_mcp_command(commands)
    args = parser.parse_args(["mcp", *(argv if argv is not None else sys.argv[1:])])
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
