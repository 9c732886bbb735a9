"""The OAuth store's contract, on SQLite (the embedded default) and on PostgreSQL (migration step 4)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from aiohttp.test_utils import TestServer
from authlib.integrations.httpx_client import OAuthError
from oauth_flow import Browser, call, get_tokens, start_service

from wasm_runner_server.config import ServiceConfig
from wasm_runner_server.security import stores
from wasm_runner_server.security.oauth.store import OAuthStore, digest


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, tmp_path: Path):
    url = "sqlite" if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    config = ServiceConfig.model_validate({"server": {"data_dir": str(tmp_path)}, "store": {"url": url}})
    opened = stores.oauth_store(config, tmp_path)
    yield opened
    opened.close()


def _grant_with_tokens(store: OAuthStore) -> tuple[str, str, str]:
    _, app = store.create_client("alpha", "app", ["https://app.example/cb"], ["exec"], True, "k1")
    grant = store.create_grant(app.id, "alpha", "alice", "k1", "exec")
    store.save_tokens(grant.id, "wro_a1", "wrr_r1", "exec", 3600, 86400)
    return app.id, grant.id, "wrr_r1"


def test_clients_are_kept_with_their_secret_hashed(store):
    secret, confidential = store.create_client("alpha", "CI bot", ["https://a.example/cb"], ["exec", "files:read"],
                                               False, "k1")
    none, public = store.create_client("alpha", "Notebook", ["http://127.0.0.1:8765/cb"], ["files:read"], True, "k1")
    assert secret is not None and none is None
    found = store.client(confidential.id)
    assert found is not None and found.secret_hash == digest(secret) and secret not in repr(found)
    assert found.secret_matches(secret) and not found.secret_matches(secret + "x")
    assert found.scopes == ("exec", "files:read") and found.redirect_uris == ("https://a.example/cb",)
    assert [c.id for c in store.clients("alpha")] == [confidential.id, public.id]
    assert store.clients("beta") == []
    assert store.delete_client(public.id, workspace="beta") is None  # another workspace's admin: not found
    assert store.delete_client(public.id) is not None and store.client(public.id) is None


def test_a_code_is_good_once_and_its_reuse_revokes_what_it_made(store):
    _, app = store.create_client("alpha", "app", ["https://a.example/cb"], ["exec"], True, "k1")
    store.save_code("code-1", client_id=app.id, workspace="alpha", member="alice", key_id="k1",
                    redirect_uri="https://a.example/cb", scope="exec", code_challenge="c" * 43,
                    code_challenge_method="S256", lifetime_s=600)
    assert store.take_code("code-1", "wrc_other") is None  # another app's code: nothing, and not spent
    code = store.take_code("code-1", app.id)
    assert code is not None and code.member == "alice" and code.code_challenge == "c" * 43
    grant = store.create_grant(app.id, "alpha", "alice", "k1", "exec")
    store.code_made(code.code_hash, grant.id)
    assert store.take_code("code-1", app.id) is None
    revoked = store.grant(grant.id)
    assert revoked is not None and revoked.revoked_at is not None
    store.save_code("old", client_id=app.id, workspace="alpha", member="alice", key_id="k1", redirect_uri=None,
                    scope="exec", code_challenge=None, code_challenge_method=None, lifetime_s=0.001)
    time.sleep(0.01)  # past a 1 ms lifetime
    assert store.take_code("old", app.id) is None


def test_rotation_spends_a_refresh_token_once(store):
    _, grant_id, refresh = _grant_with_tokens(store)
    token = store.by_refresh(refresh)
    assert token is not None and token.grant.id == grant_id and token.rotated_at is None
    assert store.rotate(token.id)
    assert not store.rotate(token.id)  # a second use loses
    spent = store.by_refresh(refresh)
    assert spent is not None and spent.rotated_at is not None and spent.access_revoked_at is not None


def test_revoking_a_grant_ends_its_whole_family(store):
    _, grant_id, _ = _grant_with_tokens(store)
    store.save_tokens(grant_id, "wro_a2", "wrr_r2", "exec", 3600, 86400)
    assert store.revoke_grant(grant_id) and not store.revoke_grant(grant_id)
    for access in ("wro_a1", "wro_a2"):
        token = store.by_access(access)
        assert token is not None and token.grant.revoked_at is not None
    assert store.grants("alpha", "alice") == []


def test_deleting_an_app_revokes_its_grants(store):
    app_id, grant_id, _ = _grant_with_tokens(store)
    store.record_consent("alpha", "alice", app_id, frozenset({"exec"}))
    store.delete_client(app_id)
    grant = store.grant(grant_id)
    assert grant is not None and grant.revoked_at is not None
    assert store.consent("alpha", "alice", app_id) == frozenset()


def test_consent_grows_per_member_and_app_and_can_be_withdrawn(store):
    store.record_consent("alpha", "alice", "wrc_1", frozenset({"files:read"}))
    store.record_consent("alpha", "alice", "wrc_1", frozenset({"exec"}))
    assert store.consent("alpha", "alice", "wrc_1") == {"files:read", "exec"}
    assert store.consent("alpha", "bob", "wrc_1") == frozenset()
    assert store.consent("beta", "alice", "wrc_1") == frozenset()
    store.forget_consent("alpha", "alice", "wrc_1")
    assert store.consent("alpha", "alice", "wrc_1") == frozenset()


def test_only_hashes_are_stored(tmp_path):
    store = OAuthStore.in_data_dir(tmp_path)
    secret, _ = store.create_client("alpha", "app", ["https://a.example/cb"], ["exec"], False, "k1")
    _grant_with_tokens(store)
    store.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("oauth.sqlite3*"))
    assert secret is not None and secret.encode() not in raw
    assert b"wro_a1" not in raw and b"wrr_r1" not in raw and digest("wro_a1").encode() in raw


async def test_the_flow_end_to_end_on_the_cluster_database(postgres_url, tmp_path):
    """Authorization, token, rotation and reuse detection through a service whose metadata is in PostgreSQL."""
    servers: list[TestServer] = []
    service = await start_service(tmp_path, servers, store=postgres_url)
    browser = Browser(service)
    try:
        await browser.sign_in(service.keys["alice"])
        client, first = await get_tokens(service, browser)
        me = (await call(service, "GET", "/v1/me", first["access_token"])).json()
        assert (me["workspace"], me["member"]) == ("alpha", "alice")
        second = await client.refresh_token(f"{service.base}/oauth/token", refresh_token=first["refresh_token"])
        assert (await call(service, "GET", "/v1/me", second["access_token"])).status_code == 200
        with pytest.raises(OAuthError):
            await client.refresh_token(f"{service.base}/oauth/token", refresh_token=first["refresh_token"])
        assert (await call(service, "GET", "/v1/me", second["access_token"])).status_code == 401
        await client.aclose()
    finally:
        await browser.close()
        for server in servers:
            await server.close()


def test_pruning_forgets_what_has_expired_only(store):
    _, grant_id, _ = _grant_with_tokens(store)
    store.save_tokens(grant_id, "wro_old", "wrr_old", "exec", 0.001, 0.001)
    time.sleep(0.01)  # past both 1 ms lifetimes
    assert store.prune(grace_s=0) == 1
    assert store.by_refresh("wrr_old") is None and store.by_refresh("wrr_r1") is not None
