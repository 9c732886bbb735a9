"""The wire: bad input is a 4xx in the one error shape; OpenAPI, health, readiness, metrics,
profiles"""

from __future__ import annotations

import pytest
from server_helpers import assert_error_shape, call, eventually, new_session, raw_url

from wasm_runner_server.config import load_config

pytestmark = pytest.mark.asyncio


@pytest.mark.parametrize("payload, status, code", [
    (b"{not json", 400, "invalid_json"),
    (b"", 400, "invalid_json"),
    (b"[1, 2]", 422, "validation_error"),
    (b"{}", 422, "validation_error"),
    (b'{"code": 5}', 422, "validation_error"),
    (b'{"code": "1", "limits": {"timeout_s": "fast"}}', 422, "validation_error"),
    (b'{"code": "1", "limits": {"timeout_s": -1}}', 422, "validation_error"),
    (b'{"code": "1", "language": "cobol"}', 422, "validation_error"),
    (b'{"code": "1", "surprise": true}', 422, "validation_error"),
    (b'{"code": "1", "limits": {"memory": 1}}', 422, "validation_error"),
    (b'{"code": "1", "env": {"A": 1}}', 422, "validation_error"),
    (b'{"code": "1", "files": {"a.bin": {"base64": "***"}}}', 422, "validation_error"),
    (b'{"code": "1", "limits": {"fuel": 4010031555484538372096}}', 422, "validation_error"),
    (b'{"code": "1", "limits": {"disk_bytes": 18446744073709551616}}', 422, "validation_error"),
])
async def test_bad_json_bodies_are_4xx_in_the_error_shape(client, payload, status, code):
    async with client.post("/v1/exec", data=payload, headers={"Content-Type": "application/json"}) as response:
        assert response.status == status
        assert response.headers["Content-Type"].startswith("application/json")
        assert_error_shape(await response.json(), code)


async def test_bad_bodies_on_other_endpoints(client):
    sid = await new_session(client)
    for method, path, payload in [
        ("POST", "/v1/sessions", b'{"ttl_s": "long"}'),
        ("POST", "/v1/sessions", b'{"bogus": 1}'),
        ("POST", f"/v1/sessions/{sid}/exec", b'{"fresh": "yes"}'),
        ("POST", f"/v1/sessions/{sid}/process", b'{"command": []}'),
        # past 64 bits: it could not cross to the worker process (it was a 500)
        ("POST", f"/v1/sessions/{sid}/process", b'{"command": ["true"], "limits": {"fuel": 4010031555484538372096}}'),
        ("POST", f"/v1/sessions/{sid}/exec", b'{"code": "1", "limits": {"output_bytes": 9223372036854775808}}'),
        ("PATCH", f"/v1/sessions/{sid}/files/x.txt", b'{"old_text": 1}'),
    ]:
        async with client.request(method, path, data=payload, headers={"Content-Type": "application/json"}) as response:
            assert response.status == 422, (method, path)
            assert_error_shape(await response.json(), "validation_error")


async def test_huge_bodies_are_413(serve):
    client = await serve(server={"max_body_bytes": 64 * 1024, "max_file_bytes": 100 * 1024})
    code = "x" * (128 * 1024)
    status, data = await call(client, "POST", "/v1/exec", json={"code": code})
    assert status == 413
    assert_error_shape(data, "body_too_large")
    sid = await new_session(client)
    status, data = await call(client, "PUT", f"/v1/sessions/{sid}/files/big.bin", data=b"x" * (200 * 1024))
    assert status == 413
    assert_error_shape(data, "file_too_large")
    status, data = await call(client, "GET", f"/v1/sessions/{sid}/files/big.bin")
    assert status == 404  # nothing half-written was left behind


