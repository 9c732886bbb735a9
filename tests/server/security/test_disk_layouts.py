"""Disk layouts: a member's disk seen by all of that member's sessions, an app's end users each with a
root per chat session, on both tiers (a WebAssembly Python session, a native bash session)."""

from __future__ import annotations

import io
import sqlite3
import tarfile
from pathlib import Path

import pytest

from wasm_runner.providers.native.bwrap import find_bwrap, probe
from wasm_runner_server.security.settings import DiskLayout
from wasm_runner_server.security.tenants import DB_NAME, TenantStore

_bwrap = find_bwrap()
SANDBOX_PROBLEM = "bubblewrap is not installed" if _bwrap is None else probe(_bwrap)
TIERS = ["python", pytest.param("sh", marks=pytest.mark.skipif(SANDBOX_PROBLEM is not None,
                                                                reason=f"no usable sandbox: {SANDBOX_PROBLEM}"))]
LAYOUT = {"disk_layout": {"members": "member-disk", "apps": "end-user"}}
PROFILES = {"sh": {"language": "bash", "provider": "native"},
            "small": {"language": "python", "limits": {"disk_bytes": 1_000_000}}}

WRITE = {"python": "open({path!r}, 'w').write({text!r})",
         "sh": "printf %s {text!r} > {path!r}"}
READ = {"python": "import os\nprint(open({path!r}).read() if os.path.exists({path!r}) else 'absent')",
        "sh": "if [ -e {path!r} ]; then cat {path!r}; echo; else echo absent; fi"}
CWD = {"python": "import os\nprint(os.getcwd())", "sh": "pwd"}


def _make_keys(data_dir: Path) -> dict[str, str]:
    store = TenantStore.in_data_dir(data_dir)
    keys = {}
    for name, kind, member in [("alice1", "member", "alice"), ("alice2", "member", "alice"), ("bob", "member", "bob"),
                               ("nobody", "member", None), ("app", "app", None)]:
        keys[name], _ = store.create_key("alpha", name, kind, member)
    keys["other"], _ = store.create_key("beta", "other", "member", "alice")  # another workspace's alice
    store.close()
    return keys


@pytest.fixture
async def team(start_secure, tmp_path):
    data_dir = tmp_path / "data"
    return await start_secure(data_dir, _make_keys(data_dir), auth=LAYOUT, profiles=PROFILES)


async def _session(team, key: str, tier: str, **body) -> str:
    if tier == "sh":
        body["profile"] = "sh"
    status, data, _ = await team.call("POST", "/v1/sessions", key, json=body)
    assert status == 201, data
    assert data["cwd"] == (f"/workspace/{body.get('agent', 'default')}/{data['id']}" if key not in ("app", "nobody")
                           else "/workspace")  # the answer says where its runs start
    return data["id"]


async def _run(team, key: str, sid: str, code: str) -> str:
    status, result, _ = await team.call("POST", f"/v1/sessions/{sid}/exec", key, json={"code": code})
    assert status == 200 and result["exit_code"] == 0 and result["error"] is None, result
    return result["stdout"].strip()


async def _write(team, key, sid, tier, path, text) -> None:
    await _run(team, key, sid, WRITE[tier].format(path=path, text=text))


async def _read(team, key, sid, tier, path) -> str:
    return await _run(team, key, sid, READ[tier].format(path=path))


@pytest.mark.parametrize("tier", TIERS)
async def test_two_sessions_of_one_member_see_each_others_files_at_once(team, tier):
    first = await _session(team, "alice1", tier, agent="analyst")
    second = await _session(team, "alice2", tier, agent="writer")  # another key of the same member
    assert await _run(team, "alice1", first, CWD[tier]) == f"/workspace/analyst/{first}"
    assert await _run(team, "alice2", second, CWD[tier]) == f"/workspace/writer/{second}"
    await _write(team, "alice1", first, tier, "notes.txt", "from the analyst")  # in its working directory
    assert await _read(team, "alice2", second, tier, f"/workspace/analyst/{first}/notes.txt") == "from the analyst"
    # ... and back, while the first session's kernel lives: one directory, not copies
    await _write(team, "alice2", second, tier, f"/workspace/analyst/{first}/notes.txt", "edited by the writer")
    assert await _read(team, "alice1", first, tier, "notes.txt") == "edited by the writer"
    # the file API shows each session its view: the member's whole disk
    status, listing, _ = await team.call("GET", f"/v1/sessions/{second}/files?recursive=true", "alice2")
    assert status == 200
    assert f"analyst/{first}/notes.txt" in {entry["path"] for entry in listing["entries"]}
    assert (team.data_dir / "workspaces/alpha/members/alice/analyst" / first / "notes.txt").read_text() \
        == "edited by the writer"
    third = await _session(team, "alice1", tier)  # no agent: the default one
    assert await _run(team, "alice1", third, CWD[tier]) == f"/workspace/default/{third}"


