"""Installs on the host: resolved by uv on a loopback index, cached per workspace by hash, checked by policy."""

import os
from pathlib import Path

import msgspec
import pytest
from package_index import build_sdist, build_wheel, serve_index

from wasm_runner.packages import PackageSettings, SessionPackages
from wasm_runner.packages.installer import PackageInstaller
from wasm_runner_protocol.egress import EgressPolicy
from wasm_runner_protocol.packages import PackageRequest


def installer(tmp_path: Path, index, **settings) -> PackageInstaller:
    return PackageInstaller(PackageSettings(python_index=index.simple, **settings), tmp_path / "data")


def session_dir(tmp_path: Path, name: str) -> SessionPackages:
    return SessionPackages(tmp_path / "sessions" / name)


def install(inst: PackageInstaller, packages: SessionPackages, *python: str, **fields):
    policy = fields.pop("policy", None)
    workspace = fields.pop("workspace", "default")
    allow = fields.pop("allow_custom_index", False)
    return inst.install(packages, PackageRequest(python=python, **fields), policy=policy,
                        allow_custom_index=allow, workspace=workspace)


def test_install_resolves_the_dependency_and_links_read_only_files(tmp_path, fresh_index):
    inst = installer(tmp_path, fresh_index)
    packages = session_dir(tmp_path, "a")
    result = install(inst, packages, "tinyapp==1.0")
    assert result.ok, result.error
    assert {(p.name, p.version, p.source) for p in result.installed} == {("tinyapp", "1.0", "download"),
                                                                         ("tinydep", "2.1", "download")}
    assert all(len(p.sha256) == 64 and p.size > 0 for p in result.installed)
    module = packages.directory / "tinyapp" / "__init__.py"
    cached = inst.cache().trees / result.installed[0].sha256 / "tinyapp" / "__init__.py"
    assert os.path.samefile(module, cached)  # shared by hard link, never copied
    assert not os.access(module, os.W_OK) or os.geteuid() == 0
    assert oct(module.stat().st_mode & 0o777) == "0o444"
    assert [p.name for p in packages.lock().python] == ["tinyapp", "tinydep"]


def test_a_second_session_installs_from_the_cache_with_zero_index_requests(tmp_path, fresh_index):
    inst = installer(tmp_path, fresh_index)
    assert install(inst, session_dir(tmp_path, "first"), "tinyapp==1.0").ok
    assert fresh_index.requests  # the first install asked the index
    fresh_index.reset()
    second = install(inst, session_dir(tmp_path, "second"), "tinyapp==1.0")
    assert second.ok and {p.source for p in second.installed} == {"cache"}
    assert second.index_requests == 0 and fresh_index.requests == []


def test_a_corrupted_cached_wheel_is_downloaded_again(tmp_path, fresh_index):
    inst = installer(tmp_path, fresh_index)
    first = install(inst, session_dir(tmp_path, "first"), "tinydep==2.0")
    artifact = inst.cache().artifacts / f"{first.installed[0].sha256}.whl"
    os.chmod(artifact, 0o644)
    artifact.write_bytes(b"not the wheel")
    fresh_index.reset()
    again = install(inst, session_dir(tmp_path, "second"), "tinydep==2.0")
    assert again.ok and again.installed[0].source == "download"
    assert any(path.startswith("/files/tinydep-2.0") for path in fresh_index.requests)


def test_the_native_tagged_wheel_is_refused_with_the_hint(tmp_path, fresh_index):
    result = install(installer(tmp_path, fresh_index), session_dir(tmp_path, "a"), "fastext")
    assert not result.ok and result.error.kind == "native_code" and result.error.package == "fastext"
    assert "python-data" in result.error.hint and result.installed == []


def test_unknown_packages_are_a_clear_result(tmp_path, fresh_index):
    result = install(installer(tmp_path, fresh_index), session_dir(tmp_path, "a"), "nosuch-package")
    assert not result.ok and result.error.kind == "not_found" and "nosuch-package" in result.error.message


def test_a_lock_replayed_in_a_new_session_gives_the_same_versions_without_resolving(tmp_path, fresh_index):
    inst = installer(tmp_path, fresh_index)
    source = session_dir(tmp_path, "source")
    assert install(inst, source, "tinyapp==1.0", "tinydep==2.0").ok
    lock = source.lock()
    replayed = session_dir(tmp_path, "replayed")
    fresh_index.reset()
    result = inst.install(replayed, PackageRequest(lock=lock))
    assert result.ok
    assert [(p.name, p.version, p.sha256) for p in replayed.lock().python] == \
        [(p.name, p.version, p.sha256) for p in lock.python]
    assert not any(path.startswith("/simple/") for path in fresh_index.requests)  # no resolution


