"""Every API route is either opened by exactly one OAuth scope or closed to OAuth tokens on purpose: the
routes come from the application's route table, so a new route cannot be left out of the decision."""

from __future__ import annotations

import pytest
from server_helpers import make_config

from wasm_runner_server.app import create_app
from wasm_runner_server.errors import ApiError
from wasm_runner_server.security.oauth.scopes import (
    KEY_ONLY,
    OPEN_TO_EVERY_TOKEN,
    ROUTE_SCOPES,
    SCOPES,
    check_scope,
    required_scope,
)

_APP = create_app(make_config("/tmp/wasm-runner-route-table", auth={"enabled": True}, e2b={"enabled": True}))
ROUTES = sorted({(r.method, r.resource.canonical) for r in _APP.router.routes() if r.resource is not None})
NO_TOKEN_NEEDED = ("/healthz", "/readyz", "/metrics", "/openapi.json", "/console", "/oauth/", "/v1/links/",
                   "/v1/artifact-links/", "/v1/pty-links/", "/v1/preview-links/", "/e2b/")
"""Served without a bearer token (public, credential in the link, or the OAuth endpoints themselves); the
E2B gateway calls the routes below with the caller's credential, where the scopes apply."""


def test_every_route_is_opened_by_a_scope_or_closed_to_tokens():
    undecided = [(m, c) for m, c in ROUTES if not c.startswith(NO_TOKEN_NEEDED) and c not in KEY_ONLY
                 and (m, c) not in OPEN_TO_EVERY_TOKEN and (m, c) != ("HEAD", "/v1/me")
                 and required_scope(m, c) is None]
    assert not undecided, f"place these routes in security/oauth/scopes.py (a scope, or KEY_ONLY): {undecided}"
    assert set(ROUTE_SCOPES.values()) == set(SCOPES)
    stale = [k for k in ROUTE_SCOPES if k not in ROUTES and ("GET", k[1]) not in ROUTES]
    assert not stale, f"scopes name routes that do not exist: {stale}"


@pytest.mark.parametrize("route", sorted(KEY_ONLY))
def test_no_scope_opens_a_key_only_route(route):
    for method in ("GET", "POST", "PUT", "PATCH", "DELETE"):
        with pytest.raises(ApiError) as refused:
            check_scope(method, route, frozenset(SCOPES))
        assert refused.value.status == 403 and refused.value.code == "insufficient_scope"


def test_admin_routes_are_closed_to_every_token():
    admin = [c for _, c in ROUTES if c.startswith("/v1/admin/")]
    assert admin and all(c in KEY_ONLY for c in admin)
