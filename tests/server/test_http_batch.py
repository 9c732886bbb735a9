"""POST /v1/batch: NDJSON in, one NDJSON result per line out, streamed."""

import json

from server_helpers import assert_error_shape


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
    body = b'{"id": "a", "code": "print(1)"}\nnot json\n{"id": "b", "code": "print(2)", "unknown": 1}\n{"id": "c", "code": "print(3)"}\n'
    response = await client.post("/v1/batch", data=body)
    results = [json.loads(line) for line in (await response.text()).splitlines()]
    assert sorted(r["stdout"] for r in results if r["error"] is None) == ["1\n", "3\n"]
    invalid = [r for r in results if r["error"] and r["error"]["type"] == "InvalidRequest"]
    assert [r["id"] for r in invalid] == ["line 2", "line 3"] or sorted(r["id"] for r in invalid) == ["line 2", "line 3"]


async def test_unknown_profile_is_a_4xx_in_the_error_shape(client):
    response = await client.post("/v1/batch?profile=nope", data=b'{"code": "1"}\n')
    assert response.status == 422
    assert_error_shape(await response.json(), "unknown_profile")
