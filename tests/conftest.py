import inspect
from pathlib import Path

import pytest

from wasm_runner import Runner

TESTS = Path(__file__).parent

RUNTIME_FIXTURES = frozenset({
    "runner", "serve", "client", "served", "secure", "start_secure", "http_service", "connect", "server", "start_server",
})
"""Fixtures that run guests or start the service (directly or through the fixtures they use)."""

RUNTIME_DIRS = ("core/providers/wasm/", "core/execution/", "core/cli/")
"""Tests there run guests through runners and runtimes of their own."""

SERVICE_DIRS = ("server/", "client/")
"""Their asynchronous tests start a service (in-process or as a subprocess)."""

NATIVE_DIRS = ("core/providers/native/",)


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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks what needs the runtimes or bubblewrap, so `-m "not runtimes and not native"` is the unit run."""
    for item in items:
        try:
            where = item.path.relative_to(TESTS).as_posix()
        except ValueError:  # collected from outside tests/
            continue
        if needs_runtimes(item, where):
            item.add_marker(pytest.mark.runtimes)
        if needs_bubblewrap(item, where):
            item.add_marker(pytest.mark.native)


@pytest.fixture(scope="session")
def runner(tmp_path_factory):
    """One runner for the whole run: runtimes compile once and stay loaded."""
    with Runner(tmp_path_factory.mktemp("runner")) as r:
        r.providers[0].prepare()  # build and compile both runtimes outside any test's timing
        yield r