def test_a_lock_pointing_elsewhere_is_refused_unless_other_indexes_are_allowed(tmp_path, fresh_index):
    inst = installer(tmp_path, fresh_index, resolver_overrides={"mirror.test": ("127.0.0.1",)})
    source = session_dir(tmp_path, "source")
    assert install(inst, source, "tinydep==2.0").ok
    [pin] = source.lock().python
    elsewhere = msgspec.structs.replace(pin, url=pin.url.replace("127.0.0.1", "mirror.test"))  # the same bytes
    lock = msgspec.structs.replace(source.lock(), python=(elsewhere,))
    inst.cache().drop(pin.sha256)  # to be downloaded again
    fresh_index.reset()
    wide = EgressPolicy(mode="allowlist", allow=("mirror.test:*", "127.0.0.1:*"))  # the session's own policy allows both
    refused = inst.install(session_dir(tmp_path, "a"), PackageRequest(lock=lock), policy=wide)
    assert not refused.ok and refused.error.kind == "index_not_allowed" and refused.error.package == "tinydep"
    assert "mirror.test" in refused.error.message and fresh_index.requests == []
    allowed = inst.install(session_dir(tmp_path, "b"), PackageRequest(lock=lock), policy=wide, allow_custom_index=True)
    assert allowed.ok and allowed.installed[0].source == "download"


def test_an_index_the_policy_does_not_allow_is_refused_before_any_request(tmp_path, fresh_index):
    result = install(installer(tmp_path, fresh_index), session_dir(tmp_path, "a"), "tinyapp",
                     policy=EgressPolicy(mode="allowlist", allow=("pypi.org", "files.pythonhosted.org")))
    assert not result.ok and result.error.kind == "denied_by_policy"
    assert "127.0.0.1" in result.error.message and fresh_index.requests == []


def test_a_request_cannot_name_another_index_unless_allowed(tmp_path, fresh_index):
    inst = PackageInstaller(PackageSettings(python_index="https://pypi.org/simple/"), tmp_path / "data")
    refused = install(inst, session_dir(tmp_path, "a"), "tinydep", index=fresh_index.simple)
    assert not refused.ok and refused.error.kind == "index_not_allowed"
    allowed = install(inst, session_dir(tmp_path, "b"), "tinydep", index=fresh_index.simple, allow_custom_index=True)
    assert allowed.ok and allowed.installed[0].version == "2.1"


def test_upgrading_replaces_the_old_version_files(tmp_path, fresh_index):
    inst = installer(tmp_path, fresh_index)
    packages = session_dir(tmp_path, "a")
    assert install(inst, packages, "tinydep==2.0").ok
    assert install(inst, packages, "tinydep==2.1").ok
    assert (packages.directory / "tinydep" / "__init__.py").read_text() == "VERSION = '2.1'\n"
    assert [(p.name, p.version) for p in packages.lock().python] == [("tinydep", "2.1")]


def test_limits_packages_per_session_and_bytes_per_install(tmp_path, fresh_index):
    few = install(installer(tmp_path / "few", fresh_index, max_packages=1), session_dir(tmp_path, "a"), "tinyapp==1.0")
    assert not few.ok and few.error.kind == "too_many_packages" and few.installed == []
    small = install(installer(tmp_path / "small", fresh_index, max_install_bytes=100), session_dir(tmp_path, "b"),
                    "tinydep==2.0")
    assert not small.ok and small.error.kind == "too_large"


def test_the_cache_quota_evicts_least_recently_used_and_refuses_what_cannot_fit(tmp_path, fresh_index):
    inst = installer(tmp_path, fresh_index, cache_quota_bytes=1800)
    old = install(inst, session_dir(tmp_path, "a"), "tinydep==2.0").installed[0].sha256
    new = install(inst, session_dir(tmp_path, "b"), "tinydep==2.1").installed[0].sha256
    cache = inst.cache()
    assert cache.usage() <= 1800
    assert not (cache.artifacts / f"{old}.whl").exists() and (cache.artifacts / f"{new}.whl").exists()
    assert (tmp_path / "sessions" / "a" / "packages" / "tinydep" / "__init__.py").exists()  # sessions keep theirs
    tiny = installer(tmp_path / "tiny", fresh_index, cache_quota_bytes=10)
    refused = install(tiny, session_dir(tmp_path, "c"), "tinydep==2.0")
    assert not refused.ok and refused.error.kind == "quota"


def test_caches_are_per_workspace(tmp_path, fresh_index):
    inst = installer(tmp_path, fresh_index)
    assert install(inst, session_dir(tmp_path, "a"), "tinydep==2.0", workspace="acme").ok
    other = install(inst, session_dir(tmp_path, "b"), "tinydep==2.0", workspace="globex")
    assert other.installed[0].source == "download"


