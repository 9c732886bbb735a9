"""Batch runs over HTTP: NDJSON requests in, NDJSON results streamed out as they complete."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Annotated

import msgspec
from aiohttp import StreamReader, web
from msgspec import UNSET, Meta, UnsetType

from wasm_runner import ExecRequest, ExecResult, GuestError
from wasm_runner.cluster import ClusterUnavailableError
from wasm_runner.cluster.connection import connect
from wasm_runner.tools import Tool, ToolPolicy
from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_protocol.execution import Comparison, Harness, IoCase, Language
from wasm_runner_protocol.wire import EnvMap, LimitsPatch, ProfileName, Tag
from wasm_runner_server.errors import ApiError
from wasm_runner_server.http.openapi import operation
from wasm_runner_server.http.policy import POLICY
from wasm_runner_server.http.routes.exec import mcp_tools, tool_audit
from wasm_runner_server.sessions.service import SERVICE
from wasm_runner_server.sessions.tool_sets import run_allowlist, session_tools

routes = web.RouteTableDef()

MAX_LINE_BYTES = 4 * 1024 * 1024
"""The longest line (one item) read; a longer one is an InvalidRequest result and the batch goes on."""


class BatchItem(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, omit_defaults=True):
    """One line of a batch: run `code` in a fresh instance (or check it against `tests`)."""

    code: Annotated[str, Meta(max_length=MAX_LINE_BYTES)]
    language: Language | UnsetType = UNSET
    harness: Harness = "script"
    tests: Annotated[str, Meta(max_length=MAX_LINE_BYTES)] = ""
    cases: list[IoCase] = []
    """Harness `io`: the test cases (stdin, expected output, optional per-case timeout_s)."""
    compare: Comparison = "exact"
    tolerance: Annotated[float, Meta(ge=0, lt=1)] = 1e-6
    group: Tag | None = None
    """What the item belongs to (e.g. its task id), echoed in the result."""
    stdin: str = ""
    env: EnvMap = {}
    limits: LimitsPatch | None = None
    id: Tag | None = None


class BatchQuery(msgspec.Struct, forbid_unknown_fields=True):
    profile: ProfileName | None = None
    concurrency: int | None = None
    cluster: bool | None = None
    """Run on the server's Ray cluster (the default where one is configured) or on its own workers."""
    tools: Annotated[str, Meta(max_length=4096)] | None = None
    """The batch's tool set (code mode): comma-separated names of the profile's tools (its MCP servers',
    within its allowlist) that every item may call, each item's calls decided and recorded on their own.
    On a Ray cluster each node starts the profile's MCP servers for its own items."""


_decode_item = msgspec.json.Decoder(BatchItem).decode
_encode = msgspec.json.Encoder().encode


def _rejected(line_number: int, message: str, hint: str | None = None) -> ExecResult:
    return ExecResult(exit_code=2, id=f"line {line_number}",
                      error=GuestError(type="InvalidRequest", message=f"line {line_number}: {message}", hint=hint))


async def ndjson_lines(stream: StreamReader, max_bytes: int) -> AsyncIterator[bytes | None]:
    """The lines of a streamed body (without their newline), read as they arrive; None stands for
    a line longer than `max_bytes`, whose bytes are skipped, not held."""
    line = bytearray()
    too_long = False
    async for chunk in stream.iter_any():
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            if too_long or len(line) + end - start > max_bytes:
                yield None
            else:
                line += chunk[start:end]
                yield bytes(line)
            line.clear()
            too_long = False
            start = end + 1
        if not too_long:
            if len(line) + len(chunk) - start > max_bytes:
                too_long = True
                line.clear()
            else:
                line += chunk[start:]
    if too_long:
        yield None
    elif line:
        yield bytes(line)


@routes.post("/v1/batch")
@operation(summary="Run many one-shot requests: NDJSON in, NDJSON results out in completion order",
           tag="execution", body="application/x-ndjson", query=BatchQuery, response="application/x-ndjson",
           errors=(402, 403, 415, 422, 429, 503),
           description="Each line (at most 4 MiB) is a BatchItem; each output line an ExecResult with the "
                       "item's id. A line that cannot run (malformed, too long) gives a result with error.type "
                       "InvalidRequest; an item the server cannot admit now (all slots busy, workspace quota) "
                       "one with error.type Rejected; the batch goes on. Every item runs in a fresh instance "
                       "and counts as one execution (slots, workspace quotas, audit, metrics). Closing the "
                       "connection stops the running items. Where the server has a Ray cluster, the items run "
                       "on its nodes unless the query says cluster=false (an item whose node is lost runs "
                       "again elsewhere and its result says `retried`); 503 cluster_unavailable when it "
                       "cannot be reached. With ?tools=a,b every item may call those tools of the profile's MCP servers "
                       "(403 tool_not_allowed for a name outside the profile's allowlist); on a Ray cluster, "
                       "each node starts the profile's MCP servers for its own items.")
