"""One wasm-runner service on 127.0.0.1 for the framework adapters' tests, run on a thread of its own (the
frameworks call it with blocking clients), started once per test run and stopped at its end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from server_helpers import make_config
from thread_server import ThreadServer

from wasm_runner_server.app import create_app


@pytest.fixture(scope="session")
def service_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a service with the default profiles (bash, python, python-data, ...), auth off."""
    service = ThreadServer(create_app(make_config(tmp_path_factory.mktemp("integrations")))).start()
    yield service.url
    service.stop()
