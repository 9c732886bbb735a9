"""The masking of brokered secrets: every common encoding, split across chunks, in compressed
bodies; and what a credentialed run gives back, redacted."""

from __future__ import annotations

import base64
import gzip
import re
import zlib
from urllib.parse import quote, quote_plus

import pytest

from wasm_runner.egress.masking import BodyDecoder, DecodedTooLarge, Masker, UndecodableBody
from wasm_runner.egress.redaction import RunRedactor
from wasm_runner_protocol.execution import ExecResult, GuestError, RichOutput

SECRET = "sk-live/9f+Xq2=7ab&c"
"""Characters that base64, URL- and JSON-encoding all change."""


def encodings(value: str) -> list[bytes]:
    data = value.encode()
    return [data, base64.b64encode(data), base64.urlsafe_b64encode(data), base64.b64encode(data).rstrip(b"="),
            base64.urlsafe_b64encode(data).rstrip(b"="), quote(value, safe="").encode(), quote_plus(value).encode(),
            re.sub("%[0-9A-F]{2}", lambda m: m.group().lower(), quote(value, safe="")).encode(),
            data.hex().encode(), data.hex().upper().encode()]


@pytest.mark.parametrize("prefix", ["", "B", "Be", "Bearer ", "token="])
def test_every_encoding_of_a_text_holding_the_secret_is_masked(prefix):
    masker = Masker([SECRET])
    for encoded in encodings(prefix + SECRET + "!"):
        masked = masker.mask(b"<" + encoded + b">")
        assert len(masked) == len(encoded) + 2  # asterisks of the same length: framing stays valid
        for form in encodings(SECRET)[:1] + [base64.b64encode(SECRET.encode())[:-2]]:
            assert form not in masked, (encoded, masked)
        assert masked.count(b"*") >= len(SECRET), (encoded, masked)


def test_a_basic_auth_secret_hides_its_decoded_pair_and_password():
    secret = base64.b64encode(b"alice:pa55-w0rd!").decode()
    masked = Masker([secret]).mask(b'{"user": "alice", "password": "pa55-w0rd!", "auth": "alice:pa55-w0rd!"}')
    assert b"pa55-w0rd!" not in masked


def test_a_secret_split_across_chunks_is_masked_and_nothing_is_lost():
    data = b"before " + base64.b64encode(f"Bearer {SECRET}".encode()) + b" middle " + SECRET.encode() + b" after"
    for size in (1, 3, 7, 64):
        masker = Masker([SECRET])
        out = b"".join(masker.feed(data[i:i + size]) for i in range(0, len(data), size)) + masker.flush()
        assert out == Masker([SECRET]).mask(data) and len(out) == len(data)
        assert SECRET.encode() not in out and out.startswith(b"before ") and out.endswith(b" after")


def test_gzip_and_deflate_bodies_are_decoded_in_pieces():
    body = b"reflected: " + SECRET.encode() * 3
    raw = zlib.compressobj(wbits=-15)
    for coding, packed in (("gzip", gzip.compress(body)), ("deflate", zlib.compress(body)),
                           ("deflate", raw.compress(body) + raw.flush()), ("gzip, identity", gzip.compress(body))):
        decoder = BodyDecoder(coding, 1 << 20)
        assert b"".join(decoder.feed(packed[i:i + 5]) for i in range(0, len(packed), 5)) + decoder.flush() == body


def test_a_coding_the_host_cannot_undo_is_refused_and_a_bomb_stops_at_the_cap():
    with pytest.raises(UndecodableBody, match="br"):
        BodyDecoder("br", 1 << 20)
    with pytest.raises(DecodedTooLarge):
        BodyDecoder("gzip", 10_000).feed(gzip.compress(b"\0" * 10_000_000))
    assert not BodyDecoder.needed("identity") and BodyDecoder.needed("gzip")


def test_a_runs_result_and_stream_are_redacted():
    redactor = RunRedactor([SECRET])
    chunks: list[tuple[str, bytes]] = []
    listen = redactor.listener(lambda stream, data: chunks.append((stream, data)))
    printed = f"the token is {SECRET}\n".encode()
    for i in range(0, len(printed), 4):
        listen("stdout", printed[i:i + 4])
    redactor.flush()
    assert b"".join(data for _, data in chunks) == b"the token is [redacted]\n"
    result = redactor.result(ExecResult(stdout=SECRET, stderr=base64.b64encode(SECRET.encode()).decode(),
                                        value=repr(SECRET), outputs=[RichOutput(type="text/plain", data=SECRET)],
                                        error=GuestError(type="E", message=SECRET, traceback=f"x {SECRET}")))
    text = repr(result)
    assert SECRET not in text and base64.b64encode(SECRET.encode()).decode() not in text
    assert result.stdout == "[redacted]" and result.error is not None and result.error.message == "[redacted]"


def test_a_stream_cut_short_in_a_secret_does_not_keep_its_first_part():
    redactor = RunRedactor([SECRET])
    chunks: list[bytes] = []
    listen = redactor.listener(lambda stream, data: chunks.append(data))
    listen("stdout", b"ok\n" + SECRET[:12].encode())  # the cap cut the secret after 12 characters
    redactor.flush()
    assert b"".join(chunks) == b"ok\n[redacted]"
    result = redactor.result(ExecResult(stdout="ok\n" + SECRET[:12], truncated=["stdout"]))
    assert result.stdout == "ok\n[redacted]"
    assert redactor.result(ExecResult(stdout="ends in sk-l")).stdout == "ends in sk-l"  # not cut: kept as it is
    bearer = RunRedactor([SECRET], [f"Bearer {SECRET}"])
    assert bearer.result(ExecResult(stdout="a Bearer", truncated=["stdout"])).stdout == "a Bearer"
