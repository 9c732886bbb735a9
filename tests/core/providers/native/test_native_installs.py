"""pip, uv, npm and bun inside a native session install into the session, from the operator's registries.

A loopback PEP 503 index and a loopback npm registry stand in for PyPI and npmjs; the egress
resolver maps their invented names to 127.0.0.1, and the package settings pin the same names
(so the registries' loopback address is allowed for installs). The session's own network policy
names neither: the registries are added for installs by the host.
"""

from __future__ import annotations

import pytest
from npm_registry import demo_packages, serve_registry
from package_index import demo_wheels, serve_index

from wasm_runner import Limits, Runner
from wasm_runner.egress.resolver import Resolver
from wasm_runner.egress.settings import EgressSettings
from wasm_runner.packages.settings import PackageSettings
from wasm_runner.providers.native import NativeProvider
from wasm_runner.providers.native.bwrap import find_bwrap, probe
from wasm_runner.providers.native.js_toolchain import find_js_toolchain
from wasm_runner.providers.native.toolchain import find_python_data
from wasm_runner_protocol.egress import EgressPolicy

_path = find_bwrap()
SANDBOX_PROBLEM = "bubblewrap is not installed (run scripts/install-native.sh)" if _path is None else probe(_path)
pytestmark = pytest.mark.skipif(SANDBOX_PROBLEM is not None, reason=f"no usable sandbox: {SANDBOX_PROBLEM}")
needs_python_data = pytest.mark.skipif(find_python_data() is None, reason="the python-data environment is not built "
                                       "(wasm-runner prepare)")
needs_js_toolchain = pytest.mark.skipif(find_js_toolchain() is None, reason="the JavaScript toolchain is not built "
                                        "(wasm-runner prepare)")

PYPI = "pypi.installs.test"
NPM = "npm.installs.test"
NAMES = {PYPI: ["127.0.0.1"], NPM: ["127.0.0.1"], "evil.installs.test": ["127.0.0.1"]}
ELSEWHERE = EgressPolicy(mode="allowlist", allow=("api.elsewhere.test",))
"""A session policy that names no registry."""
LIMITS = Limits(timeout_s=120)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with serve_index(demo_wheels(tmp_path_factory.mktemp("wheels"))) as index, \
            serve_registry(demo_packages(), NPM) as registry:
        settings = PackageSettings(python_index=f"http://{PYPI}:{index.url.rsplit(':', 1)[1]}/simple/",
                                   npm_registry=registry.public(NPM),
                                   resolver_overrides={PYPI: ("127.0.0.1",), NPM: ("127.0.0.1",)})
        yield settings, index, registry, tmp_path_factory.mktemp("native-installs")


def runner_for(world, data_dir: str = "data") -> Runner:
    settings, _, _, root = world
    native = NativeProvider(egress=EgressSettings(resolver=Resolver(NAMES)))
    return Runner(root / data_dir, isolation="in-process", providers=[native], packages=settings)


def bash(session, script: str, policy: EgressPolicy = ELSEWHERE):
    result = session.run_sync(script, language="bash", egress=policy, limits=LIMITS)
    return result


@needs_python_data
def test_pip_install_goes_into_the_sessions_venv_and_later_calls_import_it(world):
    _, index, _, _ = world
    with runner_for(world) as runner:
        session = runner.session()
        session.workspace.ensure()
        kernel = session.run_sync("state = 'kept'", language="python", provider="native", limits=LIMITS)
        assert kernel.error is None, kernel.stderr
        index.reset()
        installed = bash(session, "pip install --no-cache-dir tinyapp")
        assert installed.exit_code == 0, installed.stderr
        assert "Successfully installed tinyapp-1.0 tinydep-2.1" in installed.stdout
        assert "/simple/tinyapp/" in index.requests and installed.network and all(e.allowed for e in installed.network)
        site = session.workspace.internal / "venv" / "lib"
        assert list(site.glob("python3.*/site-packages/tinyapp/__init__.py")), "installed outside the session's venv"
        data = find_python_data()
        assert data is not None and not list(data.path.glob("lib/python3.*/site-packages/tinyapp"))

        index.reset()
        where = ("import os, sys, tinyapp\n"
                 "at = sys.path.index(os.path.dirname(os.path.dirname(tinyapp.__file__)))\n"
                 "stdlib = sys.path.index(os.path.dirname(os.__file__))\n"
                 "(state, tinyapp.hello(), stdlib < at)")  # a venv's order: the standard library first
        same_kernel = session.run_sync(where, language="python", provider="native", limits=LIMITS)
        assert same_kernel.error is None, same_kernel.stderr
        assert not same_kernel.kernel_restarted
        assert same_kernel.value == "('kept', 'hello from tinyapp, tinydep 2.1', True)"
        fresh = session.run_sync("import tinyapp, numpy\nprint(tinyapp.hello())", language="python", provider="native",
                                 fresh=True, limits=LIMITS)
        assert fresh.stdout == "hello from tinyapp, tinydep 2.1\n", fresh.stderr
        assert index.requests == []  # nothing fetched again
        session_id = session.id

    with runner_for(world) as again:  # a new Runner on the same data directory, the network denied
        session = again.session(session_id)
        result = session.run_sync("python -c 'import tinyapp; print(tinyapp.hello())'", language="bash",
                                  limits=LIMITS)
        assert result.stdout == "hello from tinyapp, tinydep 2.1\n", result.stderr
        other = again.session()
        other.workspace.ensure()
        unseen = other.run_sync("python -c 'import tinyapp'", language="bash", limits=LIMITS)
        assert unseen.exit_code != 0 and "No module named 'tinyapp'" in unseen.stderr


