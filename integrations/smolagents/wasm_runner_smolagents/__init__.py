"""A smolagents remote Python executor that runs a CodeAgent's code in a wasm-runner session."""

from wasm_runner_smolagents.executor import WasmRunnerExecutor

__all__ = ["WasmRunnerExecutor"]