async def test_wrong_media_type_unknown_routes_methods_and_queries(client):
    sid = await new_session(client)
    async with client.post("/v1/exec", data=b"--x--", headers={"Content-Type": "multipart/form-data; boundary=x"}) as r:
        assert r.status == 415
        assert_error_shape(await r.json(), "unsupported_media_type")
    async with client.post(f"/v1/sessions/{sid}/files", data=b"{}", headers={"Content-Type": "application/json"}) as r:
        assert r.status == 415
        assert_error_shape(await r.json(), "unsupported_media_type")
    status, data = await call(client, "GET", "/v1/nothing-here")
    assert status == 404
    assert_error_shape(data, "not_found")
    status, data = await call(client, "PUT", "/v1/sessions")
    assert status == 405
    assert_error_shape(data, "method_not_allowed")
    status, data = await call(client, "GET", "/v1/sessions", params={"limit": "lots"})
    assert status == 422
    assert_error_shape(data, "invalid_query")
    status, data = await call(client, "GET", "/v1/sessions", params={"unknown": "1"})
    assert status == 422
    status, data = await call(client, "GET", "/v1/sessions/not a valid id!")
    assert status == 404
    assert_error_shape(data, "session_not_found")
    async with client.session.get(raw_url(client, "/v1/sessions/%00/files/x")) as r:
        assert r.status == 404


async def test_openapi_document_is_generated_from_the_wire_structs(client):
    status, doc = await call(client, "GET", "/openapi.json")
    assert status == 200 and doc["openapi"] == "3.1.0"
    paths = doc["paths"]
    for path, methods in {
        "/v1/sessions": {"get", "post"}, "/v1/sessions/{id}": {"get", "delete"},
        "/v1/sessions/{id}/exec": {"post"}, "/v1/sessions/{id}/process": {"post"}, "/v1/exec": {"post"},
        "/v1/sessions/{id}/files": {"get", "post"}, "/v1/sessions/{id}/files/{path}": {"get", "put", "delete", "patch"},
        "/v1/sessions/{id}/glob": {"get"}, "/v1/sessions/{id}/grep": {"get"}, "/v1/sessions/{id}/archive": {"get"},
        "/v1/profiles": {"get"}, "/healthz": {"get"}, "/readyz": {"get"}, "/metrics": {"get"},
    }.items():
        assert methods <= set(paths[path]), path
    schemas = doc["components"]["schemas"]
    assert schemas["ExecBody"]["additionalProperties"] is False
    assert set(schemas["ErrorDetail"]["properties"]) == {"code", "message", "hint"}
    assert "ExecResult" in schemas and "OneShotResult" in schemas
    assert schemas["ExecResult"]["properties"]["outputs"]["items"] == {"$ref": "#/components/schemas/RichOutput"}
    assert set(schemas["RichOutput"]["properties"]["type"]["enum"]) == {"text/plain", "text/html", "image/png"}
    exec_ok = paths["/v1/sessions/{id}/exec"]["post"]["responses"]["200"]["content"]
    assert set(exec_ok) == {"application/json", "text/event-stream"}
    grep_params = {p["name"] for p in paths["/v1/sessions/{id}/grep"]["get"]["parameters"]}
    assert {"id", "pattern", "path", "glob", "ignore_case", "max_matches"} <= grep_params
    # the terminal (a WebSocket) and the preview redirect (any method) are documented too
    pty_params = {p["name"] for p in paths["/v1/sessions/{id}/pty"]["get"]["parameters"]}
    assert {"id", "cols", "rows", "command", "keep", "process", "offset"} <= pty_params
    assert "101" in paths["/v1/sessions/{id}/pty"]["get"]["responses"]
    proxy = paths["/v1/sessions/{id}/ports/{port}/{path}"]
    assert {"get", "post", "put", "patch", "delete"} <= set(proxy)
    port = next(p for p in proxy["get"]["parameters"] if p["name"] == "port")
    assert port["schema"] == {"type": "integer", "minimum": 1, "maximum": 65535}
    assert "307" in proxy["post"]["responses"]  # to the preview's own origin, never served here


