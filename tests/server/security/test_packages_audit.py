"""Package installs in the audit log: what was asked, what was installed, the lock after it."""

from __future__ import annotations

import json

import pytest
from package_index import demo_wheels, serve_index


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    with serve_index(demo_wheels(tmp_path_factory.mktemp("wheels"))) as served:
        yield {"python_index": served.simple}


async def test_each_install_is_audited_with_the_lock(start_secure, packages):
    secure = await start_secure(packages=packages)
    status, created, _ = await secure.call("POST", "/v1/sessions", "a_member", json={})
    sid = created["id"]
    status, result, _ = await secure.call("POST", f"/v1/sessions/{sid}/packages", "a_member",
                                          json={"python": ["tinyapp==1.0"]})
    assert status == 200 and result["ok"]
    await secure.call("POST", f"/v1/sessions/{sid}/packages", "a_member", json={"python": ["fastext"]})
    status, page, _ = await secure.call("GET", "/v1/audit?kind=packages", "a_member")
    assert status == 200
    rows = page["entries"]
    assert [row["outcome"] for row in rows] == ["ok", "error"] and all(row["session"] == sid for row in rows)
    lock = json.loads(rows[0]["files_changed"])
    assert [p["name"] for p in lock["python"]] == ["tinyapp", "tinydep"]
    assert "native code" in rows[1]["stderr"] and json.loads(rows[0]["code"])["python"] == ["tinyapp==1.0"]


async def test_the_guests_own_install_is_audited_like_the_apis(start_secure, packages):
    secure = await start_secure(packages=packages)
    _, created, _ = await secure.call("POST", "/v1/sessions", "a_member", json={})
    sid = created["id"]
    status, result, _ = await secure.call("POST", f"/v1/sessions/{sid}/exec", "a_member",
                                          json={"code": "import sandbox\nsandbox.install('tinyapp==1.0')\n"
                                                        "import tinyapp\ntinyapp.hello()"})
    assert status == 200 and result["value"] == "'hello from tinyapp, tinydep 2.1'", result
    _, page, _ = await secure.call("GET", "/v1/audit?kind=packages", "a_member")
    rows = page["entries"]
    assert [(row["outcome"], row["session"]) for row in rows] == [("ok", sid)]
    assert json.loads(rows[0]["code"]) == {"python": ["tinyapp==1.0"]}
    assert [p["name"] for p in json.loads(rows[0]["files_changed"])["python"]] == ["tinyapp", "tinydep"]
