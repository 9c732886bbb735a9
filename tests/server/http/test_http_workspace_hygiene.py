"""A session's files are the user's alone: what the service makes for itself (the native venv) never
shows in a listing, a glob or an archive, and still serves the session after hibernation."""

from __future__ import annotations

import io
import zipfile

import pytest
from package_index import demo_wheels, serve_index
from server_helpers import call, eventually, new_session, run

PROFILES = {"native": {"language": "bash", "provider": "native", "network": "open"}}
USER_PLACES = ["shared"]
"""The workspace's shared folder, the user's own: nothing else is there after the runs."""
IMPORT = "python -c 'import tinyapp; print(tinyapp.hello())'"


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    with serve_index(demo_wheels(tmp_path_factory.mktemp("wheels"))) as served:
        yield served


async def test_a_session_after_pip_install_lists_no_internals_and_its_install_survives_hibernation(serve, index):
    client = await serve(packages={"python_index": index.simple}, profiles=PROFILES,
                         sessions={"idle_timeout_s": 0.5})
    sid = await new_session(client, profile="native")
    installed = await run(client, sid, "pip install --no-cache-dir tinyapp && python -c 'print(1)'")
    assert installed["exit_code"] == 0, installed["stderr"]
    assert "Successfully installed" in installed["stdout"]
    assert not installed.get("files", {}).get("created"), installed["files"]  # nothing made among the files

    status, listing = await call(client, "GET", f"/v1/sessions/{sid}/files", params={"recursive": "true"})
    assert status == 200 and [e["path"] for e in listing["entries"]] == USER_PLACES, listing
    status, found = await call(client, "GET", f"/v1/sessions/{sid}/glob", params={"pattern": "**"})
    assert status == 200 and [e["path"] for e in found["matches"]] == USER_PLACES, found
    async with client.get(f"/v1/sessions/{sid}/archive", params={"format": "zip"}) as response:
        assert response.status == 200
        archive = zipfile.ZipFile(io.BytesIO(await response.read()))
    assert [name.rstrip("/") for name in archive.namelist()] == USER_PLACES
    shown = await run(client, sid, "ls -A /workspace; echo $VIRTUAL_ENV")
    assert shown["stdout"] == "shared\n/opt/venv\n", shown  # the venv is outside /workspace

    async def hibernated() -> bool:
        return (await call(client, "GET", f"/v1/sessions/{sid}"))[1]["state"] == "hibernated"

    await eventually(hibernated, timeout=15)
    after = await run(client, sid, IMPORT)
    assert after["exit_code"] == 0 and after["stdout"] == "hello from tinyapp, tinydep 2.1\n", after

    status, fork = await call(client, "POST", f"/v1/sessions/{sid}:fork", json={"count": 1})
    assert status == 201 and not fork["failed"], fork
    [child] = [entry["id"] for entry in fork["sessions"]]
    forked = await run(client, child, IMPORT + " && pip install --no-cache-dir --no-deps --no-index tinyapp 2>&1 "
                                                "| tail -1; ls -A /workspace")
    assert forked["stdout"].startswith("hello from tinyapp, tinydep 2.1\nRequirement already satisfied"), forked
    assert forked["stdout"].endswith("\nshared\n"), forked  # the child's copy of the venv, outside its files
