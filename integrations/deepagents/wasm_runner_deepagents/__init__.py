"""A LangChain Deep Agents sandbox backend that runs an agent's commands and files in wasm-runner."""

from wasm_runner_deepagents.sandbox import WORKSPACE, WasmRunnerSandbox

__all__ = ["WORKSPACE", "WasmRunnerSandbox"]
