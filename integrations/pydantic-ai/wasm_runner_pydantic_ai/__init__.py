"""pydantic-ai tools that run a model's code in a wasm-runner session."""

from wasm_runner_pydantic_ai.toolset import WasmRunnerToolset

__all__ = ["WasmRunnerToolset"]
