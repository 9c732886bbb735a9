"""The client makes a session from a web starter in one call (the dev server itself is tested in
tests/server/security/test_web_starters_preview.py)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile

import pytest

from wasm_runner.providers.native.web_starters import STARTERS, find_starter
from wasm_runner_client import AsyncClient, BadRequestError, Client

pytestmark = pytest.mark.skipif(find_starter("vite-react") is None or find_starter("tanstack-start") is None,
                                reason="the web starters are not installed (wasm-runner prepare)")


def test_a_session_from_a_starter_holds_its_project(server) -> None:
    with Client(server.url) as client:
        sid = client.create_session(starter="vite-react").id
        assert json.loads(client.read_file(sid, "package.json"))["scripts"]["dev"].startswith("vite")
        listing = client.list_files(sid, recursive=True)
        names = {entry.path for entry in listing.entries}
        assert {"package.json", "src/App.tsx", "node_modules"} <= names, names
        assert not any(name.startswith("node_modules/") for name in names)  # a link, not followed on the host
        archive = io.BytesIO()
        client.download_archive(sid, archive, format="tar.gz")
        with tarfile.open(fileobj=io.BytesIO(archive.getvalue())) as tar:
            members = {m.name.removeprefix("./"): m for m in tar.getmembers()}
        assert "src/main.tsx" in members and not any(n.startswith("node_modules/") for n in members), members
        with pytest.raises(BadRequestError) as unknown:
            client.create_session(starter="rails")
        assert unknown.value.status == 422 and "vite-react" in str(unknown.value)


def test_the_command_line_makes_one(server) -> None:
    env = {**os.environ, "WASM_RUNNER_URL": server.url}
    done = subprocess.run([sys.executable, "-m", "wasm_runner_server.cli.console", "sessions", "create", "--starter",
                           "vite-react"], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    with Client(server.url) as client:
        assert b"createRoot" in client.read_file(done.stdout.strip(), "src/main.tsx")


async def test_the_async_client_makes_one_too(server) -> None:
    async with AsyncClient(server.url) as client:
        sid = (await client.create_session(starter="tanstack-start")).id
        assert b"createFileRoute" in await client.read_file(sid, "src/routes/index.tsx")


def test_the_starters_are_listed_with_their_dev_server(server) -> None:
    with Client(server.url) as client:
        starters = {s.name: s for s in client.list_starters()}
    assert set(starters) == {"vite-react", "tanstack-start"}
    assert all(s.ready and s.dev_command == ["npm", "run", "dev"] for s in starters.values())
    # the ports are the projects' own: Vite's default, and the port TanStack Start's Vite config sets
    assert starters["vite-react"].port == 5173
    config = (STARTERS / "tanstack-start" / "vite.config.ts").read_text()
    assert f"port: {starters['tanstack-start'].port}" in config