async def batch(request: web.Request) -> web.StreamResponse:
    service = request.app[SERVICE]
    try:
        query = msgspec.convert(dict(request.query), BatchQuery, strict=False)
    except msgspec.ValidationError as exc:
        raise ApiError(422, ErrorCode.VALIDATION_ERROR, str(exc), "query: profile=NAME&concurrency=N") from None
    profile_name, profile = service.execution.profile(query.profile)
    runner = service.pool.get(profile)
    settings = service.execution.config.cluster
    cluster = settings.cluster() if query.cluster is not False else None
    if query.cluster and cluster is None:
        raise ApiError(422, ErrorCode.CLUSTER_UNAVAILABLE, "this server has no Ray cluster configured",
                       "leave out ?cluster=true, or set [cluster] ray_address in the server's config")
    tools: list[Tool] | None = None
    tool_policy: ToolPolicy | None = None
    if query.tools is not None:
        chosen = session_tools([name.strip() for name in query.tools.split(",") if name.strip()], profile_name,
                               profile)
        if cluster is None:  # on a cluster, each node starts the profile's MCP servers for its items
            tools = await mcp_tools(service, profile_name, profile)
        # the batch's calls are audited under one id of its own (its items' throwaway sessions have none)
        tool_policy = ToolPolicy(call_timeout_s=profile.tool_call_timeout_s, allow=run_allowlist(profile, chosen),
                                 audit=tool_audit(request, f"batch-{uuid.uuid4().hex}"))
    if cluster is not None:
        concurrency = max(1, min(query.concurrency or settings.max_in_flight, settings.max_in_flight))
        try:
            await asyncio.to_thread(connect, cluster.address)
        except ClusterUnavailableError as exc:
            raise ApiError(503, ErrorCode.CLUSTER_UNAVAILABLE, str(exc),
                           "try again later, or send ?cluster=false to run the batch on this server") from None
    else:
        concurrency = max(1, min(query.concurrency or runner.concurrency, runner.concurrency))

    async def items() -> AsyncIterator[ExecRequest | ExecResult]:
        number = 0
        async for line in ndjson_lines(request.content, MAX_LINE_BYTES):
            number += 1
            if line is None:
                yield _rejected(number, f"the line is longer than {MAX_LINE_BYTES} bytes",
                                "send smaller items (one JSON object per line), or files through a session")
                continue
            if not line.strip():
                continue
            try:
                item = _decode_item(line)
                exec_request = service.execution.request(
                    profile, language=item.language, code=item.code, command=None, stdin=item.stdin,
                    env=item.env, limits=item.limits, fresh=True, id=item.id or str(number))
                service.execution.check_provider(runner, exec_request)
            except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                yield _rejected(number, str(exc))
                continue
            except ApiError as exc:
                yield _rejected(number, exc.message, exc.hint)
                continue
            if (item.harness == "io") != bool(item.cases):
                yield _rejected(number, "harness io needs `cases`, and only harness io takes them",
                                'e.g. {"harness": "io", "code": ..., "cases": [{"stdin": "1 2", "expected": "3"}]}')
                continue
            yield msgspec.structs.replace(exec_request, harness=item.harness, tests=item.tests, cases=item.cases,
                                          compare=item.compare, tolerance=item.tolerance, group=item.group)

    response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
    await response.prepare(request)
    hold = request.app[POLICY].batch_item_hold(request)
    results = service.execution.run_many(runner, items(), concurrency=concurrency, hold=hold, cluster=cluster,
                                         tools=tools, tool_policy=tool_policy,
                                         node_tools=profile if cluster is not None and tool_policy is not None else None)
    async with contextlib.aclosing(results):
        async for result in results:
            await response.write(_encode(result) + b"\n")
    await response.write_eof()
    return response
