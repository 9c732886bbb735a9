"""What a run holding brokered credentials gives back, with their secrets masked.

The guest never receives a secret (egress/masking.py hides it in responses), yet a destination
may reflect it in a form masking cannot see, or the program may be handed it some other way.
So whatever such a run prints, streams, returns or raises passes the same `Masker` before it
leaves the provider: the streamed chunks (held back by at most a secret's longest form, less
one byte, until the next chunk or the run's end), and the result's text fields. The service's
audit rows are made from those results, and redact their own columns too.
"""

from __future__ import annotations

import threading

import msgspec

from wasm_runner.capture import OutputListener, Stream
from wasm_runner.egress.credentials import CredentialBroker
from wasm_runner.egress.masking import REDACTED, Masker
from wasm_runner_protocol.execution import ExecRequest, ExecResult, RichOutput


class RunRedactor:
    """The secrets of one run's credentials, masked in its output and result."""

    def __init__(self, secrets: list[str], rendered: list[str] | tuple[str, ...] = ()) -> None:
        """`rendered`: the header values made of the secrets (masked whole as well)."""
        self.secrets = (*secrets, *rendered)
        self.masker = Masker(self.secrets, REDACTED)
        self.ends = Masker(secrets, REDACTED)
        """For the end of a stream cut short: a header's fixed start ("Bearer") is not a secret's."""
        self._streams: dict[Stream, tuple[Masker, OutputListener]] = {}
        self._lock = threading.Lock()

    @classmethod
    def for_request(cls, request: ExecRequest) -> RunRedactor | None:
        """None when the request holds no credential whose secret the host can read."""
        if not request.credentials:
            return None
        broker = CredentialBroker(request.credentials)
        secrets = broker.secrets()
        return cls(secrets, [value for value in broker.sensitive() if value not in secrets]) if secrets else None

    def text(self, value: str) -> str:
        return self.masker.text(value)

    def _stream(self, value: str, cut: bool) -> str:
        """A stream's text; one cut at its cap may end in a secret's first part, masked too."""
        if not cut or not value:
            return self.masker.text(value)
        data = self.ends.cut_end(self.masker.mask(value.encode("utf-8", "surrogatepass")))
        return data.decode("utf-8", "surrogatepass")

    def listener(self, inner: OutputListener) -> OutputListener:
        """`inner`, told each chunk with the secrets masked (call `flush` when the run ends)."""
        def listen(stream: Stream, data: bytes) -> None:
            with self._lock:
                if stream not in self._streams:
                    self._streams[stream] = (Masker(self.secrets, REDACTED), inner)
                masked = self._streams[stream][0].feed(data)
            if masked:
                inner(stream, masked)
        return listen

    def flush(self) -> None:
        """Give each listener what its stream still holds back."""
        with self._lock:
            streams, self._streams = dict(self._streams), {}
        for stream, (masker, inner) in streams.items():
            tail = self.ends.cut_end(masker.flush())
            if tail:
                inner(stream, tail)

    def result(self, result: ExecResult) -> ExecResult:
        """`result` with every text it carries masked."""
        mask = self.masker.text
        result.stdout, result.stderr = self._stream(result.stdout, "stdout" in result.truncated), \
            self._stream(result.stderr, "stderr" in result.truncated)
        if result.value is not None:
            result.value = mask(result.value)
        if result.error is not None:
            error = result.error
            result.error = msgspec.structs.replace(
                error, message=mask(error.message), traceback=mask(error.traceback),
                source=mask(error.source) if error.source is not None else None,
                hint=mask(error.hint) if error.hint is not None else None)
        if result.outputs:
            result.outputs = [RichOutput(type=o.type, data=mask(o.data), plain=mask(o.plain) if o.plain else o.plain)
                              for o in result.outputs]
        for event in result.network:
            if event.reason is not None:
                event.reason = mask(event.reason)
        return result


def redact_result(request: ExecRequest, result: ExecResult) -> ExecResult:
    """`result` with the secrets of `request`'s credentials masked (unchanged without credentials)."""
    redactor = RunRedactor.for_request(request)
    return redactor.result(result) if redactor is not None else result
