"""PATCH /v1/sessions/{id} with expires_in_s: a session's end moved, later or earlier, within the maximum TTL."""

from __future__ import annotations

import time
from datetime import datetime

from server_helpers import assert_error_shape, call, eventually, new_session


def _expires(info: dict) -> float:
    return datetime.fromisoformat(info["expires_at"]).timestamp()


async def test_expires_in_moves_the_end_and_survives_a_restart(serve, tmp_path):
    client = await serve(tmp_path / "data", sessions={"ttl_s": 60, "max_ttl_s": 7200})
    sid = await new_session(client)
    status, info = await call(client, "PATCH", f"/v1/sessions/{sid}", json={"expires_in_s": 3600})
    assert status == 200, info
    assert abs(_expires(info) - (time.time() + 3600)) < 30
    status, info = await call(client, "GET", f"/v1/sessions/{sid}")
    assert abs(_expires(info) - (time.time() + 3600)) < 30
    await client.close()

    client = await serve(tmp_path / "data", sessions={"ttl_s": 60, "max_ttl_s": 7200})  # the same data
    status, info = await call(client, "GET", f"/v1/sessions/{sid}")
    assert status == 200 and abs(_expires(info) - (time.time() + 3600)) < 30


async def test_a_shorter_end_removes_the_session_then(serve, tmp_path):
    client = await serve(tmp_path / "data", sessions={"sweep_interval_s": 0.1})
    sid = await new_session(client)
    status, _ = await call(client, "PATCH", f"/v1/sessions/{sid}", json={"expires_in_s": 0.5})
    assert status == 200

    async def gone() -> bool:
        return (await call(client, "GET", f"/v1/sessions/{sid}"))[0] == 404

    await eventually(gone)


async def test_past_the_maximum_ttl_or_nothing_to_change_is_refused(serve, tmp_path):
    client = await serve(tmp_path / "data", sessions={"ttl_s": 60, "max_ttl_s": 600})
    sid = await new_session(client)
    status, body = await call(client, "PATCH", f"/v1/sessions/{sid}", json={"expires_in_s": 3600})
    assert status == 422
    assert_error_shape(body, "limit_exceeds_maximum")
    status, body = await call(client, "PATCH", f"/v1/sessions/{sid}", json={})
    assert status == 422 and "expires_in_s" in body["error"]["hint"]
    status, body = await call(client, "PATCH", f"/v1/sessions/{sid}", json={"expires_in_s": -1})
    assert status == 422