@pytest.mark.parametrize("tier", TIERS)
async def test_two_members_never_see_each_others_disks(team, tier):
    alice = await _session(team, "alice1", tier, agent="analyst")
    await _write(team, "alice1", alice, tier, "private.txt", "alice only")
    bob = await _session(team, "bob", tier, agent="analyst")
    assert await _read(team, "bob", bob, tier, f"/workspace/analyst/{alice}/private.txt") == "absent"
    assert await _read(team, "bob", bob, tier, f"../{alice}/private.txt") == "absent"
    status, _, _ = await team.call("GET", f"/v1/sessions/{bob}/files/analyst/{alice}/private.txt", "bob")
    assert status == 404
    other = await _session(team, "other", tier, agent="analyst")  # "alice" of another workspace
    assert await _read(team, "other", other, tier, f"/workspace/analyst/{alice}/private.txt") == "absent"


@pytest.mark.parametrize("tier", TIERS)
async def test_end_users_and_their_chats_are_apart(team, tier):
    chat = await _session(team, "app", tier, end_user="u-123")
    assert await _run(team, "app", chat, CWD[tier]) == "/workspace"
    await _write(team, "app", chat, tier, "answer.txt", "for u-123")
    assert await _read(team, "app", chat, tier, "answer.txt") == "for u-123"
    root = team.data_dir / "workspaces/alpha/end_users/u-123/session-roots" / chat
    assert (root / "answer.txt").read_text() == "for u-123"
    other_user = await _session(team, "app", tier, end_user="u-456")
    next_chat = await _session(team, "app", tier, end_user="u-123")
    for sid in (other_user, next_chat):
        assert await _read(team, "app", sid, tier, "answer.txt") == "absent"
        assert await _run(team, "app", sid, "ls -a /workspace" if tier == "sh" else
                          "import os\nprint(sorted(os.listdir('/workspace')))") in (".\n..", "[]")
    assert await _read(team, "app", chat, tier, "/workspace/shared") == "absent"  # no shared/ for apps
    assert (await team.call("DELETE", f"/v1/sessions/{chat}", "app"))[0] == 204
    assert not root.exists()  # an end user's session root goes with its session


@pytest.mark.parametrize("tier", TIERS)
async def test_shared_keeps_the_later_of_two_writes(team, tier):
    alice = await _session(team, "alice1", tier)
    bob = await _session(team, "bob", tier)
    await _write(team, "alice1", alice, tier, "/workspace/shared/plan.txt", "alice's plan")
    await _write(team, "bob", bob, tier, "/workspace/shared/plan.txt", "bob's plan")
    assert await _read(team, "alice1", alice, tier, "/workspace/shared/plan.txt") == "bob's plan"
    assert await _read(team, "bob", bob, tier, "/workspace/shared/plan.txt") == "bob's plan"
    assert (team.data_dir / "workspaces/alpha/shared/plan.txt").read_text() == "bob's plan"


async def test_a_key_naming_no_member_is_refused_a_member_disk(team):
    status, error, _ = await team.call("POST", "/v1/sessions", "nobody", json={"agent": "analyst"})
    assert status == 403 and error["error"]["code"] == "member_required", error
    assert "--member" in error["error"]["hint"]
    status, listing, _ = await team.call("GET", "/v1/sessions", "nobody")
    assert status == 200 and listing["sessions"] == []  # nothing was made


@pytest.mark.parametrize("field", ["agent", "end_user"])
@pytest.mark.parametrize("value", ["../x", "/", "", "a/b", "..", "x" * 65])
async def test_names_that_become_directories_are_checked(team, field, value):
    key = "app" if field == "end_user" else "alice1"
    status, error, _ = await team.call("POST", "/v1/sessions", key, json={field: value})
    assert status == 422 and f"$.{field}" in error["error"]["message"], error
    assert not (team.data_dir / "workspaces/alpha/end_users").exists()


async def test_what_a_layout_cannot_place_is_refused(team):
    for key, body, words in (("alice1", {"agent": "shared"}, "shared directory"),
                             ("app", {}, "end_user"),
                             ("app", {"end_user": "u-1", "agent": "analyst"}, "agent"),
                             ("alice1", {"end_user": "u-1"}, "app keys")):
        status, error, _ = await team.call("POST", "/v1/sessions", key, json=body)
        assert status == 422 and words in error["error"]["message"], (body, error)


