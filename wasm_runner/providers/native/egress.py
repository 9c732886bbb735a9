"""A native run's way out: its socket on the host's egress proxy, bridged into the sandbox.

The sandbox keeps its own network namespace (loopback only). When its policy is not `deny`
(and for a one-shot run under `deny` too, where the proxy refuses everything naming the policy),
the run gets a Unix socket on the proxy (egress/proxy.py) in a directory of its own, shown in
the sandbox at /run/egress; the relay (egress_relay.c compiled once, or where no C compiler is,
egress_relay.py run by the system's python3; started before the program) listens on
127.0.0.1:3128 there and forwards each connection to that socket. The standard proxy variables
point every usual tool (curl, pip, uv, npm, git, Python, Node.js with NODE_USE_ENV_PROXY) at it;
a program that ignores them has nothing else to connect to. NO_PROXY names only the loopback
names the policy does not allow: inside the sandbox those are the sandbox's own (a server the
guest started), while an allowed loopback or private address is the host's, reached through the
proxy. Under `deny` a kernel or background process has none of this.

The CA bundle's directory and each run's socket directory live under the directory the Runner
gives (`use_directory`: its scratch directory) and are removed by `close` and at each run's end.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from wasm_runner.egress.policy import EgressRules, ip_or_none
from wasm_runner.egress.proxy import SOCKET_NAME, EgressProxy, ProxyRun
from wasm_runner.egress.settings import EgressSettings
from wasm_runner.errors import WasmRunnerError
from wasm_runner.providers.native.bwrap import GUEST_CODE_DIR, Bind
from wasm_runner.providers.native.c_helpers import ensure_relay
from wasm_runner.workspace.process_dirs import process_dir
from wasm_runner_protocol.egress import EgressPolicy, NetworkEvent
from wasm_runner_protocol.execution import ExecRequest

RELAY_PORT = 3128
GUEST_EGRESS_DIR = "/run/egress"
GUEST_RELAY_BINARY = "/run/egress-relay"
GUEST_CA_BUNDLE = "/run/egress-ca/ca-certificates.crt"
RELAY_NAME = "egress-relay.py"
SYSTEM_PYTHON = "/usr/bin/python3"
SYSTEM_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")
RELAY_SOURCE = Path(__file__).with_name("egress_relay.py")
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
"""What tools would otherwise reach inside the sandbox itself (NO_PROXY), unless the policy allows it."""
MAX_SOCKET_PATH = 107
"""A Unix socket's path must fit sun_path (108 bytes with its NUL): when a run's socket under the
given directory would be longer, the system's temporary directory holds its directory instead
(removed all the same)."""
SETTLE_S = 1.0
"""How long a kernel call's end waits for its plain-HTTP requests in flight to be recorded."""
CA_VARIABLES = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "PIP_CERT",
                "NODE_EXTRA_CA_CERTS")


class EgressUnavailable(WasmRunnerError, RuntimeError):
    """This machine cannot give a native run its network (said to the caller)."""


class NativeEgress:
    """The provider's proxy and the CA bundle its sandboxes trust, shared by its runs."""

    def __init__(self, settings: EgressSettings | None = None, directory: Path | None = None) -> None:
        self.settings = settings or EgressSettings()
        self.proxy = EgressProxy(self.settings)
        self._lock = threading.Lock()
        self._bundle: Path | None = None
        self._relay_code: bytes | None = None
        self.directory = directory
        """Where the CA bundle and the runs' socket directories are made (None: the system's temporary directory)."""

    def use_directory(self, directory: Path) -> None:
        """Make what comes next under `directory` (a Runner's scratch directory, removed with it)."""
        self.directory = directory

    def temporary(self, prefix: str, socket: bool = False) -> Path:
        """A new private directory under `directory` (made if missing), named `prefix`-…; under this
        process's own temporary root (gone with the process, however it ends) when there is none or
        (for a `socket`'s directory) the socket's path under it would be too long."""
        parent = self.directory
        too_long = socket and len(f"{parent}/{prefix}-12345678/{SOCKET_NAME}") > MAX_SOCKET_PATH
        if parent is not None and not too_long:
            parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            return Path(tempfile.mkdtemp(prefix=f"{prefix}-", dir=parent))
        return process_dir(prefix)

    def close(self) -> None:
        """Remove the CA bundle's directory (made again by the next run that needs it)."""
        with self._lock:
            if self._bundle is not None:
                shutil.rmtree(self._bundle.parent, ignore_errors=True)
                self._bundle = None

    def relay_binary(self) -> Path | None:
        """The compiled relay (c_helpers.py, looked for once per process), or None: runs use the
        Python one (`relay_code`)."""
        return ensure_relay()

    def relay_code(self) -> bytes:
        if self._relay_code is None:
            self._relay_code = RELAY_SOURCE.read_bytes()
        return self._relay_code

    def bundle(self) -> Path:
        """The system's trust store plus the operator's extra CA, as one file (made once)."""
        with self._lock:
            if self._bundle is not None and self._bundle.is_file():
                return self._bundle
            parts = []
            for candidate in SYSTEM_BUNDLES:
                if os.path.isfile(candidate):
                    parts.append(Path(candidate).read_bytes())
                    break
            if self.settings.extra_ca_file is not None:
                parts.append(Path(self.settings.extra_ca_file).read_bytes())
            directory = self.temporary("ca")
            directory.chmod(0o755)  # certificates are public; every sandbox user reads them
            path = directory / "ca-certificates.crt"
            path.write_bytes(b"\n".join(part.rstrip(b"\n") + b"\n" for part in parts))
            path.chmod(0o444)
            self._bundle = path
            return path

    def open(self, request: ExecRequest, deadline: float, owner: tuple[int, int] | None,
             per_connection: bool = False) -> RunEgress:
        """The run's socket on the proxy (`per_connection`: the byte cap bounds each of its connections)."""
        if self.relay_binary() is None and not os.access(SYSTEM_PYTHON, os.X_OK):
            raise EgressUnavailable(f"native network access needs the system's python3 ({SYSTEM_PYTHON}) for the "
                                    "sandbox's relay: run scripts/install-native.sh (apt-get install python3)")
        return RunEgress(self, request, deadline, owner, per_connection)


