"""One install from the real Python Package Index, where this machine reaches it."""

import httpx
import pytest

from wasm_runner.packages import PackageSettings, SessionPackages
from wasm_runner.packages.installer import PackageInstaller
from wasm_runner_protocol.packages import PackageRequest


def _pypi_unreachable() -> str | None:
    try:
        httpx.get("https://pypi.org/simple/six/", timeout=5).raise_for_status()
    except httpx.HTTPError as exc:
        return f"pypi.org is unreachable from this machine ({exc})"
    return None


def test_a_pure_python_package_installs_from_pypi(tmp_path):
    reason = _pypi_unreachable()
    if reason:
        pytest.skip(reason)
    installer = PackageInstaller(PackageSettings(), tmp_path / "data")
    packages = SessionPackages(tmp_path / "session")
    result = installer.install(packages, PackageRequest(python=("six==1.17.0",)))
    assert result.ok, result.error
    assert [(p.name, p.version, p.source) for p in result.installed] == [("six", "1.17.0", "download")]
    assert (packages.directory / "six.py").is_file()
    native = installer.install(packages, PackageRequest(python=("pyyaml==6.0.3",)))
    assert not native.ok and native.error.kind == "native_code" and "pyyaml" in native.error.message.lower()
