"""Through the E2B API, the workspace's quotas hold and every action is in its audit log, under the key
that did it: the gateway acts only by calling the API as the caller."""

from __future__ import annotations

import httpx
import pytest
from e2b import Sandbox
from e2b.exceptions import RateLimitException

from wasm_runner_server.security.tenants import TenantStore

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_the_workspaces_session_quota_holds(start_e2b):
    service = start_e2b(auth={"quotas": {"sessions": 2}})
    first, second = Sandbox.create(), Sandbox.create()
    with pytest.raises(RateLimitException):
        Sandbox.create()
    Sandbox.create(api_key=service.keys["beta"]).kill()  # another workspace has its own quota
    first.kill()
    Sandbox.create().kill()  # room again
    second.kill()


def test_commands_and_file_writes_are_audited_under_the_callers_key(e2b_service):
    sandbox = Sandbox.create(api_key=e2b_service.keys["alpha_2"])
    sandbox.files.write("audited.txt", "x")
    sandbox.commands.run("echo audited-command")
    rows = httpx.get(f"{e2b_service.url}/v1/audit", params={"session": sandbox.sandbox_id},
                     headers={"Authorization": f"Bearer {e2b_service.keys['alpha']}"}).json()["entries"]
    kinds = {row["kind"] for row in rows}
    assert {"file", "process"} <= kinds, rows
    key_ids = {row["key_id"] for row in rows}
    assert len(key_ids) == 1  # all under alpha_2's key
    alpha_2_id = httpx.get(f"{e2b_service.url}/v1/audit", headers={
        "Authorization": f"Bearer {e2b_service.keys['alpha_2']}"}).json()["entries"][0]["key_id"]
    assert key_ids == {alpha_2_id}
    assert any("echo audited-command" in str(row) for row in rows if row["kind"] == "process")
    sandbox.kill()


def test_metadata_places_a_sandbox_on_a_members_disk_or_an_end_users_root(start_e2b, tmp_path):
    start_e2b(auth={"disk_layout": {"members": "member-disk", "apps": "end-user"}})
    store = TenantStore.in_data_dir(tmp_path / "data0")
    app_key, _ = store.create_key("alpha", "app", "app")
    store.close()
    analyst = Sandbox.create(metadata={"wasm-runner.agent": "analyst", "team": "x"})
    analyst.files.write("/workspace/notes.txt", "olga's")  # her disk's root, seen by all her sandboxes
    writer = Sandbox.create(metadata={"wasm-runner.agent": "writer"})
    assert writer.files.read("/workspace/notes.txt") == "olga's"
    assert writer.commands.run("pwd").stdout.strip() == f"/workspace/writer/{writer.sandbox_id}"
    assert analyst.get_info().metadata == {"team": "x"}  # the placement is not kept as metadata
    chat = Sandbox.create(api_key=app_key, metadata={"wasm-runner.end_user": "u-1"})
    chat.files.write("answer.txt", "for u-1")
    next_chat = Sandbox.create(api_key=app_key, metadata={"wasm-runner.end_user": "u-1"})
    assert not next_chat.files.exists("answer.txt")  # each chat its own root
    with pytest.raises(Exception, match="end_user"):
        Sandbox.create(api_key=app_key)  # an app key's sandbox names its end user here
    for sandbox in (analyst, writer, chat, next_chat):
        sandbox.kill()
    assert (tmp_path / "data0/workspaces/alpha/members/olga/notes.txt").read_text() == "olga's"
