"""Brokered credentials: secrets the host adds to requests on their way out.

A `Credential` names destinations, a header and where the host reads the secret (its own
environment or a file); the value is read when a request needs it and never handed to the
guest. A destination without a scheme gets the secret over https only: sending it in cleartext
takes a destination that says `http://`. `redact` masks every known secret, as it is and in its
common encodings (egress/masking.py), in text the host records (audit rows, errors).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from wasm_runner.egress.masking import Masker
from wasm_runner.egress.policy import Destination, normalise_host, parse_destination
from wasm_runner.errors import WasmRunnerError
from wasm_runner_protocol.egress import Credential

REDACTED = "[redacted]"
REDACTED_BYTES = REDACTED.encode()


class MissingSecretError(WasmRunnerError, RuntimeError):
    """A credential's secret is not where its configuration says (an operator's error)."""


def secret_value(credential: Credential) -> str:
    if credential.env is not None:
        value = os.environ.get(credential.env)
        if value is None:
            raise MissingSecretError(f"the credential's environment variable {credential.env} is not set on the host")
        return value
    if credential.file is not None:
        try:
            return Path(credential.file).read_text("utf-8").strip()
        except OSError as exc:
            raise MissingSecretError(f"the credential's file cannot be read: {exc.strerror}") from None
    raise MissingSecretError("a credential names neither env nor file")


def check_credential(credential: Credential) -> None:
    """ValueError unless the credential is well formed (its destinations parse, one source is named)."""
    for entry in credential.destinations:
        parse_destination(entry)
    if (credential.env is None) == (credential.file is None):
        raise ValueError("a credential takes exactly one of env or file")
    if "{secret}" not in credential.template:
        raise ValueError("a credential's template must contain {secret}")
    if not credential.header or any(c in credential.header for c in ":\r\n "):
        raise ValueError(f"{credential.header!r} is not a header name")


def carries(destination: Destination, scheme: str, host: str, port: int) -> bool:
    """Whether a credential bound to `destination` goes with a request to scheme://host:port: a
    destination without a scheme means https, so a secret is never sent in cleartext by default."""
    if destination.scheme is None and scheme != "https":
        return False
    return destination.matches_name(scheme, host, port)


class CredentialBroker:
    """The credentials of one run: which headers go to which destination."""

    def __init__(self, credentials: Sequence[Credential] = ()) -> None:
        self.credentials = tuple(credentials)

    def headers_for(self, scheme: str, host: str, port: int) -> dict[str, str]:
        """The headers to add to a request for this destination (MissingSecretError if a secret is missing)."""
        host = normalise_host(host)
        headers: dict[str, str] = {}
        for credential in self.credentials:
            if any(carries(parse_destination(d), scheme, host, port) for d in credential.destinations):
                headers[credential.header] = credential.template.replace("{secret}", secret_value(credential))
        return headers

    def secrets(self) -> list[str]:
        """The secret values it can read (for redaction), longest first."""
        values = []
        for credential in self.credentials:
            try:
                values.append(secret_value(credential))
            except MissingSecretError:
                continue
        return sorted((v for v in values if v), key=len, reverse=True)

    def sensitive(self) -> list[str]:
        """The secrets and the header values made of them (whose full encodings mask the secret to its
        last bit): what masking and redaction look for."""
        values = set(self.secrets())
        for credential in self.credentials:
            try:
                values.add(credential.template.replace("{secret}", secret_value(credential)))
            except MissingSecretError:
                continue
        return sorted((v for v in values if v), key=len, reverse=True)

    def redact(self, text: str) -> str:
        return Masker(self.sensitive(), REDACTED_BYTES).text(text)
