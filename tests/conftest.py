import faulthandler
import inspect
import os
import secrets
from pathlib import Path

import pytest

from wasm_runner import Runner

TESTS = Path(__file__).parent

# Ray clusters the tests start advertise 127.0.0.1, not this machine's other addresses, and take
# drivers with this run's token only (Ray's default is token authentication with a token in the
# home directory): read when Ray is imported, so set before any test imports it, and inherited by
# the nodes and by the commands the tests run.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_AUTH_MODE"] = "token"
os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)

RUNTIME_FIXTURES = frozenset({
    "runner", "serve", "client", "served", "secure", "start_secure", "http_service", "connect", "server", "start_server",
})
"""Fixtures that run guests or start the service (directly or through the fixtures they use)."""

RUNTIME_DIRS = ("core/providers/wasm/", "core/execution/", "core/cli/", "core/cluster/")
"""Tests there run guests through runners and runtimes of their own."""

SERVICE_DIRS = ("server/", "client/")
"""Their asynchronous tests start a service (in-process or as a subprocess)."""

NATIVE_DIRS = ("core/providers/native/",)

RAY_GROUP = "ray_cluster"
"""The fixture of the tests on a Ray cluster, and their group under xdist."""

SLOW_MARKS = ("runtimes", "native", "cluster", "browser", "packaging")
SLOW_FIXTURES = frozenset({"postgres", "postgres_url", "s3", "storage"})
SLOW_DIRS = ("server/e2b/", "server/metadata/", "server/storage/", "core/snapshots/", "core/packages/", "packaging/")
"""What `-m "not slow"` leaves out: it starts real parts (a database, an S3 server, package indexes, service
processes, the E2B SDKs' sandboxes) or the runtimes; the rest checks the logic in about a minute."""

EXIT_GRACE_S = 120
"""How long the interpreter may take to exit once the run is over."""


def needs_runtimes(item: pytest.Item, where: str) -> bool:
    if RUNTIME_FIXTURES & set(getattr(item, "fixturenames", ())) or where.startswith(RUNTIME_DIRS):
        return True
    function = getattr(item, "function", None)
    return where.startswith(SERVICE_DIRS) and inspect.iscoroutinefunction(function)


def needs_bubblewrap(item: pytest.Item, where: str) -> bool:
    """Under the native provider's tests, or skipped where bubblewrap is missing or unusable."""
    if where.startswith(NATIVE_DIRS):
        return True
    reasons = (str(mark.kwargs.get("reason", "")).lower() for mark in item.iter_markers("skipif"))
    return any("bubblewrap" in reason or "sandbox" in reason for reason in reasons)


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks what needs the runtimes or bubblewrap (`-m "not runtimes and not native"`: the unit run), and
    what is slow (`-m "not slow"`: the quick check)."""
    for item in items:
        try:
            where = item.path.relative_to(TESTS).as_posix()
        except ValueError:  # collected from outside tests/
            continue
        if needs_runtimes(item, where):
            item.add_marker(pytest.mark.runtimes)
        if needs_bubblewrap(item, where):
            item.add_marker(pytest.mark.native)
        if RAY_GROUP in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)
        if (any(item.get_closest_marker(mark) for mark in SLOW_MARKS) or where.startswith(SLOW_DIRS)
                or SLOW_FIXTURES & set(getattr(item, "fixturenames", ()))):
            item.add_marker(pytest.mark.slow)
    if getattr(config.option, "loadgroup", False):  # set in an xdist worker under --dist loadgroup
        _group_for_workers(items)


def _group_for_workers(items: list[pytest.Item]) -> None:
    """Under xdist (`scripts/test` runs `-n auto --dist loadgroup`): a module's tests run on one worker, so its
    module fixtures (services, servers) start once; the tests on a Ray cluster run on one worker, so one
    cluster starts (a batch hung when two workers each started one), and first, being the longest group."""
    for item in items:
        group = RAY_GROUP if RAY_GROUP in getattr(item, "fixturenames", ()) else item.nodeid.split("::", 1)[0]
        item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=lambda item: item.get_closest_marker("xdist_group").args[0] != RAY_GROUP)  # stable


@pytest.fixture(scope="session")
def runner(tmp_path_factory):
    """One runner for the whole run: runtimes compile once and stay loaded. In-process: the
    providers' behaviour is under test here, and tests reach into the process's own instances
    (the default, worker processes, has tests of its own: core/execution/test_runner_isolation.py)."""
    with Runner(tmp_path_factory.mktemp("runner"), isolation="in-process") as r:
        r.providers[0].prepare()  # build and compile both runtimes outside any test's timing
        yield r


@pytest.fixture(scope="session")
def ray_cluster():
    """A Ray cluster of three nodes on this machine (one CPU each), this process its driver."""
    ray = pytest.importorskip("ray", reason="Ray is not installed (the `ray` extra)")
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    for _ in range(2):
        cluster.add_node(num_cpus=1)
    from wasm_runner.cluster.connection import connect

    connect(cluster.address)  # as a driver joins, keeping wasmtime's trap handlers for this process's guests
    yield cluster
    ray.shutdown()
    cluster.shutdown()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """A thread a test left stuck would keep the process from exiting, and CI would wait out its
    whole limit: past the grace, every thread's stack is printed and the run fails. (Not in an xdist worker:
    it waits, its tests done, until the last worker is done, and xdist ends it.)"""
    if not hasattr(config, "workerinput"):
        faulthandler.dump_traceback_later(EXIT_GRACE_S, exit=True)
