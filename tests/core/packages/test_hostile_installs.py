"""Installs written as the attacks on them: a replayed lock smuggling requirement-file options to uv,
a wheel that is not the distribution pinned, an index linking or redirecting the host to a forbidden
loopback port. None runs tenant code on the host, reaches a forbidden address, keeps a refused
wheel in the cache or shows a host path."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from package_index import build_wheel, recorder, serve_index

from wasm_runner.packages import PackageSettings, SessionPackages
from wasm_runner.packages.installer import PackageInstaller
from wasm_runner_protocol.egress import EgressPolicy
from wasm_runner_protocol.packages import LockedPackage, PackageLock, PackageRequest

SECRET = "presign-secret-7f3a9c"


def installer(tmp_path: Path, index) -> PackageInstaller:
    return PackageInstaller(PackageSettings(python_index=index.simple), tmp_path / "data")


def tenant_project(tmp_path: Path) -> tuple[Path, Path]:
    """A directory a tenant wrote, whose in-tree build backend writes a marker when imported (what
    `-e <dir>` in uv's input would run on the host), and the marker's path."""
    project = tmp_path / "tenant-files" / "proj"
    project.mkdir(parents=True)
    marker = tmp_path / "backend-ran"
    # no static [project] table: uv must ask the backend for the metadata, which imports it (even with
    # --no-build: a local directory is built to learn what it is)
    (project / "pyproject.toml").write_text('[build-system]\nrequires = []\nbuild-backend = "evilbackend"\n'
                                            'backend-path = ["."]\n')
    (project / "evilbackend.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    (project / "setup.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    return project, marker


def secret_file(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    data.mkdir(parents=True, exist_ok=True)
    secret = data / "presign.secret"
    secret.write_text(f"{SECRET}\n")
    return secret


def real_pin(index, name: str, version: str) -> dict:
    """The lock entry a session would give for a wheel the index serves."""
    wheel = next(w for w in index.wheels[name] if f"-{version}-" in w.name)
    return {"name": name, "version": version, "filename": wheel.name, "size": wheel.stat().st_size,
            "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(), "url": f"{index.url}/files/{wheel.name}"}


def smuggled(tmp_path: Path, index, field: str, option: str) -> dict:
    """tinydep 2.0's real entry, with `option` (`-e <tenant dir>` or `-r <secret file>`) after a newline in
    `field`: written into uv's requirements as `name==version`, it is a line of its own."""
    target = str(tmp_path / "tenant-files" / "proj") if option == "-e" else str(secret_file(tmp_path))
    entry = real_pin(index, "tinydep", "2.0")
    if field == "name":
        entry["name"] = f"tinydep==2.0\n{option} {target}\nzzz"
    else:
        entry["version"] = f"2.0\n{option} {target}"
    return entry


def assert_no_host_path(error, tmp_path: Path) -> None:
    text = f"{error.message} {error.hint or ''}"
    assert str(tmp_path) not in text and "/tmp/" not in text and SECRET not in text, text


@pytest.mark.parametrize("option", ["-e", "-r"])
@pytest.mark.parametrize("field", ["name", "version"])
def test_a_replayed_lock_smuggling_an_option_is_refused_at_replay(tmp_path, fresh_index, field, option):
    _, marker = tenant_project(tmp_path)
    inst = installer(tmp_path, fresh_index)
    packages = SessionPackages(tmp_path / "sessions" / "a")
    entry = smuggled(tmp_path, fresh_index, field, option)
    replay = inst.install(packages, PackageRequest(lock=PackageLock(python=(LockedPackage(**entry),))))
    later = inst.install(packages, PackageRequest(python=("tinyapp==1.0",)))  # what then ran uv on the entry
    assert not marker.exists()
    assert_no_host_path(replay.error or later.error, tmp_path)
    assert not replay.ok and replay.error.kind == "invalid_request", replay.error
    assert field in replay.error.message
    assert [p.name for p in later.installed] == ["tinyapp", "tinydep"]  # nothing of the entry was kept
    assert list(inst.cache().artifacts.iterdir()) != []


@pytest.mark.parametrize("option", ["-e", "-r"])
@pytest.mark.parametrize("field", ["name", "version"])
def test_an_entry_stored_by_older_code_is_refused_again_where_it_is_used(tmp_path, fresh_index, field, option):
    _, marker = tenant_project(tmp_path)
    inst = installer(tmp_path, fresh_index)
    packages = SessionPackages(tmp_path / "sessions" / "a")
    packages.ensure()
    entry = smuggled(tmp_path, fresh_index, field, option)
    packages.state_file.write_text(json.dumps({"packages": [{**entry, "files": []}]}))
    result = inst.install(packages, PackageRequest(python=("tinyapp==1.0",)))
    assert not marker.exists()
    assert_no_host_path(result.error, tmp_path)
    assert not result.ok and result.error.kind == "invalid_request", result.error
    assert fresh_index.requests == []  # refused before uv ran


def test_options_paths_and_urls_as_requirements_are_refused_before_uv(tmp_path, fresh_index):
    project, marker = tenant_project(tmp_path)
    secret = secret_file(tmp_path)
    inst = installer(tmp_path, fresh_index)
    packages = SessionPackages(tmp_path / "sessions" / "a")
    for text in (f"-e {project}", f"-r {secret}", f"-c {secret}", "--find-links http://127.0.0.1:1/", "-- tinydep",
                 str(project), "./proj", f"tinydep\n-e {project}", f"tinydep @ file://{project}"):
        result = inst.install(packages, PackageRequest(python=(text,)))
        assert not result.ok and result.error.kind in ("invalid_request", "index_not_allowed", "not_found"), text
        assert_no_host_path(result.error, tmp_path)
    assert not marker.exists() and fresh_index.requests == []


def test_a_wheel_whose_metadata_is_another_distribution_is_refused_and_not_cached(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    impostor = build_wheel(wheels, "impostor", "1.0", {"impostor/__init__.py": "X = 1\n"})
    disguised = impostor.rename(wheels / "tinydep-9.0-py3-none-any.whl")  # the file name says tinydep 9.0
    with serve_index(wheels) as index:
        inst = installer(tmp_path, index)
        packages = SessionPackages(tmp_path / "sessions" / "a")
        pin = LockedPackage(name="tinydep", version="9.0", filename=disguised.name, size=disguised.stat().st_size,
                            sha256=hashlib.sha256(disguised.read_bytes()).hexdigest(),
                            url=f"{index.url}/files/{disguised.name}")
        result = inst.install(packages, PackageRequest(lock=PackageLock(python=(pin,))))
        assert any(path.startswith("/files/tinydep-9.0") for path in index.requests)  # it was downloaded...
    assert not result.ok and result.error.kind == "unsafe_wheel" and "impostor" in result.error.message
    cache = inst.cache()
    assert list(cache.artifacts.iterdir()) == [] and list(cache.trees.iterdir()) == []  # ...and nothing kept
    assert packages.installed() == []
    assert_no_host_path(result.error, tmp_path)


@pytest.mark.parametrize("change", ["version", "name"])
def test_a_pin_whose_filename_names_another_distribution_is_refused_before_download(tmp_path, fresh_index, change):
    entry = real_pin(fresh_index, "tinydep", "2.0")  # tinydep-2.0-py3-none-any.whl
    entry[change] = "2.1" if change == "version" else "tinyapp"
    inst = installer(tmp_path, fresh_index)
    result = inst.install(SessionPackages(tmp_path / "s"), PackageRequest(lock=PackageLock(python=(LockedPackage(**entry),))))
    assert not result.ok and result.error.kind == "unsafe_wheel" and "tinydep-2.0" in result.error.message
    assert fresh_index.requests == [] and list(inst.cache().artifacts.iterdir()) == []


def test_an_index_linking_a_file_to_a_forbidden_loopback_port_is_refused_and_the_port_sees_nothing(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    with recorder() as forbidden:
        link = f"http://127.0.0.1:{forbidden.port}/files/leaky-1.0-py3-none-any.whl#sha256={'a' * 64}"
        with serve_index(wheels, extra_links={"leaky": [link]}) as index:
            result = installer(tmp_path, index).install(SessionPackages(tmp_path / "s"),
                                                        PackageRequest(python=("leaky",)))
            assert "/simple/leaky/" in index.requests  # the page was read through the proxy
        assert forbidden.connections == []
    assert not result.ok and result.error.kind == "denied_by_policy", result.error
    assert f"127.0.0.1:{forbidden.port}" in result.error.message
    assert_no_host_path(result.error, tmp_path)


def test_a_file_redirected_to_a_forbidden_loopback_port_is_refused_for_uv_and_for_the_host(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel = build_wheel(wheels, "bouncy", "1.0", {"bouncy/__init__.py": "X = 1\n"})
    with recorder() as forbidden:
        elsewhere = f"http://127.0.0.1:{forbidden.port}/{wheel.name}"
        with serve_index(wheels, redirects={wheel.name: elsewhere}) as index:
            inst = installer(tmp_path, index)
            by_name = inst.install(SessionPackages(tmp_path / "a"), PackageRequest(python=("bouncy==1.0",)))
            pin = LockedPackage(name="bouncy", version="1.0", filename=wheel.name, size=wheel.stat().st_size,
                                sha256=hashlib.sha256(wheel.read_bytes()).hexdigest(),
                                url=f"{index.url}/files/{wheel.name}")
            by_lock = inst.install(SessionPackages(tmp_path / "b"), PackageRequest(lock=PackageLock(python=(pin,))))
            assert f"/files/{wheel.name}" in index.requests
        assert forbidden.connections == []
    assert not by_name.ok and by_name.error.kind == "denied_by_policy", by_name.error  # the proxy refused uv
    assert not by_lock.ok and by_lock.error.kind == "index_not_allowed", by_lock.error  # the host refused itself
    for result in (by_name, by_lock):
        assert f"127.0.0.1:{forbidden.port}" in result.error.message
        assert_no_host_path(result.error, tmp_path)
    assert list(inst.cache().artifacts.iterdir()) == []


def test_a_failure_on_the_hosts_side_reaches_the_caller_without_host_paths(tmp_path, fresh_index):
    inst = installer(tmp_path, fresh_index)
    blocked = SessionPackages(tmp_path / "sessions" / "blocked")
    blocked.session_root.mkdir(parents=True)
    blocked.directory.write_text("not a directory")  # where the package directory must be
    result = inst.install(blocked, PackageRequest(python=("tinydep==2.0",)))
    assert not result.ok and result.error.kind == "resolver_failed"
    assert "<session>/packages" in result.error.message  # what failed, said without the host's path
    assert_no_host_path(result.error, tmp_path)


def test_a_download_redirected_outside_the_configured_sources_is_refused_even_where_the_session_may_go(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel = build_wheel(wheels, "bouncy", "1.0", {"bouncy/__init__.py": "X = 1\n"})
    with recorder() as elsewhere:
        with serve_index(wheels, redirects={wheel.name: f"http://127.0.0.1:{elsewhere.port}/{wheel.name}"}) as index:
            # the session itself may reach that port: the host's installs still go to the configured sources only
            policy = EgressPolicy(mode="allowlist", allow=(index.url, f"http://127.0.0.1:{elsewhere.port}"))
            pin = LockedPackage(name="bouncy", version="1.0", filename=wheel.name, size=wheel.stat().st_size,
                                sha256=hashlib.sha256(wheel.read_bytes()).hexdigest(),
                                url=f"{index.url}/files/{wheel.name}")
            inst = installer(tmp_path, index)
            result = inst.install(SessionPackages(tmp_path / "s"), PackageRequest(lock=PackageLock(python=(pin,))),
                                  policy=policy)
        assert elsewhere.connections == []
    assert not result.ok and result.error.kind == "index_not_allowed", result.error
    assert f"127.0.0.1:{elsewhere.port}" in result.error.message
