"""POST /v1/batch: NDJSON in, one NDJSON result per line out, streamed."""

import asyncio
import json

from server_helpers import assert_error_shape

from wasm_runner_server.http.routes.batch import MAX_LINE_BYTES, ndjson_lines


def ndjson(items):
    return "".join(json.dumps(item) + "\n" for item in items).encode()


async def test_batch_returns_one_result_per_item_with_verdicts(client):
    items = [{"id": f"ok{i}", "code": "def f(x): return x * 2", "harness": "check", "tests": f"assert f({i}) == {2 * i}"}
             for i in range(6)]
    items.append({"id": "bad", "code": "def f(x): return x", "harness": "check", "tests": "assert f(2) == 4"})
    items.append({"id": "plain", "code": "print('hello')"})
    response = await client.post("/v1/batch", data=ndjson(items), headers={"Content-Type": "application/x-ndjson"})
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("application/x-ndjson")
    results = [json.loads(line) for line in (await response.text()).splitlines()]
    by_id = {r["id"]: r for r in results}
    assert len(results) == len(items) == len(by_id)
    assert all(by_id[f"ok{i}"]["verdict"] == "passed" for i in range(6))
    assert by_id["bad"]["verdict"] == "failed" and by_id["bad"]["error"]["line"] == 1
    assert by_id["plain"]["stdout"] == "hello\n" and by_id["plain"]["verdict"] is None


async def test_a_bad_line_gets_an_error_result_and_the_rest_still_run(client):
    body = (b'{"id": "a", "code": "print(1)"}\nnot json\n{"id": "b", "code": "print(2)", "unknown": 1}\n'
            b'{"id": "c", "code": "print(3)"}\n')
    response = await client.post("/v1/batch", data=body)
    results = [json.loads(line) for line in (await response.text()).splitlines()]
    assert sorted(r["stdout"] for r in results if r["error"] is None) == ["1\n", "3\n"]
    invalid = [r for r in results if r["error"] and r["error"]["type"] == "InvalidRequest"]
    assert [r["id"] for r in invalid] == ["line 2", "line 3"] or sorted(r["id"] for r in invalid) == ["line 2", "line 3"]


async def test_unknown_profile_is_a_4xx_in_the_error_shape(client):
    response = await client.post("/v1/batch?profile=nope", data=b'{"code": "1"}\n')
    assert response.status == 422
    assert_error_shape(await response.json(), "unknown_profile")


async def test_a_batch_item_holds_an_execution_slot(serve):
    client = await serve(server={"concurrency": 1, "queue_size": 0})
    batch = asyncio.ensure_future(client.post("/v1/batch", data=ndjson(
        [{"id": "slow", "code": "import time; time.sleep(1.5); print('slow')"}])))
    for _ in range(200):
        metrics = await (await client.get("/metrics")).text()
        if "wasm_runner_exec_in_flight 1\n" in metrics:
            break
        await asyncio.sleep(0.02)
    response = await client.post("/v1/exec", json={"code": "print(1)"})
    assert response.status == 429  # the only slot is the batch item's, and nothing may queue
    assert_error_shape(await response.json(), "overloaded")
    results = [json.loads(line) for line in (await (await batch).text()).splitlines()]
    assert [r["stdout"] for r in results] == ["slow\n"]


async def test_a_batch_item_not_admitted_gets_a_rejected_result_and_the_batch_goes_on(serve):
    client = await serve(server={"concurrency": 1, "queue_size": 0})
    slow = asyncio.ensure_future(client.post("/v1/exec", json={"code": "import time; time.sleep(1.5)"}))
    for _ in range(200):
        metrics = await (await client.get("/metrics")).text()
        if "wasm_runner_exec_in_flight 1\n" in metrics:
            break
        await asyncio.sleep(0.02)
    response = await client.post("/v1/batch", data=ndjson([{"id": "a", "code": "print(1)"}]))
    results = [json.loads(line) for line in (await response.text()).splitlines()]
    assert len(results) == 1 and results[0]["id"] == "a" and results[0]["error"]["type"] == "Rejected"
    assert "overloaded" in results[0]["error"]["message"] and results[0]["error"]["hint"]
    assert (await slow).status == 200
    metrics = await (await client.get("/metrics")).text()
    assert 'wasm_runner_executions_total{language="python",mode="batch",outcome="rejected",limit=""} 1' in metrics