def test_a_hash_that_does_not_match_the_index_bytes_is_refused(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    build_wheel(wheels, "tinydep", "2.0", {"tinydep/__init__.py": "VERSION = '2.0'\n"})
    with serve_index(wheels) as served:
        inst = installer(tmp_path, served)
        packages = session_dir(tmp_path, "a")
        assert install(inst, packages, "tinydep==2.0").ok
        lock = packages.lock()
        forged = type(lock)(python=(type(lock.python[0])(**{**{f: getattr(lock.python[0], f) for f in (
            "name", "version", "filename", "size", "url")}, "sha256": "0" * 64}),))
        result = inst.install(session_dir(tmp_path, "b"), PackageRequest(lock=forged))
    assert not result.ok and result.error.kind == "hash_mismatch"


@pytest.mark.parametrize("text", ["tinyapp @ https://evil.test/tinyapp.whl", "not a requirement!"])
def test_url_requirements_and_garbage_are_refused(tmp_path, fresh_index, text):
    result = install(installer(tmp_path, fresh_index), session_dir(tmp_path, "a"), text)
    assert not result.ok and result.error.kind in ("index_not_allowed", "not_found") and fresh_index.requests == []


def test_an_index_with_only_a_source_distribution_is_refused_with_the_native_hint(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    build_sdist(wheels, "onlysrc", "1.0")
    with serve_index(wheels) as served:
        result = install(installer(tmp_path, served), session_dir(tmp_path, "a"), "onlysrc==1.0")
        assert not any(path.startswith("/files/") for path in served.requests)  # never fetched, never built
    assert not result.ok and result.error.kind in ("sdist_only", "no_compatible_wheel")
    assert result.error.package == "onlysrc" and "source distribution" in result.error.message
    assert "native session" in result.error.hint and "python-data" in result.error.hint


def test_the_install_time_limit_stops_an_index_that_does_not_answer(tmp_path, fresh_index):
    fresh_index.open.clear()  # the index holds every request (3 s: time for the resolver to reach it on a busy machine)
    try:
        result = install(installer(tmp_path, fresh_index, max_install_s=3.0), session_dir(tmp_path, "a"), "tinydep")
    finally:
        fresh_index.open.set()
    assert not result.ok and result.error.kind == "timeout"
    assert fresh_index.requests and result.duration_ms < 15_000


def test_a_recently_reused_artifact_survives_the_eviction_of_an_older_one(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for name in ("pkga", "pkgb", "pkgc"):  # same sizes
        build_wheel(wheels, name, "1.0", {f"{name}/__init__.py": "VALUE = 1\n" * 20})
    with serve_index(wheels) as served:
        probe = installer(tmp_path / "probe", served)
        assert install(probe, session_dir(tmp_path / "probe", "p"), "pkga==1.0").ok
        one = probe.cache().usage()
        inst = installer(tmp_path, served, cache_quota_bytes=2 * one + one // 2)  # two fit, not three
        [a] = install(inst, session_dir(tmp_path, "s1"), "pkga==1.0").installed
        [b] = install(inst, session_dir(tmp_path, "s2"), "pkgb==1.0").installed
        reused = install(inst, session_dir(tmp_path, "s3"), "pkga==1.0")  # a: older, but used last
        assert [p.source for p in reused.installed] == ["cache"]
        [c] = install(inst, session_dir(tmp_path, "s4"), "pkgc==1.0").installed
    cache = inst.cache()
    assert cache.usage() <= inst.settings.cache_quota_bytes
    assert cache.artifact(a.sha256) is not None and cache.artifact(c.sha256) is not None
    assert not (cache.artifacts / f"{b.sha256}.whl").exists()


def test_a_failure_on_the_hosts_side_is_a_result_not_an_exception(tmp_path, fresh_index):
    inst = installer(tmp_path, fresh_index)
    blocked = session_dir(tmp_path, "blocked")
    blocked.session_root.mkdir(parents=True)
    blocked.directory.write_text("not a directory")  # where the package directory must be
    result = install(inst, blocked, "tinydep==2.0")
    assert not result.ok and result.error.kind == "resolver_failed"
    assert "could not complete the install" in result.error.message and "packages" in result.error.message
    damaged = session_dir(tmp_path, "damaged")
    damaged.session_root.mkdir(parents=True)
    damaged.state_file.write_text("{not json")
    result = install(inst, damaged, "tinydep==2.0")
    assert not result.ok and result.error.kind == "resolver_failed" and result.error.hint
