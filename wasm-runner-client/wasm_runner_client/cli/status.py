"""Exit statuses of the service commands, and the one place that turns an error into one.

`exec` exits with the guest's own exit code. Everything the CLI itself reports has a status of
its own, taken from sysexits(3) and timeout(1) so that a script can tell "the program failed"
from "the service refused" or "a limit stopped it" (a guest can still exit with any of these:
read stderr, or `--json`, to be sure).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from wasm_runner_client.cli.display import inert
from wasm_runner_client.errors import (
    ApiError,
    AuthenticationError,
    PermissionDeniedError,
    ServerError,
    ServiceUnavailableError,
    TransportError,
)
from wasm_runner_protocol.errors import ErrorCode

OK = 0
USAGE = 2
"""A command line the CLI cannot use (argparse's own status)."""
REFUSED = 65
"""The service answered with an error about the request: no such session or file, bad input, a quota."""
SERVER_ERROR = 70
"""The service failed (5xx) or an event stream ended without a result."""
UNAVAILABLE = 69
"""The service cannot be reached, or it is shutting down or not ready (503)."""
LOCAL_ERROR = 74
"""A local file or folder could not be read or written."""
DENIED = 77
"""The API key is missing, wrong or revoked (401), or it may not do this (403)."""
TIMEOUT = 124
"""The run hit its time limit (as timeout(1) exits)."""
LIMIT = 125
"""The run hit another limit: memory, fuel, output, disk or stack."""
CANCELLED = 130
"""The run was cancelled, or the CLI was interrupted (Ctrl-C)."""
BROKEN_PIPE = 141
"""Whoever read the output stopped reading (`| head`): quietly, as a program killed by SIGPIPE."""

Command = Callable[..., int]

COMMAND_HINTS: dict[str, str] = {
    ErrorCode.SESSION_NOT_FOUND: "see your sessions with `wasm-runner sessions list`; "
                                 "create one with `wasm-runner sessions create`",
}
"""Hints in the CLI's own words, where the service's name an HTTP route."""


class CliError(Exception):
    """A failure the CLI reports itself: `message` on stderr, exit with `status`."""

    def __init__(self, message: str, status: int = USAGE, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.hint = hint


def api_status(exc: ApiError) -> int:
    if isinstance(exc, (AuthenticationError, PermissionDeniedError)):
        return DENIED
    if isinstance(exc, ServiceUnavailableError):
        return UNAVAILABLE
    if isinstance(exc, ServerError) or exc.status is None and exc.code == ErrorCode.STREAM_ENDED:
        return SERVER_ERROR
    return REFUSED


def limit_status(limit: str | None) -> int | None:
    """The status of a run stopped by `limit`; None when no limit stopped it."""
    if limit is None:
        return None
    return {"timeout": TIMEOUT, "cancelled": CANCELLED}.get(limit, LIMIT)


def report(message: str, hint: str | None = None) -> None:
    """An error line and its hint on stderr; control characters (a guest's file name) shown escaped."""
    print(f"error: {inert(message)}", file=sys.stderr)
    if hint:
        print(f"hint: {inert(hint)}", file=sys.stderr)


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that flushing it at exit does not fail again on the closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def guarded(command: Command) -> Command:
    """Run `command`, turning what it raises into a message on stderr and its exit status."""

    def run(*args: object) -> int:
        try:
            return command(*args)
        except ApiError as exc:
            report(f"{exc.message} ({exc.code})", COMMAND_HINTS.get(exc.code, exc.hint))
            return api_status(exc)
        except TransportError as exc:
            report(f"cannot reach the service ({exc})",
                   "give its address with --url or $WASM_RUNNER_URL")
            return UNAVAILABLE
        except CliError as exc:
            report(exc.message, exc.hint)
            return exc.status
        except BrokenPipeError:
            _silence_stdout()
            return BROKEN_PIPE
        except UnicodeDecodeError as exc:
            report(f"not UTF-8 text ({exc.reason} at byte {exc.start})", "give a text file")
            return LOCAL_ERROR
        except OSError as exc:
            report(f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else ""))
            return LOCAL_ERROR
        except KeyboardInterrupt:
            return CANCELLED

    run.__name__ = command.__name__
    run.__doc__ = command.__doc__
    return run
