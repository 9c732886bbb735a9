"""The client with API keys (a real server with keys on) and presigned links."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from wasm_runner_client import AuthenticationError, Client, NotFoundError
from wasm_runner_server.security.tenants import TenantStore


@pytest.fixture
def keyed_server(start_server, tmp_path: Path):
    data_dir = tmp_path / "keyed"
    data_dir.mkdir()
    tenants = TenantStore.in_data_dir(data_dir)
    key_a, _ = tenants.create_key("team-a", "a", "member")
    key_b, _ = tenants.create_key("team-b", "b", "member")
    tenants.close()
    return start_server(data_dir=data_dir, auth={"enabled": True}), key_a, key_b


def test_the_api_key_opens_the_callers_workspace_only(keyed_server) -> None:
    server, key_a, key_b = keyed_server
    with Client(server.url, api_key="") as anonymous:
        with pytest.raises(AuthenticationError) as caught:
            anonymous.create_session()
        assert caught.value.status == 401 and caught.value.code == "unauthorized" and caught.value.hint
    with Client(server.url, api_key=key_a) as a, Client(server.url, api_key=key_b) as b:
        sid = a.create_session().id
        assert a.exec(sid, "40 + 2").value == "42"
        with pytest.raises(NotFoundError) as other:
            b.exec(sid, "1")
        assert other.value.code == "session_not_found"
        assert [s.id for s in a.iter_sessions()] == [sid] and list(b.iter_sessions()) == []


def test_presigned_links_read_and_write_one_file_without_a_key(keyed_server) -> None:
    server, key_a, _ = keyed_server
    with Client(server.url, api_key=key_a) as client:
        sid = client.create_session().id
        client.write_file(sid, "report/out.txt", "results\n")
        link = client.presign(sid, "report/out.txt", expires_in=60)
        assert link.method == "GET" and link.url.startswith(server.url + "/") and 0 < link.expires_in <= 61  # whole seconds
        upload = client.presign(sid, "report/in.txt", method="PUT")
    assert httpx.get(link.url).text == "results\n"  # no Authorization header
    assert httpx.put(upload.url, content=b"uploaded").status_code in (200, 201)
    with Client(server.url, api_key=key_a) as client:
        assert client.read_text(sid, "report/in.txt") == "uploaded"
