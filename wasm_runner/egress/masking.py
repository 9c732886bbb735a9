"""Masking brokered secrets: out of what the guest receives and out of what a run gives back.

One `Masker` serves both egress paths (the WASI host client and the native proxy) and the
run's results. It hides each secret as sent and in the forms a destination commonly reflects it
in: base64 (standard and URL-safe, padded or not, and at any alignment inside a longer base64
text, e.g. the base64 of a whole `Authorization` header), URL-encoding, hex (either case), a JSON
string escape, and, for a secret that is itself the base64 of `user:password`, the decoded pair
and the password. In responses a match becomes asterisks of the same length, so framing stays
valid; in what a run gives back it becomes `[redacted]`.

Compressed bodies cannot be searched: `BodyDecoder` undoes the content codings the host can
decode (gzip, deflate); a brokered request asks for `identity`, and a body in a coding the host
cannot undo is withheld (`UndecodableBody`). What masking cannot see is said in
docs/security/credentials.md: a destination that hashes, encrypts or splits the secret.
"""

from __future__ import annotations

import base64
import binascii
import json
import zlib
from collections.abc import Iterable
from urllib.parse import quote, quote_plus

from wasm_runner.errors import WasmRunnerError

MIN_DERIVED = 6
"""Derived forms shorter than this are not masked: they would hide ordinary text and reveal little."""
REDACTED = b"[redacted]"


