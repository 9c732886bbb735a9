"""Identifiers are matched to their end: a trailing newline (raw or %0A) is a 4xx, never a new id."""

from __future__ import annotations

import json

import msgspec
import pytest
from server_helpers import assert_error_shape, call, new_session, raw_url

from wasm_runner_protocol.wire import SessionCreate
from wasm_runner_server.security.tenants import TenantStore


async def test_a_session_id_with_a_trailing_newline_is_refused_in_a_body(client):
    for bad in ("abc\n", "abc\r\n", "\nabc", "ab\nc"):
        status, data = await call(client, "POST", "/v1/sessions", json={"id": bad})
        assert status == 422, bad
        assert_error_shape(data, "validation_error")
    status, data = await call(client, "GET", "/v1/sessions")
    assert data["sessions"] == []


async def test_a_session_id_with_a_trailing_newline_in_the_url_is_a_404(client):
    sid = await new_session(client, id="abc")
    for suffix in ("%0A", "%0D%0A", "%0a"):
        for method, path in (("GET", ""), ("POST", "/exec"), ("GET", "/files/x.txt"), ("PUT", "/files/x.txt"),
                             ("DELETE", "")):
            kwargs = {"json": {"code": "print(1)"}} if path == "/exec" else {}
            async with client.session.request(method, raw_url(client, f"/v1/sessions/{sid}{suffix}{path}"),
                                      **kwargs) as response:
                assert response.status == 404, (method, path, suffix)
                assert_error_shape(await response.json(), "session_not_found")
    assert (await call(client, "GET", f"/v1/sessions/{sid}"))[0] == 200  # the real one is untouched


async def test_profile_and_env_names_with_a_trailing_newline_are_refused(client):
    sid = await new_session(client)
    for body in ({"code": "print(1)", "profile": "python\n"}, {"code": "print(1)", "env": {"NAME\n": "x"}}):
        status, data = await call(client, "POST", f"/v1/sessions/{sid}/exec", json=body)
        assert status == 422, body
        assert_error_shape(data)
    status, data = await call(client, "POST", "/v1/sessions", json={"profile": "python\n"})
    assert status == 422
    async with client.session.post(raw_url(client, "/v1/batch?profile=python%0A"), data=b'{"code": "1"}\n') as response:
        assert response.status == 422
        assert_error_shape(await response.json())


def test_the_wire_refuses_a_final_newline_the_dollar_anchor_would_let_through():
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(json.dumps({"id": "abc\n"}), type=SessionCreate)
    assert msgspec.json.decode(b'{"id": "abc"}', type=SessionCreate).id == "abc"


def test_a_workspace_name_with_a_trailing_newline_is_refused(tmp_path):
    store = TenantStore.in_data_dir(tmp_path)
    with pytest.raises(ValueError):
        store.create_key("team\n", "k")
    store.close()


async def test_schemas_keep_the_json_schema_end_anchor(client):
    text = await (await client.get("/openapi.json")).text()
    document = json.loads(text)
    assert "\\\\Z" not in text
    session_id = document["components"]["schemas"]["SessionCreate"]["properties"]["id"]
    patterns = [s.get("pattern") for s in session_id.get("anyOf", [session_id])]
    assert "^[A-Za-z0-9_-]{1,64}$" in patterns