async def test_openapi_documents_network_policies_on_sessions_and_calls(client):
    status, doc = await call(client, "GET", "/openapi.json")
    assert status == 200
    patch = doc["paths"]["/v1/sessions/{id}"]["patch"]
    assert patch["requestBody"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/SessionPatch"}
    assert {"200", "403", "404", "422"} <= set(patch["responses"])
    schemas = doc["components"]["schemas"]
    assert "egress" in schemas["SessionPatch"]["properties"] and "egress" in schemas["SessionCreate"]["properties"]
    for body in ("ExecBody", "ProcessBody", "OneShotBody"):
        assert "egress" in schemas[body]["properties"], body
    for path in ("/v1/sessions/{id}/exec", "/v1/sessions/{id}/process", "/v1/exec"):
        assert "403" in doc["paths"][path]["post"]["responses"], path  # a policy wider than allowed
    assert schemas["EgressPolicy"]["properties"]["allow"]["default"] == []


async def test_health_readiness_and_metrics(serve):
    client = await serve(server={"prepare_on_start": True})
    assert (await call(client, "GET", "/healthz")) == (200, {"status": "ok"})

    async def ready() -> bool:
        status, data = await call(client, "GET", "/readyz")
        return status == 200 and data["ready"] is True and data["checks"]["python"] == "ok"

    await eventually(ready, timeout=120)
    sid = await new_session(client)
    await call(client, "POST", f"/v1/sessions/{sid}/exec", json={"code": "print(1)"})
    await call(client, "POST", "/v1/exec", json={"code": "while True: pass", "limits": {"timeout_s": 0.2}})
    async with client.get("/metrics") as response:
        assert response.status == 200 and response.headers["Content-Type"].startswith("text/plain")
        text = await response.text()
    for line in (
        'wasm_runner_executions_total{language="python",mode="session",outcome="ok",limit=""} 1',
        'wasm_runner_executions_total{language="python",mode="oneshot",outcome="limit",limit="timeout"} 1',
        "wasm_runner_sessions_active 1", "wasm_runner_kernels_live 1", "wasm_runner_exec_queue_depth 0",
        'wasm_runner_execution_duration_seconds_count{language="python",mode="session"} 1',
        '# TYPE wasm_runner_http_request_duration_seconds histogram',
    ):
        assert line in text, line


async def test_profiles_come_from_builtins_and_the_config_file(serve, tmp_path):
    (tmp_path / "mounted").mkdir()
    (tmp_path / "mounted" / "data.txt").write_text("from the host")
    config_file = tmp_path / "wasm-runner.toml"
    config_file.write_text(f"""
default_profile = "python"

[limits.max]
timeout_s = 60

[profiles.reader]
description = "reads /data"
language = "python"
limits = {{ timeout_s = 5 }}
mounts = [{{ host = "{tmp_path / 'mounted'}", guest = "/data" }}]
env_allowlist = []
""")
    config = load_config(config_file)
    client = await serve(profiles={name: p.model_dump() for name, p in config.profiles.items()},
                         limits=config.limits.model_dump())
    status, data = await call(client, "GET", "/v1/profiles")
    assert status == 200 and data["default"] == "python"
    by_name = {p["name"]: p for p in data["profiles"]}
    assert {"python", "javascript", "python-data", "node", "bash", "reader"} <= set(by_name)
    assert by_name["python-data"]["provider"] == "native" and by_name["bash"]["language"] == "bash"
    assert by_name["reader"]["limits"]["timeout_s"] == 5
    assert by_name["reader"]["mounts"] == [{"guest": "/data", "read_only": True}]
    assert all(p["network"] == {"mode": "deny", "allow": []} for p in data["profiles"])
    assert data["max_limits"]["timeout_s"] == 60
    body = {"profile": "reader", "code": "print(open('/data/data.txt').read())"}
    status, result = await call(client, "POST", "/v1/exec", json=body)
    assert status == 200 and result["stdout"] == "from the host\n", result
    sid = await new_session(client)
    status, data = await call(client, "POST", f"/v1/sessions/{sid}/exec", json={"profile": "reader", "code": "1"})
    assert status == 409
    assert_error_shape(data, "profile_incompatible")