async def test_a_line_of_a_mebibyte_runs(client):
    filler = "a" * (1024 * 1024)
    line = json.dumps({"id": "big", "code": f"s = '{filler}'\nprint(len(s))"}).encode()
    assert len(line) > 1024 * 1024
    response = await client.post("/v1/batch", data=line + b"\n" + ndjson([{"id": "next", "code": "print(2)"}]))
    assert response.status == 200
    by_id = {r["id"]: r for r in map(json.loads, (await response.text()).splitlines())}
    assert by_id["big"]["error"] is None and by_id["big"]["stdout"] == f"{len(filler)}\n"
    assert by_id["next"]["stdout"] == "2\n"


async def test_a_line_over_4_mib_is_an_invalid_request_result_and_the_batch_goes_on(client):
    too_long = json.dumps({"id": "huge", "code": "#" + "x" * MAX_LINE_BYTES}).encode()

    async def body():  # streamed in small pieces, as a client uploading a big file would
        data = ndjson([{"id": "before", "code": "print(1)"}]) + too_long + b"\n" + ndjson(
            [{"id": "after", "code": "print(3)"}]) + b'{"id": "last", "code": "print(4)"}'  # no final newline
        for start in range(0, len(data), 65536):
            yield data[start:start + 65536]

    response = await client.post("/v1/batch", data=body())
    assert response.status == 200
    by_id = {r["id"]: r for r in map(json.loads, (await response.text()).splitlines())}
    assert set(by_id) == {"before", "line 2", "after", "last"}
    assert by_id["line 2"]["error"]["type"] == "InvalidRequest"
    assert f"longer than {MAX_LINE_BYTES} bytes" in by_id["line 2"]["error"]["message"]
    assert by_id["after"]["stdout"] == "3\n" and by_id["last"]["stdout"] == "4\n"


async def test_lines_are_split_across_chunks_and_only_those_past_the_limit_are_dropped():
    class Chunks:
        def __init__(self, chunks):
            self.chunks = chunks

        async def iter_any(self):
            for chunk in self.chunks:
                yield chunk

    async def lines(chunks, limit=4):
        return [line async for line in ndjson_lines(Chunks(chunks), limit)]

    assert await lines([b"ab", b"cd\nef", b"\n\n", b"g"]) == [b"abcd", b"ef", b"", b"g"]
    assert await lines([b"abcd\n", b"abcde\n", b"x\n"]) == [b"abcd", None, b"x"]  # the limit itself is allowed
    assert await lines([b"abc", b"de", b"fgh", b"\nok\n"]) == [None, b"ok"]
    assert await lines([b"abcdefgh"]) == [None]


async def test_batch_takes_the_io_harness_and_javascript_checks(client):
    items = [
        {"id": "io", "group": "sum", "code": "print(sum(map(int, input().split())))", "harness": "io",
         "cases": [{"stdin": "1 2", "expected": "3\n"}, {"stdin": "2 2", "expected": "5\n"}]},
        {"id": "js", "language": "javascript", "code": "const sq = (x) => x * x;", "harness": "check",
         "tests": "const assert = require('assert'); assert.strictEqual(sq(3), 9);"},
        {"id": "nocases", "code": "print(1)", "harness": "io"},
    ]
    response = await client.post("/v1/batch", data=ndjson(items))
    by_id = {r["id"]: r for r in (json.loads(line) for line in (await response.text()).splitlines())}
    assert (by_id["io"]["verdict"], by_id["io"]["failed_case"], by_id["io"]["group"]) == ("failed", 1, "sum")
    assert [c["verdict"] for c in by_id["io"]["cases"]] == ["passed", "failed"]
    assert by_id["js"]["verdict"] == "passed"
    assert by_id["line 3"]["error"]["type"] == "InvalidRequest" and "cases" in by_id["line 3"]["error"]["message"]