def _base64_cores(secret: bytes) -> set[bytes]:
    """The base64 characters that depend only on `secret`, for each of its 3 alignments in a
    longer text: whatever surrounds it, these appear in that text's base64."""
    cores = set()
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + secret + b"\0\0")
        first = -(-8 * offset // 6)  # the first character without prefix bits
        last = 8 * (offset + len(secret)) // 6  # one past the last character without suffix bits
        cores.add(encoded[first:last])
    return cores


def _basic_parts(secret: bytes) -> set[bytes]:
    """A secret that is the base64 of `user:password` (Basic auth): the pair and the password."""
    try:
        decoded = base64.b64decode(secret, validate=True)
    except (binascii.Error, ValueError):
        return set()
    if b":" not in decoded or not decoded.isascii() or not decoded.decode().isprintable():
        return set()
    return {decoded, decoded.split(b":", 1)[1]}


def secret_forms(secret: bytes) -> set[bytes]:
    """`secret` and the encodings a destination may reflect it in (see the module's docstring)."""
    if not secret:
        return set()
    forms = {secret}
    derived: set[bytes] = set()
    for plain in {secret, *_basic_parts(secret)}:
        derived.add(plain)
        standard = base64.b64encode(plain)
        derived |= {standard, standard.rstrip(b"=")}
        cores = _base64_cores(plain)
        derived |= cores
        urlsafe = {form.replace(b"+", b"-").replace(b"/", b"_") for form in (standard, *cores)}
        derived |= urlsafe | {form.rstrip(b"=") for form in urlsafe}
        derived |= {plain.hex().encode(), plain.hex().upper().encode()}
        text = plain.decode("utf-8", "replace")
        for encoded in (quote(text, safe=""), quote(text), quote_plus(text)):
            derived |= {encoded.encode(), _lower_escapes(encoded).encode()}
        derived.add(json.dumps(text)[1:-1].encode())
        derived.add(json.dumps(text, ensure_ascii=False)[1:-1].replace("/", "\\/").encode())
    forms |= {form for form in derived if len(form) >= MIN_DERIVED}
    return forms


def _lower_escapes(text: str) -> str:
    """%2F as %2f: some encoders write percent escapes in lower case."""
    parts = text.split("%")
    return parts[0] + "".join("%" + part[:2].lower() + part[2:] for part in parts[1:])


class Masker:
    """Replaces every form of the given secrets with asterisks of the same length.

    Matching ignores ASCII case. `feed` works on a stream: it holds back a tail that begins some form (at most the longest
    form, less one byte) until the next chunk or `flush`, and passes everything else at once."""

    def __init__(self, secrets: Iterable[str | bytes], replacement: bytes | None = None) -> None:
        """`replacement`: what a match becomes (None: asterisks of its length)."""
        self.replacement = replacement
        forms: set[bytes] = set()
        for secret in secrets:
            forms |= secret_forms(secret.encode() if isinstance(secret, str) else secret)
        # Compared without case: a destination (or h11, for header names) may change it, and hex
        # comes in either; ASCII case folding keeps every byte where it was.
        self.forms = sorted({form.lower() for form in forms}, key=len, reverse=True)
        self.keep = max((len(form) for form in self.forms), default=1) - 1
        self.carry = b""

    def __bool__(self) -> bool:
        return bool(self.forms)

    def mask(self, data: bytes) -> bytes:
        """`data` with every form masked (a whole value: a header, a reason phrase, a result)."""
        if not self.forms:
            return data
        spans = []
        folded = data.lower()
        for form in self.forms:
            start = folded.find(form)
            while start >= 0:
                spans.append((start, start + len(form)))
                start = folded.find(form, start + 1)
        if not spans:
            return data
        merged: list[list[int]] = []
        for start, end in sorted(spans):  # overlapping or adjacent matches are masked as one
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        out, at = bytearray(), 0
        for start, end in merged:
            out += data[at:start]
            out += self.replacement if self.replacement is not None else b"*" * (end - start)
            at = end
        out += data[at:]
        return bytes(out)

    def text(self, value: str) -> str:
        """`value` with every form masked (lone surrogates kept as they were)."""
        if not self.forms or not value:
            return value
        return self.mask(value.encode("utf-8", "surrogatepass")).decode("utf-8", "surrogatepass")

    def feed(self, data: bytes) -> bytes:
        """The masked part of what was held plus `data` that no later byte can change: all of it
        but a tail that is the start of some form (a secret the next chunk may complete)."""
        if not self.forms:
            return data
        buffer = self.mask(self.carry + data)
        cut = self._pending(buffer)
        self.carry = buffer[cut:]
        return buffer[:cut]

    def _pending(self, buffer: bytes) -> int:
        """Where the longest tail of `buffer` that begins some form starts (len(buffer): none)."""
        window = max(len(buffer) - self.keep, 0)
        folded = buffer.lower()
        for start in range(window, len(buffer)):
            tail = folded[start:]
            if any(form.startswith(tail) for form in self.forms):
                return start
        return len(buffer)

    def cut_end(self, data: bytes, least: int = 4) -> bytes:
        """`data` with a tail of at least `least` bytes that begins some form masked too: the end of
        a text cut short (a capped stream) may hold a secret's first part."""
        if not self.forms:
            return data
        data = self.mask(data)
        cut = self._pending(data)
        if len(data) - cut < least:
            return data
        return data[:cut] + (self.replacement if self.replacement is not None else b"*" * (len(data) - cut))

    def flush(self) -> bytes:
        """What is held back (masked already): the stream is over."""
        tail, self.carry = self.carry, b""
        return tail


class UndecodableBody(WasmRunnerError, ValueError):
    """A body in a content coding the host cannot undo, so cannot mask: it is withheld."""


class DecodedTooLarge(WasmRunnerError, ValueError):
    """A compressed body that expands past the run's byte cap."""


class BodyDecoder:
    """Undoes a response's content codings (`Content-Encoding`, applied in order), streaming."""

    def __init__(self, content_encoding: str, limit: int) -> None:
        codings = [c.strip().lower() for c in content_encoding.split(",") if c.strip()]
        self.steps: list[zlib._Decompress | None] = []
        for coding in reversed(codings):
            if coding == "identity":
                continue
            if coding in ("gzip", "x-gzip"):
                self.steps.append(zlib.decompressobj(wbits=47))  # gzip or zlib header, detected
            elif coding == "deflate":
                self.steps.append(None)  # zlib-wrapped or raw: told apart by the first bytes
            else:
                raise UndecodableBody(f"the destination sent a {coding!r}-coded body though the host asked for "
                                      "identity; it cannot be checked for the run's credentials, so it was withheld")
        self.limit = limit
        self.produced = 0

    @staticmethod
    def needed(content_encoding: str | None) -> bool:
        return bool(content_encoding) and any(c.strip().lower() not in ("", "identity")
                                              for c in (content_encoding or "").split(","))

    def feed(self, data: bytes) -> bytes:
        for index, step in enumerate(self.steps):
            if step is None:
                if not data:
                    continue
                wbits = 15 if (data[0] & 0x0F) == 8 and int.from_bytes(data[:2], "big") % 31 == 0 else -15
                step = self.steps[index] = zlib.decompressobj(wbits=wbits)
            data = self._run(step, data)
        return data

    def flush(self) -> bytes:
        data = b""
        for step in self.steps:
            if step is not None:
                data = self._run(step, data)
                tail = step.flush()
                self._count(tail, 0)
                data += tail
        return data

    def _run(self, step: zlib._Decompress, data: bytes) -> bytes:
        try:
            out = step.decompress(data, max(self.limit - self.produced, 0) + 1)
        except zlib.error as exc:
            raise UndecodableBody(f"the destination's compressed body is corrupt ({exc}); it was withheld") from None
        self._count(out, len(step.unconsumed_tail))
        return out

    def _count(self, out: bytes, pending: int) -> None:
        self.produced += len(out)
        if self.produced > self.limit or pending:
            raise DecodedTooLarge(f"the compressed body expands past the run's network cap ({self.limit} bytes)")
