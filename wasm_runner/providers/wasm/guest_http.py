"""The host side of a WASI guest's HTTP requests: an import answered by the execution's `GuestNetwork`.

The Python guest calls the WIT import `http-request` (JSON, bodies in base64); the JavaScript guest
writes to host-only descriptors (a JSON head framed with the body's bytes). The messages:

    {"op": "request", "method", "url", "headers": [[name, value]], "body": base64, "follow": bool}
        -> {"ok": true, "handle", "status", "reason", "headers", "url", "redirected", "body": base64, "eof"}
    {"op": "read", "handle", "size"} -> {"ok": true, "body": base64, "eof"}
    {"op": "close", "handle"} -> {"ok": true}
    any failure -> {"ok": false, "error": {"kind": "denied" | "limit" | "failed" | "invalid", "message", "hint"}}

The import is linked once per engine; which execution asks is told by the worker thread
running it (`serve`, set around each execution by the provider), like `guest_installs`.
An answer never raises into the guest (an exception in a host function poisons the instance).
"""

from __future__ import annotations

import base64
import json
import logging
import struct
import threading
from collections.abc import Callable, Sequence
from typing import Any

from wasm_runner.egress.host_client import EgressError, HostClient, HostRun
from wasm_runner_protocol.egress import Credential, EgressPolicy, NetworkEvent

IMPORT_NAME = "http-request"
MAX_REQUEST_BODY = 64 * 1024 * 1024
"""A request body larger than this is refused before the run's cap is even asked."""
log = logging.getLogger("wasm_runner")

_current = threading.local()


class GuestNetwork:
    """One execution's way out: its policy, credentials and deadline; the run opens on first use."""

    def __init__(self, client: HostClient, policy: EgressPolicy, credentials: Sequence[Credential],
                 deadline: float) -> None:
        self.client = client
        self.policy = policy
        self.credentials = tuple(credentials)
        self.deadline = deadline
        self.run: HostRun | None = None

    def handle(self, text: str) -> str:
        """Answer one JSON message from the guest (bodies in base64), whatever it holds."""
        def parse() -> tuple[dict[str, Any], bytes]:
            message = json.loads(text)
            if not isinstance(message, dict):
                raise ValueError("not an object")
            return message, base64.b64decode(message.get("body") or "")

        head, body = self._answer(parse)
        if "eof" in head:  # an answer that carries a body (perhaps empty)
            head["body"] = base64.b64encode(body).decode("ascii")
        return json.dumps(head)

    def handle_binary(self, data: bytes) -> bytes:
        """Answer one framed message (a 4-byte little-endian length, a JSON head, the body), framed alike."""
        def parse() -> tuple[dict[str, Any], bytes]:
            if len(data) < 4:
                raise ValueError("too short")
            (length,) = struct.unpack_from("<I", data)
            message = json.loads(data[4:4 + length])
            if not isinstance(message, dict):
                raise ValueError("not an object")
            return message, data[4 + length:]

        head, body = self._answer(parse)
        encoded = json.dumps(head).encode()
        return struct.pack("<I", len(encoded)) + encoded + body

    def _answer(self, parse: Callable[[], tuple[dict[str, Any], bytes]]) -> tuple[dict[str, Any], bytes]:
        try:
            message, body = parse()
            return self._dispatch(message, body)
        except EgressError as exc:
            error: dict[str, Any] = {"kind": exc.kind, "message": str(exc)}
            if exc.hint:
                error["hint"] = exc.hint
            return {"ok": False, "error": error}, b""
        except (ValueError, TypeError, KeyError, struct.error) as exc:
            return {"ok": False, "error": {"kind": "invalid", "message": f"a malformed request: {exc}"}}, b""
        except Exception as exc:  # noqa: BLE001 - the guest gets an error, the instance stays usable
            log.exception("a guest's HTTP request failed on the host")
            return {"ok": False, "error": {"kind": "failed", "message": f"the host failed: {exc}"}}, b""

    def _dispatch(self, message: dict[str, Any], body: bytes) -> tuple[dict[str, Any], bytes]:
        op = message.get("op")
        if op == "request":
            if len(body) > MAX_REQUEST_BODY:
                raise EgressError(f"a request body of {len(body)} bytes is larger than the host takes "
                                  f"({MAX_REQUEST_BODY})")
            headers = [(str(n), str(v)) for n, v in message.get("headers") or ()]
            answer = self.host_run().request(str(message["method"]), str(message["url"]), headers, body,
                                             follow=bool(message.get("follow")))
            return {"ok": True, "handle": answer.handle, "status": answer.status, "reason": answer.reason,
                    "headers": answer.headers, "url": answer.url, "redirected": answer.redirected,
                    "eof": answer.eof}, answer.body
        if self.run is None:
            return {"ok": True, "eof": True}, b""
        if op == "read":
            data, eof = self.run.read(int(message["handle"]), int(message.get("size") or 65536))
            return {"ok": True, "eof": eof}, data
        if op == "close":
            self.run.release(int(message["handle"]))
            return {"ok": True}, b""
        raise ValueError(f"unknown op {op!r}")

    def host_run(self) -> HostRun:
        if self.run is None:
            self.run = self.client.open(self.policy, self.credentials, self.deadline)
        return self.run

    def close(self) -> list[NetworkEvent]:
        """End what is still open; the execution's decisions, in order (none if it asked for nothing)."""
        return self.run.close() if self.run is not None else []


def serve(network: GuestNetwork | None) -> GuestNetwork | None:
    """Calls on this thread answer the guest's HTTP requests with `network` (None: refused);
    returns the one it replaces, to put back when the execution ends."""
    previous = getattr(_current, "network", None)
    _current.network = network
    return previous


def current() -> GuestNetwork | None:
    return getattr(_current, "network", None)


NO_NETWORK = {"ok": False, "error": {"kind": "denied", "message": "this guest has no network here"}}


def answer_text(text: str) -> str:
    network = current()
    return json.dumps(NO_NETWORK) if network is None else network.handle(text)


def answer_binary(data: bytes) -> bytes:
    network = current()
    if network is None:
        encoded = json.dumps(NO_NETWORK).encode()
        return struct.pack("<I", len(encoded)) + encoded
    return network.handle_binary(data)


def answer(_store: Any, request: str) -> str:
    """The WIT import's host function."""
    return answer_text(request)