class RunEgress:
    """One run's proxy socket, the binds and variables that reach it, and its decisions."""

    def __init__(self, egress: NativeEgress, request: ExecRequest, deadline: float,
                 owner: tuple[int, int] | None, per_connection: bool = False) -> None:
        self.egress = egress
        self.directory = egress.temporary("net", socket=True)
        try:
            if owner is not None:
                os.chown(self.directory, *owner)
            self.run: ProxyRun = egress.proxy.open(EgressRules(request.effective_egress), request.credentials, deadline,
                                                   self.directory, owner, per_connection)
        except BaseException:
            shutil.rmtree(self.directory, ignore_errors=True)
            raise
        self.bundle = egress.bundle()
        self.relay_binary = egress.relay_binary()
        self.events: list[NetworkEvent] | None = None

    def binds(self) -> list[Bind]:
        binds = [Bind(self.directory, GUEST_EGRESS_DIR), Bind(self.bundle, GUEST_CA_BUNDLE)]
        if self.relay_binary is not None:
            binds.append(Bind(self.relay_binary, GUEST_RELAY_BINARY))
        return binds

    def env(self) -> dict[str, str]:
        proxy = f"http://127.0.0.1:{RELAY_PORT}"
        env: dict[str, str] = {}
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
            env[name] = env[name.lower()] = proxy
        env["NO_PROXY"] = env["no_proxy"] = no_proxy(self.run.rules)
        env["NODE_USE_ENV_PROXY"] = "1"  # Node.js 24's fetch and http follow HTTP(S)_PROXY only when asked
        for name in CA_VARIABLES:
            env[name] = GUEST_CA_BUNDLE
        return env

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` started behind the relay (which listens before the program starts): the compiled one,
        else the Python one (the run shows its code at GUEST_CODE_DIR/RELAY_NAME)."""
        relay = ([GUEST_RELAY_BINARY] if self.relay_binary is not None
                 else [SYSTEM_PYTHON, "-I", "-S", f"{GUEST_CODE_DIR}/{RELAY_NAME}"])
        return [*relay, str(RELAY_PORT), f"{GUEST_EGRESS_DIR}/{SOCKET_NAME}", "--", *argv]

    def renew(self, request: ExecRequest, deadline: float) -> None:
        """Serve the next call of the sandbox that keeps this socket (a kernel), under that call's
        policy, credentials and deadline."""
        self.run.renew(EgressRules(request.effective_egress), request.credentials, deadline)

    def set_policy(self, policy: EgressPolicy) -> None:
        """Hold the connections made from now on to `policy` (an owner whose policy changed while it runs)."""
        self.run.set_rules(EgressRules(policy))

    def decisions(self) -> list[NetworkEvent]:
        """The decisions since the socket opened or was last renewed (all of them once closed)."""
        if self.events is not None:
            return self.events
        self.run.settle(SETTLE_S)
        return self.run.network()

    def take_decisions(self) -> list[NetworkEvent]:
        """The decisions made since the last take (each given once), for an owner that runs for long."""
        return self.run.take_events()

    def watch(self, on_record: Callable[[int], None]) -> None:
        """Call `on_record(held)` after each decision (on the proxy's thread), `held` those not taken yet."""
        self.run.on_record = on_record

    def close(self) -> list[NetworkEvent]:
        """Stop the run's socket (its connections are cut) and give its decisions, in order."""
        if self.events is None:
            self.events = self.egress.proxy.close(self.run)
            shutil.rmtree(self.directory, ignore_errors=True)
        return self.events


def no_proxy(rules: EgressRules) -> str:
    """The loopback names tools reach directly (the sandbox's own loopback): those the policy does
    not allow. An allowed one goes through the proxy to the host, as any allowed destination."""
    kept = []
    for name in LOOPBACK_NAMES:
        address = ip_or_none(name)
        allowed = any(entry.network is not None and address is not None and address in entry.network
                      or entry.name is not None and not entry.wildcard and entry.name == name
                      for entry in rules.entries)
        if not allowed:
            kept.append(name)
    return ",".join(kept)
