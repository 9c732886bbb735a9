"""Batch runs over HTTP: NDJSON requests in, NDJSON results streamed out as they complete."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

import msgspec
from aiohttp import web
from msgspec import UNSET, Meta, UnsetType

from wasm_runner import ExecRequest, ExecResult, GuestError
from wasm_runner.api import Harness, Language

from .errors import ApiError
from .openapi import operation
from .service import SERVICE
from wasm_runner.wire import EnvMap, LimitsPatch, ProfileName, Tag

routes = web.RouteTableDef()

MAX_LINE_BYTES = 4 * 1024 * 1024


class BatchItem(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, omit_defaults=True):
    """One line of a batch: run `code` in a fresh instance (or check it against `tests`)."""

    code: Annotated[str, Meta(max_length=MAX_LINE_BYTES)]
    language: Language | UnsetType = UNSET
    harness: Harness = "script"
    tests: Annotated[str, Meta(max_length=MAX_LINE_BYTES)] = ""
    stdin: str = ""
    env: EnvMap = {}
    limits: LimitsPatch | None = None
    id: Tag | None = None


class BatchQuery(msgspec.Struct, forbid_unknown_fields=True):
    profile: ProfileName | None = None
    concurrency: int | None = None


_decode_item = msgspec.json.Decoder(BatchItem).decode
_encode = msgspec.json.Encoder().encode


def _rejected(line_number: int, item_id: str | None, message: str) -> ExecResult:
    return ExecResult(exit_code=2, id=item_id or f"line {line_number}",
                      error=GuestError(type="InvalidRequest", message=f"line {line_number}: {message}"))


@routes.post("/v1/batch")
@operation(summary="Run many one-shot requests: NDJSON in, NDJSON results out in completion order",
           tag="execution", body="application/x-ndjson", query=BatchQuery, response="application/x-ndjson",
           errors=(415, 422),
           description="Each line is a BatchItem; each output line an ExecResult with the item's id "
                       "(a line that cannot run gives a result with error.type InvalidRequest). Every "
                       "item runs in a fresh instance. Closing the connection stops the running items.")
async def batch(request: web.Request) -> web.StreamResponse:
    service = request.app[SERVICE]
    try:
        query = msgspec.convert(dict(request.query), BatchQuery, strict=False)
    except msgspec.ValidationError as exc:
        raise ApiError(422, "validation_error", str(exc), "query: profile=NAME&concurrency=N") from None
    _, profile = service.execution.profile(query.profile)
    runner = service.pool.get(profile)
    concurrency = max(1, min(query.concurrency or runner.concurrency, runner.concurrency))
    rejected: list[ExecResult] = []

    async def items() -> AsyncIterator[ExecRequest]:
        number = 0
        while line := await request.content.readline():
            number += 1
            if not line.strip():
                continue
            try:
                item = _decode_item(line)
                exec_request = service.execution.request(
                    profile, language=item.language, code=item.code, command=None, stdin=item.stdin,
                    env=item.env, limits=item.limits, fresh=True, id=item.id or str(number))
                service.execution.check_provider(runner, exec_request)
            except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                rejected.append(_rejected(number, None, str(exc)))
                continue
            except ApiError as exc:
                rejected.append(_rejected(number, None, exc.message))
                continue
            yield msgspec.structs.replace(exec_request, harness=item.harness, tests=item.tests)

    response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
    await response.prepare(request)
    async for result in runner.run_many(items(), concurrency=concurrency):
        while rejected:
            await response.write(_encode(rejected.pop(0)) + b"\n")
        await response.write(_encode(result) + b"\n")
    for bad in rejected:
        await response.write(_encode(bad) + b"\n")
    await response.write_eof()
    return response
