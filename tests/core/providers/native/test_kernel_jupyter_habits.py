"""A python-data kernel takes `%pip install` as the session's own install: the session's venv, the
operator's registry, the run's network policy, kept with the session like `pip install` in its shell.

A loopback PEP 503 index stands in for PyPI (its invented name resolves to 127.0.0.1 through the
egress resolver, and the package settings name it, so installs may reach it)."""

from __future__ import annotations

import pytest
from package_index import demo_wheels, serve_index

from wasm_runner import Limits, Runner
from wasm_runner.egress.resolver import Resolver
from wasm_runner.egress.settings import EgressSettings
from wasm_runner.packages.settings import PackageSettings
from wasm_runner.providers.native import NativeProvider
from wasm_runner.providers.native.bwrap import find_bwrap, probe
from wasm_runner.providers.native.toolchain import find_python_data
from wasm_runner_protocol.egress import EgressPolicy

_path = find_bwrap()
SANDBOX_PROBLEM = "bubblewrap is not installed (run scripts/install-native.sh)" if _path is None else probe(_path)
pytestmark = [
    pytest.mark.skipif(SANDBOX_PROBLEM is not None, reason=f"no usable sandbox: {SANDBOX_PROBLEM}"),
    pytest.mark.skipif(find_python_data() is None, reason="the python-data environment is not built "
                       "(wasm-runner prepare)"),
]

PYPI = "pypi.magics.test"
ELSEWHERE = EgressPolicy(mode="allowlist", allow=("api.elsewhere.test",))
"""A session policy that names no registry: the host adds the configured one for installs."""
LIMITS = Limits(timeout_s=120)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with serve_index(demo_wheels(tmp_path_factory.mktemp("wheels"))) as index:
        settings = PackageSettings(python_index=f"http://{PYPI}:{index.url.rsplit(':', 1)[1]}/simple/",
                                   resolver_overrides={PYPI: ("127.0.0.1",)})
        yield settings, index, tmp_path_factory.mktemp("magics")


def runner_for(world) -> Runner:
    settings, _, root = world
    native = NativeProvider(egress=EgressSettings(resolver=Resolver({PYPI: ["127.0.0.1"]})))
    return Runner(root / "data", isolation="in-process", providers=[native], packages=settings)


def cell(session, code: str, policy: EgressPolicy = ELSEWHERE):
    return session.run_sync(code, language="python", provider="native", egress=policy, limits=LIMITS)


def test_pip_magic_installs_into_the_session_and_the_same_cell_imports_it(world):
    _, index, _ = world
    with runner_for(world) as runner:
        session = runner.session()
        session.workspace.ensure()
        assert cell(session, "state = 'kept'").error is None
        index.reset()
        result = cell(session, "%pip install --no-cache-dir tinyapp\nimport tinyapp\n(state, tinyapp.hello())")
        assert result.error is None, result.stderr
        assert "Successfully installed tinyapp-1.0 tinydep-2.1" in result.stdout
        assert result.value == "('kept', 'hello from tinyapp, tinydep 2.1')"
        assert not result.kernel_restarted
        assert "/simple/tinyapp/" in index.requests and all(e.allowed for e in result.network)
        site = session.workspace.internal / "venv" / "lib"
        assert list(site.glob("python3.*/site-packages/tinyapp/__init__.py")), "installed outside the session's venv"
        # Kept with the session, as an install from its shell is: a shell command of a later call imports it.
        later = session.run_sync("python -c 'import tinyapp; print(tinyapp.hello())'", language="bash",
                                 limits=LIMITS)
        assert later.stdout == "hello from tinyapp, tinydep 2.1\n", later.stderr
        assert not any(p.name == "tinyapp" for p in session.path.rglob("*"))  # not among the user's files


def test_pip_magic_under_deny_asks_no_registry_and_the_result_names_the_policy(world):
    _, index, _ = world
    with runner_for(world) as runner:
        session = runner.session()
        session.workspace.ensure()
        index.reset()
        result = cell(session, "%pip install --no-cache-dir --retries 0 tinyapp", policy=EgressPolicy())
        assert index.requests == []
        assert result.error is not None and result.error.type == "NetworkDenied", (result.error, result.stderr)
        assert "network policy is deny" in (result.error.hint or "")
        assert not list((session.workspace.internal / "venv" / "lib").glob("python3.*/site-packages/tinyapp"))


def test_a_failed_pip_magic_stops_the_cell_with_an_error(world):
    with runner_for(world) as runner:
        session = runner.session()
        session.workspace.ensure()
        result = cell(session, "%pip install --no-cache-dir --retries 0 no-such-package\nprint('not reached')")
        assert result.error is not None and result.error.type == "PipError", result.stderr
        assert "not reached" not in result.stdout and "No matching distribution" in result.stderr


def test_shell_lines_run_inside_the_sandbox_not_on_the_host(world, tmp_path):
    with runner_for(world) as runner:
        session = runner.session()
        session.workspace.ensure()
        marker = tmp_path / "host-only.txt"
        marker.write_text("host")
        result = cell(session, f"!whoami; hostname; cat {marker} || echo unseen\nprint('after')")
        assert result.error is None, result.stderr
        assert result.stdout.splitlines() == ["sandbox", "sandbox", "unseen", "after"]
        bash_cell = cell(session, "%%bash\nset -e\necho $0 $BASH_VERSION | cut -c1-9\ntouch made-by-bash")
        assert bash_cell.stdout == "/bin/bash\n", bash_cell.stderr
        assert bash_cell.files.created == ["made-by-bash"]
