"""langchain-tests' own `SandboxIntegrationTests` (the standard suite of Deep Agents sandboxes), run against a
`WasmRunnerSandbox` on a service the tests start."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from langchain_tests.integration_tests import SandboxIntegrationTests

from wasm_runner_client import Client
from wasm_runner_deepagents import WORKSPACE, WasmRunnerSandbox

pytestmark = [pytest.mark.runtimes, pytest.mark.native]


class TestWasmRunnerSandboxStandard(SandboxIntegrationTests):
    @property
    def sandbox_root_dir(self) -> str:
        # The suite's hook for the directory it writes in: a session's files live under /workspace (the
        # file API reaches nothing else), so the suite's default /tmp/ root moves there.
        return f"{WORKSPACE}/test_sandbox_ops/"

    @pytest.fixture(scope="class")
    def sandbox(self, service_url: str) -> Iterator[WasmRunnerSandbox]:
        with Client(service_url) as client, WasmRunnerSandbox.create(client) as backend:
            yield backend
