"""What crosses between a batch's driver and its node actors: chunks of items, their results, node facts.

Items and results cross as msgpack bytes: cheaper than pickling Structs, and Ray keeps small
byte strings inline in its messages.
"""

from __future__ import annotations

from typing import Any

import msgspec

import wasm_runner_protocol
from wasm_runner.evaluation.cache import runtime_fingerprint
from wasm_runner_protocol.execution import ExecRequest, ExecResult

__all__ = ["NodeInfo", "NodeTools", "decode_requests", "decode_results", "encode_requests", "encode_results",
           "runtimes_fingerprint"]

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


class NodeTools(msgspec.Struct, frozen=True):
    """A batch's tools on the nodes (code mode): the MCP servers each node starts for itself, their
    credentials read from the node's own environment, which of their tools the items may call (None:
    all), those that need approval (refused there: no one on a node can give it), and the policy."""

    servers: tuple[dict[str, Any], ...]
    """Each an `McpServerConfig`, as its fields."""
    allow: tuple[str, ...] | None = None
    approval: tuple[str, ...] = ()
    call_timeout_s: float = 30.0
    max_calls: int = 200
    max_total_s: float = 60.0


encode_tools = msgspec.msgpack.Encoder().encode
decode_tools = msgspec.msgpack.Decoder(NodeTools).decode
