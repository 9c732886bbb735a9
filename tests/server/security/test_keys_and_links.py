"""API keys (hashed, constant-time, revocable at once, never logged) and presigned links."""

from __future__ import annotations

import argparse
import asyncio
import logging

from server_helpers import link_path

from wasm_runner_server.cli.commands import add_audit_command, add_keys_command
from wasm_runner_server.security.presign import Signer


async def test_no_key_and_bad_key_answer_401_with_what_to_do(secure):
    status, body, headers = await secure.call("GET", "/v1/sessions")
    assert status == 401 and body["error"]["code"] == "unauthorized" and "Bearer" in headers["WWW-Authenticate"]
    assert "wasm-runner keys create" in body["error"]["hint"]
    status, body, _ = await secure.call("GET", "/v1/sessions", headers={"Authorization": "Bearer wr_nope_x"})
    assert status == 401 and body["error"]["code"] == "invalid_key"
    assert "cannot be recovered" in body["error"]["hint"] and "revoke" in body["error"]["hint"]
    for public in ("/healthz", "/readyz", "/metrics", "/openapi.json"):
        assert (await secure.call("GET", public))[0] in (200, 503)


async def test_key_is_stored_only_as_a_hash_and_listed_by_prefix(secure):
    key = secure.keys["a_member"]
    assert key.startswith("wr_")
    raw = b"".join(p.read_bytes() for p in secure.data_dir.glob("tenants.sqlite3*"))
    assert key.encode() not in raw
    status, data, _ = await secure.call("GET", "/v1/admin/keys?workspace=alpha", "admin")
    assert status == 200
    assert {k["prefix"] for k in data["keys"]} == {secure.keys["a_member"][:15], secure.keys["a_app"][:15]}
    assert all("key" not in k for k in data["keys"]) and {"created_at", "last_used_at", "kind", "name"} <= set(data["keys"][0])
    status, own, _ = await secure.call("GET", "/v1/admin/keys", "a_member")  # keys.own: its own key only
    assert status == 200 and [k["prefix"] for k in own["keys"]] == [secure.keys["a_member"][:15]]
    status, error, _ = await secure.call("GET", "/v1/admin/keys", "a_app")
    assert status == 403 and error["error"]["code"] == "permission_denied" and "keys.read" in error["error"]["message"]


async def test_revoked_key_is_refused_at_once(secure):
    status, new, _ = await secure.call("POST", "/v1/admin/keys", "admin",
                                       json={"workspace": "alpha", "name": "temp", "kind": "app"})
    assert status == 201 and new["key"].startswith(new["prefix"] + "_")
    headers = {"Authorization": f"Bearer {new['key']}"}
    assert (await secure.call("GET", "/v1/sessions", headers=headers))[0] == 200
    status, _, _ = await secure.call("DELETE", f"/v1/admin/keys/{new['prefix']}", "admin")
    assert status == 200
    assert (await secure.call("GET", "/v1/sessions", headers=headers))[0] == 401


