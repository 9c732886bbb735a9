"""A pydantic-ai `Agent` end to end with `WasmRunnerToolset`: pydantic-ai's own `FunctionModel` plays the
model (its tool calls are scripted), the tools run in a wasm-runner session, state persists between calls,
and a failure comes back to the model as pydantic-ai's `ModelRetry`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from wasm_runner_client import AsyncClient
from wasm_runner_pydantic_ai import WasmRunnerToolset

pytestmark = [pytest.mark.runtimes, pytest.mark.native]


def scripted(*turns: Any) -> FunctionModel:
    remaining = list(turns)

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        part = remaining.pop(0)
        return ModelResponse(parts=[part])

    return FunctionModel(respond)


def call(tool: str, call_id: str, **args: Any) -> ToolCallPart:
    return ToolCallPart(tool_name=tool, args=args, tool_call_id=call_id)


def returns(messages: list[ModelMessage], outcome: str = "success") -> dict[str, Any]:
    """The tools' answers by call id: `success`, or `retried` for a `ModelRetry` the model was shown."""
    return {part.tool_call_id: part.content for message in messages for part in message.parts
            if isinstance(part, ToolReturnPart) and part.outcome == outcome}


@pytest.fixture
async def toolset(service_url: str) -> AsyncIterator[WasmRunnerToolset]:
    async with AsyncClient(service_url) as client:
        tools = await WasmRunnerToolset.create(client, timeout_s=20)
        yield tools
        await tools.aclose()


async def test_code_shell_and_files_share_one_session(toolset: WasmRunnerToolset) -> None:
    model = scripted(
        call("run_python", "a", code="import os\nx = 6\nprint(os.getcwd())\nx * 7"),
        call("run_shell", "b", command="echo from-shell > note.txt && python3 -c 'print(2 + 2)'"),
        call("run_python", "c", code="open('note.txt').read().strip() + str(x)"),
        call("write_file", "d", path="out/answer.txt", content="42"),
        call("read_file", "e", path="out/answer.txt"),
        TextPart("done"),
    )
    agent = Agent(model, toolsets=[toolset])
    result = await agent.run("Work in the sandbox")
    answers = returns(result.all_messages())
    assert result.output == "done"
    assert answers["a"] == "/workspace\n42"  # ran in the sandbox, and the last expression came back
    assert answers["b"] == "4\n"
    assert answers["c"] == "'from-shell6'"  # x kept from the first call; the shell's file seen by Python
    assert answers["e"] == "42"
    assert await toolset.client.read_text(toolset.session_id, "out/answer.txt") == "42"


async def test_a_failure_is_a_retry_prompt_the_model_sees(toolset: WasmRunnerToolset) -> None:
    model = scripted(
        call("run_python", "a", code="ratio = 1 / 0"),
        call("run_shell", "b", command="ls missing-dir"),
        call("read_file", "c", path="missing.txt"),
        TextPart("gave up"),
    )
    result = await Agent(model, toolsets=[toolset]).run("Divide")
    retries = returns(result.all_messages(), "retried")
    assert "ZeroDivisionError" in retries["a"]
    assert "No such file or directory" in retries["b"] and "exit code 2" in retries["b"]
    assert "missing.txt" in retries["c"]
    assert result.output == "gave up"


async def test_a_run_over_its_time_limit_is_stopped_and_retried(service_url: str) -> None:
    async with AsyncClient(service_url) as client:
        tools = await WasmRunnerToolset.create(client, timeout_s=1)
        try:
            model = scripted(call("run_python", "a", code="while True: pass"), TextPart("stopped"))
            result = await Agent(model, toolsets=[tools]).run("Loop")
            assert "limit" in returns(result.all_messages(), "retried")["a"]
        finally:
            await tools.aclose()
        assert tools.session_id not in {s.id for s in (await client.list_sessions()).sessions}
