"""What to do about the common failures of sandboxed code: a hint added to its error."""

from __future__ import annotations

import re
from collections.abc import Sequence

from wasm_runner_protocol.egress import EgressPolicy, NetworkEvent
from wasm_runner_protocol.execution import GuestError
from wasm_runner_protocol.guest import GUEST_TMP, GUEST_WORKSPACE

_NETWORK = re.compile(r"socket|getaddrinfo|urllib|http\.client|ConnectionRefused|gaierror", re.I)
_ENV_LOOKUP = re.compile(r"environ\s*\[|getenv|environ\.get|process\.env|std\.getenv")
_OUTSIDE_PATH = re.compile(rf"""['"](/(?!{re.escape(GUEST_WORKSPACE[1:])}\b|{re.escape(GUEST_TMP[1:])}\b)[^'"]*)['"]""")

NETWORK_HINT = ("network access is denied in this sandbox (network policy deny): bring data in as files in "
                f"{GUEST_WORKSPACE}, or turn the network on for the session with PATCH /v1/sessions/{{id}} "
                '{"egress": "open"} (public destinations), within what its profile allows')
ENV_HINT = ("the sandbox sees only a few standard variables plus those passed in the request's `env` "
            "(or named by its profile); pass the variable explicitly")
OUTSIDE_HINT = f"only {GUEST_WORKSPACE} (the working directory) and {GUEST_TMP} are writable; other paths do not exist here"


DATA_MODULES = frozenset({"numpy", "pandas", "scipy", "sklearn", "matplotlib", "seaborn", "PIL", "openpyxl",
                          "contourpy", "joblib", "threadpoolctl", "cloudpickle", "narwhals"})
"""The data stack's main import names, for when the python-data environment is not built here
(then its own package records cannot be read: the provider passes those when it can)."""
_MISSING_MODULE = re.compile(r"No module named '([\w.]+)'")


def data_module_hint(module: str) -> str:
    return (f"{module} is not in the WebAssembly tier's Python; the python-data profile has it (native CPython "
            f"in bubblewrap, on the same files): run this code there, with \"profile\": \"python-data\" in the "
            "HTTP or MCP call (or the session's), --profile python-data on the command line, or "
            "ExecRequest(provider=\"native\") in the library")


SOCKET_HINT = ("raw sockets and name lookups are not available in WebAssembly; use urllib.request or "
               "http.client (fetch in JavaScript): the host makes those requests, as the run's network policy allows")
LIMIT_HINT = "fetch less, or ask the operator to raise the service's [egress] max_bytes"


def network_hint(events: Sequence[NetworkEvent], policy: EgressPolicy) -> str | None:
    """What to say about a WASI run's network failure, from the host's own decisions (None: nothing)."""
    for event in events:
        if event.reason and "network cap" in event.reason:
            return LIMIT_HINT
    refused = [event for event in events if not event.allowed]
    if refused:
        return allow_hint(refused[0])
    if events:
        return None  # the host made the requests: the failure is the destination's
    return NETWORK_HINT if policy.mode == "deny" else SOCKET_HINT


_NETWORK_ERRORS = frozenset({"PermissionError", "gaierror", "OSError", "ConnectionRefusedError", "ConnectionError",
                             "URLError", "NetworkDenied", "NetworkLimitExceeded"})


def with_hint(error: GuestError, network: str | None = NETWORK_HINT,
              data_modules: frozenset[str] = DATA_MODULES) -> GuestError:
    """The same error, with `hint` set when it is one of the common sandbox failures (`network`:
    what to say about a network failure, see `network_hint`; `data_modules`: the import names the
    python-data profile offers, read from its environment where it is built)."""
    if error.hint is not None:
        return error
    text = f"{error.message}\n{error.traceback}"
    hint = None
    if error.type in _NETWORK_ERRORS and (error.type.startswith("Network") or _NETWORK.search(text)):
        hint = network
    elif error.type == "ModuleNotFoundError" and (missing := _MISSING_MODULE.search(error.message)) \
            and missing.group(1).split(".")[0] in data_modules:
        hint = data_module_hint(missing.group(1).split(".")[0])
    elif error.type == "KeyError" and _ENV_LOOKUP.search(error.source or text):
        hint = ENV_HINT
    elif error.type in ("FileNotFoundError", "PermissionError", "NotADirectoryError", "OSError") and \
            _OUTSIDE_PATH.search(error.message):
        hint = OUTSIDE_HINT
    if hint is None:
        return error
    return GuestError(type=error.type, message=error.message, traceback=error.traceback, line=error.line,
                      source=error.source, hint=hint)


# -- native runs: the tools print their own errors, the host knows what it decided -------------