@needs_python_data
def test_uv_pip_install_uses_the_session_venv_and_the_configured_index(world):
    with runner_for(world) as runner:
        session = runner.session()
        session.workspace.ensure()
        installed = bash(session, "uv pip install tinydep==2.0")
        assert installed.exit_code == 0, installed.stderr
        result = session.run_sync("import tinydep\ntinydep.VERSION", language="python", provider="native",
                                  limits=LIMITS)
        assert result.value == "'2.0'", result.stderr


@needs_python_data
def test_the_shared_python_data_environment_stays_read_only(world):
    with runner_for(world) as runner:
        session = runner.session()
        session.workspace.ensure()
        result = bash(session, "touch /opt/python-data/intruder 2>&1 || echo refused; "
                               "/opt/python-data/bin/python -m pip install --no-cache-dir tinydep 2>&1 | tail -1")
        assert "refused" in result.stdout and "Read-only file system" in result.stdout
        data = find_python_data()
        assert data is not None and not (data.path / "intruder").exists()
        assert not list(data.path.glob("lib/python3.*/site-packages/tinydep"))


@needs_python_data
def test_another_index_than_the_configured_one_is_refused_by_the_policy(world):
    _, index, _, _ = world
    with runner_for(world) as runner:
        session = runner.session()
        session.workspace.ensure()
        port = index.url.rsplit(":", 1)[1]
        result = bash(session, f"pip install --no-cache-dir --retries 0 --index-url http://evil.installs.test:{port}/simple/ "
                               "--trusted-host evil.installs.test tinydep")
        assert result.exit_code != 0
        assert result.error is not None and result.error.type == "NetworkDenied"
        assert [e.allowed for e in result.network if e.host == "evil.installs.test"][:1] == [False]


@needs_python_data
def test_under_deny_nothing_is_installed_and_the_registry_is_not_asked(world):
    _, index, _, _ = world
    with runner_for(world) as runner:
        session = runner.session()
        session.workspace.ensure()
        index.reset()
        result = bash(session, "pip install --no-cache-dir --retries 0 tinyapp", policy=EgressPolicy())
        assert result.exit_code != 0 and result.network and not any(e.allowed for e in result.network)
        assert index.requests == []
        assert not list((session.workspace.internal / "venv" / "lib").glob("python3.*/site-packages/tinyapp"))


@needs_js_toolchain
def test_npm_install_goes_into_the_sessions_node_modules_and_later_calls_require_it(world):
    _, _, registry, _ = world
    with runner_for(world) as runner:
        session = runner.session()
        session.workspace.ensure()
        registry.requests.clear()
        installed = bash(session, "npm install leftpad-lite")
        assert installed.exit_code == 0, installed.stderr
        assert "/leftpad-lite/-/leftpad-lite-1.0.0.tgz" in registry.requests
        assert (session.path / "node_modules" / "pad-core" / "index.js").is_file()
        registry.requests.clear()
        required = bash(session, "cd /tmp && node -e \"console.log(require('leftpad-lite')('ab'))\"",
                        policy=EgressPolicy())
        assert required.stdout == "[   ab]\n", required.stderr
        code = session.run_sync("console.log(require('leftpad-lite')('xy'))", language="javascript",
                                provider="native", limits=LIMITS)
        assert code.stdout == "[   xy]\n", code.stderr
        assert registry.requests == []
        session_id = session.id
    with runner_for(world) as again:
        result = again.session(session_id).run_sync("node -e \"require('leftpad-lite')\" && echo found",
                                                    language="bash", limits=LIMITS)
        assert result.stdout == "found\n", result.stderr


@needs_js_toolchain
def test_bun_install_goes_into_the_session_and_bun_runs_code_that_imports_it(world):
    toolchain = find_js_toolchain()
    if toolchain is None or "bun" not in toolchain.versions:
        pytest.skip("the JavaScript toolchain has no bun (wasm-runner prepare installs it)")
    with runner_for(world) as runner:
        session = runner.session()
        session.workspace.ensure()
        installed = bash(session, "bun install leftpad-lite")
        assert installed.exit_code == 0, installed.stderr
        result = session.run_sync("const pad: (s: string) => string = require('leftpad-lite');\nconsole.log(pad('b'))",
                                  language="typescript", provider="native", env={"WASM_RUNNER_JS_RUNTIME": "bun"},
                                  limits=LIMITS)
        assert result.stdout == "[    b]\n", result.stderr


@needs_python_data
def test_sandboxes_on_worker_processes_get_the_runners_registries(world, tmp_path):
    settings, _, _, _ = world
    with Runner(tmp_path / "data", kernel_workers=1, packages=settings) as runner:
        session = runner.session()
        session.workspace.ensure()
        result = bash(session, 'echo "$PIP_INDEX_URL $npm_config_registry $VIRTUAL_ENV $NODE_PATH"')
        assert result.exit_code == 0, result.stderr
        assert result.stdout.split() == [settings.python_index, settings.npm_registry, "/opt/venv",
                                         "/workspace/node_modules"]