async def test_a_member_disk_outlives_its_sessions_and_counts_against_limits(team):
    first = await _session(team, "alice1", "python", agent="analyst", profile="small")
    status, _, _ = await team.call("PUT", f"/v1/sessions/{first}/files/analyst/{first}/big.bin", "alice1",
                                   data=b"x" * 600_000)
    assert status == 201
    second = await _session(team, "alice2", "python", profile="small")
    status, error, _ = await team.call("PUT", f"/v1/sessions/{second}/files/default/{second}/big.bin", "alice2",
                                       data=b"y" * 600_000)
    assert status == 413 and "the session's disk limit" in error["error"]["message"]  # the disk holds both
    assert (await team.call("DELETE", f"/v1/sessions/{first}", "alice1"))[0] == 204
    assert (team.data_dir / "workspaces/alpha/members/alice/analyst" / first / "big.bin").stat().st_size == 600_000
    assert not (team.data_dir / "sessions" / first).exists()
    bob = await _session(team, "bob", "python", profile="small")  # bob's disk is his own, empty
    status, _, _ = await team.call("PUT", f"/v1/sessions/{bob}/files/default/{bob}/big.bin", "bob", data=b"z" * 600_000)
    assert status == 201


async def test_a_member_disk_counts_against_the_workspace_quota(start_secure, tmp_path):
    data_dir = tmp_path / "data"
    team = await start_secure(data_dir, _make_keys(data_dir), auth={**LAYOUT, "quotas": {"disk_bytes": 1_000_000}})
    alice = await _session(team, "alice1", "python")
    assert (await team.call("PUT", f"/v1/sessions/{alice}/files/a.bin", "alice1", data=b"x" * 600_000))[0] == 201
    bob = await _session(team, "bob", "python")
    status, error, _ = await team.call("PUT", f"/v1/sessions/{bob}/files/b.bin", "bob", data=b"y" * 600_000)
    assert status in (413, 429) and "workspace" in error["error"]["message"], error


async def test_a_workspace_may_keep_the_default_layout(start_secure, tmp_path):
    data_dir = tmp_path / "data"
    auth = {**LAYOUT, "workspace_disk_layouts": {"alpha": {}}}
    team = await start_secure(data_dir, _make_keys(data_dir), auth=auth)
    status, data, _ = await team.call("POST", "/v1/sessions", "nobody", json={})
    assert status == 201
    assert await _run(team, "nobody", data["id"], CWD["python"]) == "/workspace"
    status, error, _ = await team.call("POST", "/v1/sessions", "app", json={"end_user": "u-1"})
    assert status == 422 and "end_user" in error["error"]["message"]


async def test_a_session_on_a_layouts_disk_is_not_copied(team):
    sid = await _session(team, "alice1", "python", agent="analyst")
    await _write(team, "alice1", sid, "python", "notes.txt", "x")
    for path, body in ((f"/v1/sessions/{sid}:fork", {}), ("/v1/templates", {"session": sid, "name": "t1"})):
        status, error, _ = await team.call("POST", path, "alice1", json=body)
        assert status == 422 and "member's disk" in error["error"]["message"], error
    status, error, _ = await team.call("POST", "/v1/sessions", "app", json={"end_user": "u-1", "starter": "vite-react"})
    assert status == 422 and "starter" in error["error"]["hint"], error


async def test_a_session_keeps_its_place_across_a_restart(start_secure, tmp_path):
    data_dir = tmp_path / "data"
    keys = _make_keys(data_dir)
    team = await start_secure(data_dir, keys, auth=LAYOUT)
    sid = await _session(team, "alice1", "python", agent="analyst")
    await _write(team, "alice1", sid, "python", "notes.txt", "kept")
    await team.client.close()
    again = await start_secure(data_dir, keys, auth=LAYOUT)
    assert await _run(again, "alice2", sid, CWD["python"]) == f"/workspace/analyst/{sid}"
    assert await _read(again, "alice2", sid, "python", "notes.txt") == "kept"