def test_keys_cli_create_list_revoke(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    add_keys_command(sub)
    add_audit_command(sub)
    run = lambda *argv: (lambda a: a.handler(a))(parser.parse_args(list(argv)))  # noqa: E731
    assert run("keys", "create", "--workspace", "w1", "--name", "ci", "--kind", "app", "--data-dir", str(tmp_path)) == 0
    out = capsys.readouterr()
    key = out.out.strip()
    assert key.startswith("wr_") and "only time the key is shown" in out.err
    assert run("keys", "list", "--data-dir", str(tmp_path)) == 0
    listing = capsys.readouterr().out
    assert key[:15] in listing and key not in listing and "active" in listing
    assert run("keys", "revoke", key[:15], "--data-dir", str(tmp_path)) == 0
    run("keys", "list", "--data-dir", str(tmp_path))
    assert "revoked" in capsys.readouterr().out
    assert run("keys", "revoke", key[:15], "--data-dir", str(tmp_path)) == 1


async def test_keys_never_appear_in_logs_and_fresh_install_says_how_to_start(start_secure, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    secure = await start_secure(data_dir=tmp_path / "fresh", keys={})
    assert any("wasm-runner keys create --workspace admin" in r.getMessage() for r in caplog.records)
    from wasm_runner_server.security.tenants import TenantStore

    store = TenantStore.in_data_dir(tmp_path / "fresh")
    key, _ = store.create_key("alpha", "k")
    store.close()
    secure.keys["k"] = key
    await secure.call("GET", "/v1/sessions", "k")
    await secure.call("GET", "/v1/sessions", headers={"Authorization": f"Bearer {key}x"})
    text = "\n".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    assert key not in text and key[15:] not in text


async def test_no_auth_is_loudly_logged(start_secure, tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    secure = await start_secure(data_dir=tmp_path / "local", keys={}, auth={"enabled": False})
    assert any("AUTHENTICATION IS DISABLED" in r.getMessage() for r in caplog.records)
    assert (await secure.call("POST", "/v1/sessions", json={}))[0] == 201


def test_serve_requires_keys_unless_no_auth():
    from wasm_runner_server.cli.serve import add_serve_command, build_config

    parser = argparse.ArgumentParser()
    add_serve_command(parser.add_subparsers(dest="command"))
    assert build_config(parser.parse_args(["serve"]), {}).auth.enabled is True
    assert build_config(parser.parse_args(["serve", "--no-auth"]), {}).auth.enabled is False


# -- presigned links -----------------------------------------------------------------------------


async def _session_with_file(secure) -> str:
    sid = (await secure.call("POST", "/v1/sessions", "a_member", json={}))[1]["id"]
    assert (await secure.call("PUT", f"/v1/sessions/{sid}/files/out/report.txt", "a_member", data=b"hello"))[0] == 201
    return sid


async def test_presigned_get_and_put_work_without_a_key(secure):
    sid = await _session_with_file(secure)
    status, link, _ = await secure.call("POST", f"/v1/sessions/{sid}/files/out/report.txt:presign", "a_member", json={})
    assert status == 200 and link["method"] == "GET" and 3590 <= link["expires_in"] <= 3601
    status, body, _ = await secure.call("GET", link["url"])
    assert status == 200 and body == "hello"
    status, put, _ = await secure.call("POST", f"/v1/sessions/{sid}/files/in.txt:presign", "a_member",
                                       json={"method": "PUT"})
    assert 590 <= put["expires_in"] <= 601
    assert (await secure.call("PUT", put["url"], data=b"uploaded"))[0] == 201
    assert (await secure.call("GET", f"/v1/sessions/{sid}/files/in.txt", "a_member"))[1] == "uploaded"
    assert (await secure.call("PUT", link["url"], data=b"x"))[0] == 403  # a GET link does not write
    status, body, _ = await secure.call("POST", f"/v1/sessions/{sid}/files/in.txt:presign", "a_member",
                                        json={"method": "PUT", "expires_in": 999999})
    assert status == 422 and body["error"]["code"] == "limit_exceeds_maximum"
    theirs = await secure.call("POST", f"/v1/sessions/{sid}/files/in.txt:presign", "b_member", json={})
    assert theirs[0] == 404


async def test_altered_and_expired_links_answer_403_saying_to_request_a_new_one(secure):
    sid = await _session_with_file(secure)
    _, link, _ = await secure.call("POST", f"/v1/sessions/{sid}/files/out/report.txt:presign", "a_member",
                                   json={"expires_in": 1})
    url = link_path(link["url"])
    for altered in (url.replace("report.txt", "other.txt"), url[:-1] + ("a" if url[-1] != "a" else "b"),
                    url.replace("/v1/links/", "/v1/links/9"), url.replace(sid, "x" + sid[1:])):
        status, body, _ = await secure.call("GET", altered)
        assert status == 403 and "request a new link" in body["error"]["hint"], altered
    token = url.split("/")[3]
    expires, key_id, kid, sig = token.split(".")
    status, body, _ = await secure.call("GET", url.replace(token, f"{int(expires) + 3600}.{key_id}.{kid}.{sig}"))
    assert status == 403 and body["error"]["code"] == "link_invalid"
    await asyncio.sleep(2.1)  # expiry is rounded up to the next second
    status, body, _ = await secure.call("GET", url)
    assert status == 403 and body["error"]["code"] == "link_expired" and "request a new link" in body["error"]["hint"]


async def test_rotated_secret_keeps_verifying_during_the_overlap(start_secure, tmp_path):
    old, new = "o" * 32, "n" * 32
    first = await start_secure(data_dir=tmp_path / "rot", auth={"presign_secrets": [old]})
    sid = await _session_with_file(first)
    _, link, _ = await first.call("POST", f"/v1/sessions/{sid}/files/out/report.txt:presign", "a_member", json={})
    await first.client.close()
    rotated = await start_secure(data_dir=tmp_path / "rot", keys=first.keys, auth={"presign_secrets": [new, old]})
    assert (await rotated.call("GET", link["url"]))[0] == 200
    _, fresh, _ = await rotated.call("POST", f"/v1/sessions/{sid}/files/out/report.txt:presign", "a_member", json={})
    assert link_path(fresh["url"]).split("/")[3].split(".")[2] != link_path(link["url"]).split("/")[3].split(".")[2]
    await rotated.client.close()
    retired = await start_secure(data_dir=tmp_path / "rot", keys=first.keys, auth={"presign_secrets": [new]})
    assert (await retired.call("GET", link["url"]))[0] == 403
    assert (await retired.call("GET", fresh["url"]))[0] == 200


def test_signer_expiry_is_checked_against_the_clock():
    now = [1000.0]
    signer = Signer(["s" * 32], clock=lambda: now[0])
    url, expires = signer.sign("GET", "w", "sid", "a.txt", 10, incarnation="1.5", key_id="0123456789ab")
    token = url.split("/")[3]
    assert signer.verify(token, "GET", "w", "sid", "a.txt", incarnation="1.5") == "0123456789ab"
    now[0] = expires
    try:
        signer.verify(token, "GET", "w", "sid", "a.txt", incarnation="1.5")
    except Exception as exc:  # noqa: BLE001
        assert getattr(exc, "code", None) == "link_expired"
    else:
        raise AssertionError("an expired link verified")
