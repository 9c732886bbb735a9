"""The service commands as argparse definitions; each handler's module is imported only when it runs."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Sequence
from datetime import date
from typing import Any, Protocol, get_args

from wasm_runner_protocol.egress import EgressMode
from wasm_runner_protocol.execution import Language
from wasm_runner_protocol.usage import UsageUnit

COMMANDS = ("sessions", "exec", "files", "upload", "download", "packages", "egress", "templates", "usage",
            "console")
"""The top-level commands defined here (all of them only call a running service)."""

EPILOG = ("The service is --url (else $WASM_RUNNER_URL, else http://127.0.0.1:8080), the key --api-key "
          "(else $WASM_RUNNER_API_KEY). Exit status: 0 done; 2 bad command line; 65 refused by the service; "
          "69 service unreachable; 70 service failed; 74 local file error; 77 key missing, wrong or not allowed; "
          "exec: the guest's exit code, 124 time limit, 125 another limit, 130 cancelled; 141 output pipe closed.")


def key_value(text: str) -> tuple[str, str]:
    """An argparse type for KEY=VALUE options (`--env`, `--metadata`); a malformed one is a usage error."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"takes KEY=VALUE (got {text!r})")
    return key, value


class Subcommands(Protocol):
    """What `ArgumentParser.add_subparsers()` returns, as the commands use it."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser: ...


def _handler(module: str, name: str) -> Callable[[argparse.Namespace], int]:
    """`name` of wasm_runner_client.cli.`module`, imported when the command runs."""

    def handler(args: argparse.Namespace) -> int:
        command: Callable[[argparse.Namespace], int] = getattr(
            importlib.import_module(f"wasm_runner_client.cli.{module}"), name)
        return command(args)

    return handler


def _leaf(commands: Subcommands, name: str, help: str, module: str, function: str, *, json: bool = True,
          quiet: bool = False, description: str | None = None,
          aliases: Sequence[str] = ()) -> argparse.ArgumentParser:
    parser = commands.add_parser(name, help=help, description=description or help, epilog=EPILOG,
                                 aliases=list(aliases))
    parser.add_argument("--url", help="the service (default: $WASM_RUNNER_URL, else http://127.0.0.1:8080)")
    parser.add_argument("--api-key", help="its API key (default: $WASM_RUNNER_API_KEY)")
    if json:
        parser.add_argument("--json", action="store_true", help="print the answer as JSON")
    if quiet:
        parser.add_argument("-q", "--quiet", action="store_true", help="print nothing when it worked")
    parser.set_defaults(handler=_handler(module, function))
    return parser


def _egress_options(parser: argparse.ArgumentParser, mode_flag: str = "--egress") -> None:
    parser.add_argument(mode_flag, dest="egress", choices=get_args(EgressMode),
                        help="network policy, within the profile's (deny: none; open: any public host)")
    parser.add_argument("--allow", action="append", default=[], metavar="HOST",
                        help="a destination of an allowlist (repeatable): api.example.com, *.example.com, host:8443")


def _add_sessions(sub: Subcommands) -> None:
    parser = sub.add_parser("sessions", help="create, list, show, hibernate, fork and delete a service's sessions",
                            description="Sessions of a running service: a workspace folder and the kernels "
                                        "that keep state between runs.")
    commands = parser.add_subparsers(dest="sessions_command", required=True)
    create = _leaf(commands, "create", "create a session; prints its id", "sessions", "create_command")
    create.add_argument("--id", help="choose the id (default: one is generated)")
    create.add_argument("--profile", help="the session's profile (default: the service's)")
    create.add_argument("--ttl", type=float, metavar="SECONDS", help="remove it and its files this long after creation")
    create.add_argument("--idle-timeout", type=float, metavar="SECONDS", help="drop its kernel after this idle time")
    create.add_argument("--metadata", action="append", default=[], type=key_value, metavar="KEY=VALUE",
                        help="a label (repeatable)")
    create.add_argument("--temporary", "--ephemeral", dest="temporary", action="store_true",
                        help="start from nothing and leave no trace: files erased when it ends, no history, "
                             "no artifacts, code and output kept out of the audit log (--ephemeral: the old name)")
    create.add_argument("--template", help="start from this template of the workspace (files, packages, kernels)")
    create.add_argument("--starter", help="start with this web project, its node_modules ready (vite-react, "
                                          "tanstack-start)")
    _egress_options(create)
    _leaf(commands, "list", "list sessions", "sessions", "list_command")
    show = _leaf(commands, "show", "show a session", "sessions", "show_command", aliases=("get",))
    show.add_argument("session")
    hibernate = _leaf(commands, "hibernate", "save and drop sessions' kernels now (the next run restores them)",
                      "sessions", "hibernate_command", quiet=True,
                      description="Hibernate sessions now, as the service does after their idle timeout: the "
                                  "kernels' state is saved with the files and their memory freed, background "
                                  "processes end; the next run restores variables and imports. A session "
                                  "running code is refused (exit 65): cancel or wait for the run first.")
    hibernate.add_argument("sessions", nargs="+", metavar="SESSION")
    delete = _leaf(commands, "delete", "delete sessions and their files", "sessions", "delete_command",
                   json=False, quiet=True)
    delete.add_argument("sessions", nargs="+", metavar="SESSION")
    fork = _leaf(commands, "fork", "copy a session (files, packages, kernel state); prints the copies' ids",
                 "sessions", "fork_command")
    fork.add_argument("session")
    fork.add_argument("-n", "--count", type=int, default=1, help="how many copies (1 to 64; default 1)")
    _add_template_commands(commands, publish="publish", listing="templates", delete="unpublish")


def _add_template_commands(commands: Subcommands, *, publish: str, listing: str, delete: str) -> None:
    """The template commands, as `sessions publish|templates|unpublish` and `templates publish|list|delete`."""
    publisher = _leaf(commands, publish, "publish a session's state as a template of the workspace", "sessions",
                      "publish_command")
    publisher.add_argument("session")
    publisher.add_argument("name", help="the template's name (lower-case letters, digits, '.', '_', '-')")
    _leaf(commands, listing, "list the workspace's templates", "sessions", "templates_command")
    remover = _leaf(commands, delete, "delete templates", "sessions", "unpublish_command", json=False, quiet=True)
    remover.add_argument("names", nargs="+", metavar="NAME")


def _add_templates(sub: Subcommands) -> None:
    parser = sub.add_parser("templates", help="publish, list and delete the workspace's session templates",
                            description="Templates: a session's files, packages and kernel state under a name; "
                                        "`sessions create --template NAME` starts a session from one.")
    commands = parser.add_subparsers(dest="templates_command", required=True)
    _add_template_commands(commands, publish="publish", listing="list", delete="delete")


def _add_usage(sub: Subcommands) -> None:
    parser = sub.add_parser("usage", help="what a workspace used (executions, seconds, byte-hours, egress) and "
                                          "its budgets", description="Usage metering: sums per day, paying key or "
                                          "unit; budgets per workspace and unit for the UTC month (admin keys).")
    commands = parser.add_subparsers(dest="usage_command", required=True)
    report = _leaf(commands, "report", "usage of the key's workspace (admin: --workspace any, or all)", "usage",
                   "report_command", aliases=("show",))
    report.add_argument("--workspace", help="another workspace (admin keys)")
    report.add_argument("--member", help="a member's usage (a member key's id)")
    report.add_argument("--key", help="one API key's usage, by its id")
    report.add_argument("--unit", choices=get_args(UsageUnit))
    report.add_argument("--from", dest="since", type=date.fromisoformat, metavar="YYYY-MM-DD",
                        help="first UTC day included")
    report.add_argument("--to", dest="until", type=date.fromisoformat, metavar="YYYY-MM-DD",
                        help="last UTC day included")
    report.add_argument("--group-by", choices=("day", "key", "unit"), default="day")
    report.add_argument("--csv", action="store_true", help="print CSV (for a spreadsheet)")
    budgets = _leaf(commands, "budgets", "show or set a workspace's budgets for the month (admin keys)", "usage",
                    "budgets_command")
    budgets.add_argument("workspace")
    budgets.add_argument("--set", action="append", default=[], type=key_value, metavar="UNIT=AMOUNT",
                         help="set a budget (repeatable), e.g. executions=10000")
    budgets.add_argument("--unset", action="append", default=[], choices=get_args(UsageUnit), metavar="UNIT",
                         help="remove the workspace's own budget of UNIT (the configured default applies)")


def _add_exec(sub: Subcommands) -> None:
    parser = _leaf(sub, "exec", "run code in a session (or once), streaming its output; exits with its exit code",
                   "execution", "exec_command",
                   description="Run code on the service: in a session's kernel (`exec SESSION -c CODE`, "
                               "`exec SESSION FILE`, or --session; state is kept between runs), else once in a "
                               "throwaway workspace (`exec -c CODE`, `exec FILE`). Output is printed as it is "
                               "produced; the exit status is the program's.")
    parser.add_argument("first", nargs="?", metavar="SESSION",
                        help="the session to run in; given alone without -c it is the FILE of a one-shot run")
    parser.add_argument("file", nargs="?", metavar="FILE", help="a program file to run (`-`: read it from stdin)")
    parser.add_argument("-c", "--code", help="the code to run (instead of FILE)")
    parser.add_argument("-s", "--session", help="run in this session (default: a one-shot run)")
    parser.add_argument("-l", "--language", choices=get_args(Language),
                        help="default: by FILE's suffix, else the service's (python)")
    parser.add_argument("--profile", help="the profile (one-shot), or another one allowed for the session")
    parser.add_argument("--timeout", type=float, metavar="SECONDS", help="wall-clock limit of the run")
    parser.add_argument("--memory-mib", type=int, help="memory limit of the run")
    parser.add_argument("--env", action="append", default=[], type=key_value, metavar="KEY=VALUE",
                        help="a variable (repeatable)")
    parser.add_argument("--input", metavar="FILE", help="a local text file given to the program as its stdin")
    parser.add_argument("--fresh", action="store_true", help="with --session: a new instance, not the kernel")
    _egress_options(parser)


def _add_files(sub: Subcommands) -> None:
    parser = sub.add_parser("files", help="list, print, remove, upload and download a session's files",
                            description="The workspace of a session (paths are relative to /workspace).")
    commands = parser.add_subparsers(dest="files_command", required=True)
    ls = _leaf(commands, "ls", "list a folder", "files", "ls_command")
    ls.add_argument("session")
    ls.add_argument("path", nargs="?", default="", help="a folder (default: the workspace)")
    ls.add_argument("-R", "--recursive", action="store_true")
    cat = _leaf(commands, "cat", "print a file's bytes", "files", "cat_command", json=False)
    cat.add_argument("session")
    cat.add_argument("path")
    rm = _leaf(commands, "rm", "remove files (a folder with -r)", "files", "rm_command", quiet=True)
    rm.add_argument("session")
    rm.add_argument("paths", nargs="+", metavar="PATH")
    rm.add_argument("-r", "--recursive", action="store_true", help="remove a folder and what it holds")
    _add_transfer(commands, aliases=True)
    _add_transfer(sub)


def _add_transfer(commands: Subcommands, aliases: bool = False) -> None:
    """`upload` and `download` (with `aliases`, also named `put` and `get`, as under `files`)."""
    upload = _leaf(commands, "upload", "upload a local file or folder", "transfer", "upload_command", quiet=True,
                   aliases=("put",) if aliases else (),
                   description="Upload LOCAL (a file, or a folder and all it holds) to REMOTE in the session's "
                               "workspace (default: LOCAL's name; a REMOTE ending in / is a folder to put it in). "
                               "Symbolic links are skipped.")
    upload.add_argument("session")
    upload.add_argument("local")
    upload.add_argument("remote", nargs="?")
    download = _leaf(commands, "download", "download a file or a folder", "transfer", "download_command",
                     quiet=True, aliases=("get",) if aliases else (),
                     description="Download REMOTE (a file, or a folder as an archive extracted here; `/` is the "
                                 "whole workspace) to LOCAL (default: REMOTE's name here; into LOCAL when it is "
                                 "a folder; `-`: a file to stdout). Nothing existing is replaced without --force.")
    download.add_argument("session")
    download.add_argument("remote")
    download.add_argument("local", nargs="?")
    download.add_argument("--force", action="store_true", help="replace an existing local file")


def _add_packages(sub: Subcommands) -> None:
    parser = sub.add_parser("packages", help="install and list a session's packages")
    commands = parser.add_subparsers(dest="packages_command", required=True)
    install = _leaf(commands, "install", "install packages into a session (exit 65 if refused)", "packages",
                    "install_command")
    install.add_argument("session")
    install.add_argument("names", nargs="+", metavar="NAME", help="requirements: requests, 'pyyaml>=6'")
    install.add_argument("--npm", action="store_true", help="the names are npm packages (JavaScript)")
    install.add_argument("--index", help="another Python index (where the profile allows it)")
    listing = _leaf(commands, "list", "the session's installed Python packages (its lock)", "packages",
                    "list_command")
    listing.add_argument("session")


def _add_egress(sub: Subcommands) -> None:
    parser = sub.add_parser("egress", help="show or change where a session's runs may connect")
    commands = parser.add_subparsers(dest="egress_command", required=True)
    show = _leaf(commands, "show", "the session's network policy", "egress", "show_command", aliases=("get",))
    show.add_argument("session")
    change = _leaf(commands, "set", "change it (within the profile's policy) from the next run on", "egress",
                   "set_command")
    change.add_argument("session")
    change.add_argument("--mode", required=True, choices=get_args(EgressMode))
    change.add_argument("--allow", action="append", default=[], metavar="HOST",
                        help="a destination of an allowlist (repeatable)")
    reset = _leaf(commands, "reset", "go back to the profile's policy", "egress", "reset_command")
    reset.add_argument("session")


def _add_console(sub: Subcommands) -> None:
    parser = _leaf(sub, "console", "print a link that signs the browser console in as your key (once, within ten "
                                   "minutes)", "console", "console_command",
                   description="The service's browser console without pasting a key: the link signs the browser "
                               "in as the key this command uses, once; the key never reaches the browser.")
    parser.add_argument("--open", action="store_true", help="open it in the default browser too")


def add_service_commands(sub: Subcommands) -> None:
    """Add the commands of COMMANDS to a parser."""
    _add_sessions(sub)
    _add_exec(sub)
    _add_files(sub)
    _add_packages(sub)
    _add_egress(sub)
    _add_templates(sub)
    _add_usage(sub)
    _add_console(sub)
