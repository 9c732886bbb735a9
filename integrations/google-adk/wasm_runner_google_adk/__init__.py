"""A Google ADK code executor that runs an agent's code in a wasm-runner session."""

from wasm_runner_google_adk.executor import WasmRunnerCodeExecutor

__all__ = ["WasmRunnerCodeExecutor"]
