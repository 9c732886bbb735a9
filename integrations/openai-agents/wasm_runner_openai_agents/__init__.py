"""An OpenAI Agents SDK sandbox backend (BaseSandboxClient, BaseSandboxSession) over wasm-runner sessions."""

from wasm_runner_openai_agents.sandbox import (
    WasmRunnerSandboxClient,
    WasmRunnerSandboxClientOptions,
    WasmRunnerSandboxSession,
    WasmRunnerSandboxSessionState,
)

__all__ = ["WasmRunnerSandboxClient", "WasmRunnerSandboxClientOptions", "WasmRunnerSandboxSession",
           "WasmRunnerSandboxSessionState"]
