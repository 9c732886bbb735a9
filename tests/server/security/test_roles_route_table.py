"""Every admin route declares its permission, and the declaration is what is enforced: the routes are read
from the service's own route table, so a new admin route without a permission fails here, and for each
declared permission a caller lacking it is refused with 403 permission_denied while one holding it is not."""

from __future__ import annotations

import re

from aiohttp import web
from server_helpers import make_config

from wasm_runner_server.app import create_app
from wasm_runner_server.http.openapi import operation
from wasm_runner_server.security import permissions

ADMIN_ACTIONS = ("/v1/admin/", "/v1/audit")
"""The routes that are admin actions: the admin API, and the audit log (besides /v1/admin/...)."""
SAMPLE_PARAMS = {"member": "nobody", "name": "no-such-role", "key": "wr_000000000000", "entry": "999999",
                 "client": "no-such-app", "workspace": "alpha"}
HOLDER_BODIES = {
    ("POST", "/v1/admin/keys"): {"name": "made-by-holder", "kind": "app"},
    ("PUT", "/v1/admin/members/{member}"): {"role": "member"},
    ("POST", "/v1/admin/roles"): {"name": "made-by-holder", "permissions": ["audit.own"]},
    ("PUT", "/v1/admin/roles/{name}"): {"permissions": []},
    ("PUT", "/v1/admin/workspaces/{workspace}/budgets"): {"budgets": {}},
    ("POST", "/v1/admin/oauth/clients"): {"name": "made-by-holder", "redirect_uris": ["http://127.0.0.1:9/cb"],
                                          "scopes": ["files:read"]},
}
"""A request the holder of the route's permission may make (a route not listed here is sent `{}`)."""


def declared(app: web.Application) -> list[tuple[str, str, str | None, str | None]]:
    """(method, canonical path, permission, own) of every admin-action route of `app`."""
    found = []
    for route in app.router.routes():
        canonical = route.resource.canonical if route.resource is not None else ""
        if route.method == "HEAD" or not canonical.startswith(ADMIN_ACTIONS):
            continue
        spec = getattr(route.handler, "__openapi__", None)
        found.append((route.method, canonical, getattr(spec, "permission", None), getattr(spec, "own", None)))
    return sorted(found)


def undeclared(app: web.Application) -> list[str]:
    return [f"{method} {path}" for method, path, permission, own in declared(app)
            if permission not in permissions.TREE or (own is not None and own not in permissions.TREE)]


def _app(tmp_path) -> web.Application:
    return create_app(make_config(tmp_path / "data", auth={"enabled": True}))


def test_every_admin_route_declares_a_permission_of_the_tree(tmp_path):
    app = _app(tmp_path)
    routes = declared(app)
    assert {path for _, path, _, _ in routes} >= {"/v1/admin/keys", "/v1/admin/members", "/v1/admin/roles",
                                                   "/v1/admin/workspaces", "/v1/audit"}
    assert undeclared(app) == []


def test_a_new_admin_route_without_a_permission_is_caught(tmp_path):
    app = _app(tmp_path)

    @operation(summary="forgot its permission", tag="admin")
    async def handler(request: web.Request) -> web.Response:
        return web.json_response({})

    app.router.add_get("/v1/admin/new-thing", handler)
    assert undeclared(app) == ["GET /v1/admin/new-thing"]


def _concrete(path: str) -> str:
    return re.sub(r"\{(\w+)[^}]*\}", lambda m: SAMPLE_PARAMS[m.group(1)], path)


async def _caller(secure, member: str, role_permissions: frozenset[str]) -> str:
    """A key of workspace alpha acting for `member`, whose custom role holds exactly `role_permissions`."""
    role = f"r-{member}"
    status, body, _ = await secure.call("POST", "/v1/admin/roles?workspace=alpha", "admin",
                                        json={"name": role, "permissions": sorted(role_permissions)})
    assert status == 201, body
    status, body, _ = await secure.call("PUT", f"/v1/admin/members/{member}?workspace=alpha", "admin",
                                        json={"role": role})
    assert status == 200, body
    status, body, _ = await secure.call("POST", "/v1/admin/keys", "admin",
                                        json={"workspace": "alpha", "name": member, "member": member})
    assert status == 201, body
    return body["key"]


async def test_each_admin_route_refuses_a_caller_lacking_its_permission_and_admits_one_holding_it(start_secure):
    # two callers made and two calls for each route, all with few keys: above the default rate limit
    secure = await start_secure(auth={"rate_per_s": 1000, "burst": 1000})
    routes = declared(secure.client.app)
    failures = []
    for index, (method, path, permission, own) in enumerate(routes):
        assert permission is not None
        withheld = permissions.below(permission) | (permissions.below(own) if own else frozenset())
        lacking = await _caller(secure, f"lacks{index}", permissions.LEAVES - withheld)
        holding = await _caller(secure, f"holds{index}", permissions.MEMBER_BASE | permissions.below(permission))
        url = _concrete(path)
        status, body, _ = await secure.call(method, url, headers={"Authorization": f"Bearer {lacking}"}, json={})
        if status != 403 or body["error"]["code"] != "permission_denied" or permission not in body["error"]["message"]:
            failures.append(f"{method} {path} without {permission}: {status} {body}")
        status, body, _ = await secure.call(method, url, headers={"Authorization": f"Bearer {holding}"},
                                            json=HOLDER_BODIES.get((method, path), {}))
        if status not in (200, 201, 404):
            failures.append(f"{method} {path} with {permission}: {status} {body}")
    assert len(routes) >= 12 and failures == []


async def test_a_role_change_counts_from_the_next_request(secure):
    key = await _caller(secure, "carol", permissions.MEMBER_BASE | {"keys.read"})
    carol = {"Authorization": f"Bearer {key}"}
    assert (await secure.call("GET", "/v1/admin/keys", headers=carol))[0] == 200
    status, _, _ = await secure.call("PUT", "/v1/admin/roles/r-carol?workspace=alpha", "admin",
                                     json={"permissions": sorted(permissions.MEMBER_BASE)})
    assert status == 200
    status, body, _ = await secure.call("GET", "/v1/admin/keys?workspace=alpha", headers=carol)
    assert status == 200 and [k["member"] for k in body["keys"]] == ["carol"]  # keys.own: her own only
    status, _, _ = await secure.call("PUT", "/v1/admin/members/carol?workspace=alpha", "admin", json={"role": "admin"})
    status, body, _ = await secure.call("GET", "/v1/admin/keys", headers=carol)
    assert status == 200 and {k["name"] for k in body["keys"]} >= {"a_member", "a_app", "carol"}