async def test_links_and_archives_follow_the_layout(team):
    first = await _session(team, "alice1", "python", agent="analyst")
    await _write(team, "alice1", first, "python", "report.txt", "made by the analyst")
    second = await _session(team, "alice2", "python", agent="writer")
    path = f"analyst/{first}/report.txt"
    status, link, _ = await team.call("POST", f"/v1/sessions/{second}/files/{path}:presign", "alice2", json={})
    assert status == 200
    assert (await team.call("GET", link["url"]))[1] == "made by the analyst"
    status, put, _ = await team.call("POST", f"/v1/sessions/{second}/files/writer/{second}/draft.txt:presign",
                                     "alice2", json={"method": "PUT"})
    assert (await team.call("PUT", put["url"], data=b"uploaded"))[0] == 201
    assert await _read(team, "alice1", first, "python", f"/workspace/writer/{second}/draft.txt") == "uploaded"
    async with team.client.get(f"/v1/sessions/{first}/archive?path=writer&format=tar.gz",
                               headers=team.auth("alice1")) as response:
        assert response.status == 200
        archive = await response.read()
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        names = tar.getnames()
    assert any(name.endswith(f"{second}/draft.txt") for name in names), names


def test_a_database_made_before_layouts_gains_the_columns(tmp_path):
    db = sqlite3.connect(tmp_path / DB_NAME)
    db.executescript("""
        CREATE TABLE session_owners (session_id TEXT PRIMARY KEY, workspace TEXT NOT NULL, key_id TEXT NOT NULL,
                                     kind TEXT NOT NULL, ephemeral INTEGER NOT NULL DEFAULT 0, created_at REAL NOT NULL);
        INSERT INTO session_owners VALUES ('old', 'alpha', 'k', 'member', 0, 1.0);
    """)
    db.commit()
    db.close()
    store = TenantStore.in_data_dir(tmp_path)
    try:
        old = store.owner("old")
        assert old is not None and (old.disk, old.workdir) == ("", "")  # its own directory, as before
        store.claim("new", "alpha", "k", "member", False, "members/alice", "default/new")
        new = store.owner("new")
        assert new is not None and (new.disk, new.workdir) == ("members/alice", "default/new")
    finally:
        store.close()


@pytest.fixture
async def home_team(start_secure, tmp_path):
    data_dir = tmp_path / "data"
    layout = {"disk_layout": {**LAYOUT["disk_layout"], "guest_path": "/home/user/workspace"}}
    return await start_secure(data_dir, _make_keys(data_dir), auth=layout, profiles=PROFILES)


@pytest.mark.parametrize("tier", TIERS)
async def test_a_layouts_own_path_shows_the_same_disk_and_is_where_runs_start(home_team, tier):
    team, home = home_team, "/home/user/workspace"
    body = {"agent": "analyst", **({"profile": "sh"} if tier == "sh" else {})}
    status, made, _ = await team.call("POST", "/v1/sessions", "alice1", json=body)
    assert status == 201 and made["cwd"] == f"{home}/analyst/{made['id']}", made
    first = made["id"]
    assert await _run(team, "alice1", first, CWD[tier]) == f"{home}/analyst/{first}"
    await _write(team, "alice1", first, tier, "notes.txt", "written at home")  # relative: under the new path
    assert await _read(team, "alice1", first, tier, f"/workspace/analyst/{first}/notes.txt") == "written at home"
    await _write(team, "alice1", first, tier, f"{home}/shared/plan.txt", "for the team")
    status, made, _ = await team.call("POST", "/v1/sessions", "bob", json=body)
    assert status == 201, made
    bob = made["id"]
    assert await _read(team, "bob", bob, tier, "/workspace/shared/plan.txt") == "for the team"
    assert await _read(team, "bob", bob, tier, f"{home}/analyst/{first}/notes.txt") == "absent"  # his own disk
    status, listing, _ = await team.call("GET", f"/v1/sessions/{first}/files?recursive=true", "alice1")
    assert status == 200 and f"analyst/{first}/notes.txt" in {e["path"] for e in listing["entries"]}
    # a session of its own directory is not changed; an end user's root is at the new path too
    status, own, _ = await team.call("POST", "/v1/sessions", "alice1", json={"temporary": True})
    assert status == 201 and own["cwd"] == "/workspace", own
    status, chat, _ = await team.call("POST", "/v1/sessions", "app", json={"end_user": "u-1", **(
        {"profile": "sh"} if tier == "sh" else {})})
    assert status == 201 and chat["cwd"] == home, chat
    assert await _run(team, "app", chat["id"], CWD[tier]) == home
    assert await _read(team, "app", chat["id"], tier, f"{home}/shared/plan.txt") == "absent"  # no shared/ for apps


def test_a_layouts_own_path_is_outside_workspace_and_tmp():
    for bad in ("/workspace/home", "/tmp/x", "relative", "/home/../etc"):
        with pytest.raises(ValueError):
            DiskLayout(guest_path=bad)
    assert DiskLayout(guest_path="/home/user/workspace/").guest_path == "/home/user/workspace"