NATIVE_OFFLINE_ERRORS = (
    # What curl, pip, git, npm, uv, Python and Node.js print when there is no network at all.
    re.compile(r"curl: \(6\) Could not resolve host"),
    re.compile(r"Could not resolve host: "),  # git over HTTP(S) (libcurl)
    re.compile(r"Temporary failure in name resolution|Name or service not known"),  # pip, Python
    re.compile(r"Failed to establish a new connection|NewConnectionError"),  # pip (urllib3)
    re.compile(r"getaddrinfo (?:EAI_AGAIN|ENOTFOUND)"),  # npm, Node.js
    re.compile(r"dns error: failed to lookup address"),  # uv
    re.compile(r"Network is unreachable|ENETUNREACH"),
    re.compile(r"Could not find a suitable TLS CA certificate bundle"),  # pip: no bundle without a network
)
TURN_ON = ('turn it on for the session with PATCH /v1/sessions/{id} {"egress": "open"} (public destinations) '
           'or {"egress": {"mode": "allowlist", "allow": [...]}}, within what its profile allows')
NATIVE_DENY_HINT = f"this run's network policy is deny: the sandbox has no route out; {TURN_ON}"


def refusal_summary(mode: str, scheme: str, host: str, port: int, reason: str | None = None) -> str:
    """One line naming a refusal of the network policy and how to lift it: the proxy's reason phrase
    and body start with it, and a native run's stderr ends with it (curl prints neither for a tunnel)."""
    destination = f"{scheme}://{host}:{port}"
    if mode == "deny":
        return f"network policy deny: {destination} is not allowed; {TURN_ON}"
    why = f" ({reason})" if reason else ""
    return (f"network policy {mode}: {destination} is not allowed{why}; add \"{host}:{port}\" to the session's "
            f"allowlist (PATCH /v1/sessions/{{id}} {{\"egress\": {{\"mode\": \"allowlist\", \"allow\": [...]}}}}) "
            "or its profile's network.allow")


def refusal_note(events: Sequence[NetworkEvent], mode: str) -> str:
    """The lines a native run's stderr ends with, one per refused destination (from the host's own
    records): a tool that prints only `CONNECT tunnel failed, response 403` still has its refusal named."""
    refused = dict.fromkeys((e.scheme, e.host, e.port, e.reason) for e in events
                            if not e.allowed and not (e.reason and "network cap" in e.reason))
    return "".join(f"[wasm-runner] {refusal_summary(mode, scheme, host, port, reason)}\n"
                   for scheme, host, port, reason in refused)


def reason_phrase(mode: str, host: str) -> str:
    """The status line's reason of a refusal (what pip, npm and git print): printable ASCII, bounded."""
    text = f"network policy {mode}: {host} is not allowed"
    return "".join(ch for ch in text if " " <= ch <= "~")[:200]


def allow_hint(event: NetworkEvent) -> str:
    """How to allow a refused destination."""
    if event.reason and "private, loopback or link-local" in event.reason:
        return (f"{event.host} resolves to {event.address}, a private address: an entry must name that address "
                f"or its network (e.g. \"{event.address}:{event.port}\") in the profile's network.allow")
    return (f"add \"{event.host}\" (or \"{event.host}:{event.port}\") to the profile's network.allow, or pass "
            f"--allow-net {event.host}:{event.port} (a request may only narrow its profile's policy)")


def native_network_error(events: Sequence[NetworkEvent], policy: EgressPolicy, stderr: str) -> GuestError | None:
    """The error of a failed native run whose network was refused or cut (None: not that).

    Decided on the host's own records (the proxy's events, the run's policy); the program's
    output only tells which tool failed when there was no proxy at all (policy deny)."""
    for event in events:
        if event.reason and "network cap" in event.reason:
            return GuestError(type="LimitExceeded", message=f"{event.scheme}://{event.host}:{event.port}: {event.reason}",
                              hint=LIMIT_HINT)
    refused = [event for event in events if not event.allowed]
    if refused:
        names = ", ".join(dict.fromkeys(f"{e.scheme}://{e.host}:{e.port}" for e in refused))
        allowed = ", ".join(policy.allow) or "no entries"
        return GuestError(type="NetworkDenied",
                          message=f"the host refused {names}: {refused[0].reason} (network policy {policy.mode}, "
                                  f"allow: {allowed})",
                          hint=NATIVE_DENY_HINT if policy.mode == "deny" else allow_hint(refused[0]))
    if policy.mode == "deny" and any(pattern.search(stderr[-8000:]) for pattern in NATIVE_OFFLINE_ERRORS):
        return GuestError(type="NetworkDenied", message="the program tried to reach the network, and this run has none",
                          hint=NATIVE_DENY_HINT)
    return None
