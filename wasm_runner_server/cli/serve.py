"""`wasm-runner serve`: run the HTTP service.

Settings come from, lowest to highest precedence: built-in defaults, the config
file (--config / WASM_RUNNER_CONFIG), environment variables, command-line flags.

    wasm-runner serve --host 127.0.0.1 --port 8080 --data-dir /var/lib/wasm-runner --config wasm-runner.toml

Its arguments are defined in wasm_runner_server/cli/commands.py (`add_serve_command`); the
parser's `handler` default is `run_serve` (`args.handler(args)` returns the exit status).
`python -m wasm_runner_server serve ...` runs it standalone.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from pydantic import ValidationError

from wasm_runner_server.app import create_app
from wasm_runner_server.cli.commands import ENVIRONMENT, add_serve_command
from wasm_runner_server.config import ServiceConfig, load_config
from wasm_runner_server.http.service_runner import ServiceRunner
from wasm_runner_server.sessions.service import SERVICE

log = logging.getLogger("wasm_runner.server")

def build_config(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> ServiceConfig:
    """The configuration from the file, then environment variables, then flags."""
    config_path = args.config or environ.get(ENVIRONMENT["config"]) or None
    config = load_config(config_path)
    changes: dict[str, object] = {}
    for name, variable in ENVIRONMENT.items():
        if name != "config" and environ.get(variable):
            changes[name] = environ[variable]
    for name in ("host", "port", "data_dir", "concurrency", "shutdown_timeout_s", "log_level", "access_log"):
        value = getattr(args, name, None)
        if value is not None:
            changes[name] = value
    config = config.with_server(**changes)
    config = config.model_copy(update={"store": config.store.with_environment(environ)})  # WASM_RUNNER_STORE_URL
    if getattr(args, "no_auth", False):  # auth is on unless explicitly turned off
        config = config.model_copy(update={"auth": config.auth.model_copy(update={"enabled": False})})
    return config


def run_serve(args: argparse.Namespace) -> int:
    try:
        config = build_config(args)
    except (ValidationError, ValueError, OSError) as exc:
        print(f"wasm-runner serve: invalid configuration:\n{exc}", file=sys.stderr)
        return 2
    configure_logging(config.server.log_level, getattr(args, "log_format", "json"), config.server.access_log)
    try:
        with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
            runner.run(serve(config))
    except OSError as exc:
        log.error("cannot serve", extra={"event": "serve_failed", "error": str(exc)})
        return 1
    return 0


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop where it is installed (Linux and macOS): the service's one event
    loop thread spent about a fifth less CPU per request with it, a third of a one-shot
    run's cost in all. None: asyncio's own."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


async def serve(config: ServiceConfig, *, stop: asyncio.Event | None = None) -> None:
    """Serve until SIGINT/SIGTERM (or `stop` is set), then shut down gracefully."""
    settings = config.server
    app = create_app(config)
    runner = ServiceRunner(app, handle_signals=False, access_log=None, handler_cancellation=True,
                           shutdown_timeout=settings.shutdown_timeout_s + 5)
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.port)
    await site.start()
    loop = asyncio.get_running_loop()
    for host, port, *_ in runner.addresses:
        log.info("listening", extra={"event": "listening", "host": host, "port": port,
                                     "url": f"http://{host}:{port}", "event_loop": type(loop).__module__.split(".")[0]})
    await advertise(app, config, runner.addresses)
    # What start-up built (modules, models, schemas: about 120 000 objects) lives as long as
    # the process. Left to the collector, every full collection walked it and stalled all
    # requests for 90-130 ms here; frozen, a full collection takes under 1 ms.
    gc.collect()
    gc.freeze()
    stop = stop or asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    try:
        await stop.wait()
    finally:
        log.info("shutting down", extra={"event": "shutting_down"})
        await runner.cleanup()


async def advertise(app: web.Application, config: ServiceConfig, addresses: list) -> None:
    """Tell a cluster's other nodes where this one is reached: `[store] advertise_url`, else the address
    it listens on (none when that is every address: the other nodes could not tell which)."""
    service = app.get(SERVICE)
    if service is None or service.nodes is None:
        return
    url = config.store.advertise_url
    if url is None and addresses:
        host, port = addresses[0][:2]
        if host not in ("0.0.0.0", "::", ""):
            url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    if config.storage.kind == "s3":
        log.warning("with S3 storage, each node keeps its own copy of a workspace's shared/ directory and of members' "
                    "disks and end users' roots: a session sees those of the node it is on (use [storage] kind = "
                    "\"posix\" on a mount every node shares for one copy)", extra={"event": "workspaces_per_node"})
    if url is None:
        log.warning("this node listens on every address and does not say where it is reached: the other nodes "
                    "answer 421 for its sessions instead of forwarding them (set [store] advertise_url)",
                    extra={"event": "node_not_advertised"})
        return
    await service.advertise(url)


_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and the record's extra fields."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure_logging(level: str = "INFO", fmt: str = "json", access_log: bool = True) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else
                         logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    logging.getLogger("wasm_runner.server.access").setLevel(logging.NOTSET if access_log else logging.WARNING)
    logging.getLogger("aiohttp.server").addFilter(_quiet_bad_requests)


def _quiet_bad_requests(record: logging.LogRecord) -> bool:
    """aiohttp logs requests it could not even parse (answered 400) as errors; they are the client's."""
    if record.exc_info and isinstance(record.exc_info[1], HttpProcessingError):
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger("aiohttp.server").isEnabledFor(logging.DEBUG)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="wasm-runner")
    commands = parser.add_subparsers(dest="command", required=True)
    add_serve_command(commands)
    args = parser.parse_args(argv)
    return args.handler(args)
