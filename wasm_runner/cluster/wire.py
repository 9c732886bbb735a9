"""What crosses between a batch's driver and its node actors: chunks of items, their results, node facts.

Items and results cross as msgpack bytes: cheaper than pickling Structs, and Ray keeps small
byte strings inline in its messages.
"""

from __future__ import annotations

import msgspec

import wasm_runner_protocol
from wasm_runner.evaluation.cache import runtime_fingerprint
from wasm_runner_protocol.execution import ExecRequest, ExecResult

__all__ = ["NodeInfo", "decode_requests", "decode_results", "encode_requests", "encode_results", "runtimes_fingerprint"]

encode_requests = encode_results = msgspec.msgpack.Encoder().encode
decode_requests = msgspec.msgpack.Decoder(list[ExecRequest]).decode
decode_results = msgspec.msgpack.Decoder(list[ExecResult]).decode


def runtimes_fingerprint() -> tuple[str, dict[str, str]]:
    """The protocol version and what decides each language's results here (see `runtime_fingerprint`)."""
    return wasm_runner_protocol.__version__, {language: runtime_fingerprint(language)
                                              for language in ("python", "javascript", "typescript")}


class NodeInfo(msgspec.Struct, frozen=True):
    """What an actor reports once its runtimes are ready: the driver leaves out a node whose
    runtimes differ from its own (a verdict must not depend on the node that gave it)."""

    host: str
    pid: int
    lanes: int
    version: str
    fingerprints: dict[str, str]
