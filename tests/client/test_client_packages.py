"""Client.install / Client.packages (and the async ones) against a real server with a loopback index."""

from __future__ import annotations

import pytest
from package_index import demo_wheels, serve_index

from wasm_runner_client import AsyncClient, Client, InstallResult, PackageError, PackageLock, PackageRequest


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    with serve_index(demo_wheels(tmp_path_factory.mktemp("wheels"))) as served:
        yield served


def test_install_returns_a_typed_result_and_packages_the_lock_to_replay(start_server, index) -> None:
    server = start_server(packages={"python_index": index.simple})
    with Client(server.url) as client:
        session = client.create_session()
        result = client.install(session.id, ["tinyapp==1.0", "tinydep==2.0"])
        assert isinstance(result, InstallResult) and result.ok, result.error
        assert sorted((p.name, p.version, p.source) for p in result.installed) == [
            ("tinyapp", "1.0", "download"), ("tinydep", "2.0", "download")]
        assert client.exec(session.id, "import tinyapp\ntinyapp.hello()").value == "'hello from tinyapp, tinydep 2.0'"

        lock = client.packages(session.id)
        assert isinstance(lock, PackageLock) and lock.index == index.simple
        assert [(p.name, p.version) for p in lock.python] == [("tinyapp", "1.0"), ("tinydep", "2.0")]
        replayed = client.create_session(packages=PackageRequest(lock=lock))
        assert client.packages(replayed.id).python == lock.python
        assert client.exec(replayed.id, "import tinydep\ntinydep.VERSION").value == "'2.0'"

        refused = client.install(session.id, ["fastext"])
        assert not refused.ok and isinstance(refused.error, PackageError)
        assert refused.error.kind == "native_code" and refused.error.package == "fastext"
        npm = client.install(session.id, npm=["left-pad"])
        assert not npm.ok and npm.error is not None and npm.error.kind == "unsupported_ecosystem"
        assert "npm install" in (npm.error.hint or "")
        assert [(p.name, p.version) for p in client.packages(session.id).python] == [("tinyapp", "1.0"),
                                                                                    ("tinydep", "2.0")]


async def test_the_async_client_installs_and_reads_the_lock(start_server, index) -> None:
    server = start_server(packages={"python_index": index.simple})
    async with AsyncClient(server.url) as client:
        session = await client.create_session()
        result = await client.install(session.id, ["tinydep==2.1"])
        assert result.ok and [(p.name, p.version) for p in result.installed] == [("tinydep", "2.1")]
        lock = await client.packages(session.id)
        assert [(p.name, p.version, p.sha256) for p in lock.python] == [
            (p.name, p.version, p.sha256) for p in result.installed]
