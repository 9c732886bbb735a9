"""The OpenAI Agents SDK's `SandboxAgent` end to end on `WasmRunnerSandboxClient`: a scripted `Model` (the
SDK's model interface, no model called) asks for the sandbox's own tools, which run in a wasm-runner
session; the session's files are the workspace, and failures come back as the SDK's sandbox errors."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agents import RunConfig, Runner
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.sandbox import SandboxAgent, SandboxRunConfig
from agents.sandbox.errors import ExecTimeoutError, WorkspaceReadNotFoundError
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from wasm_runner_client import AsyncClient
from wasm_runner_openai_agents import WasmRunnerSandboxClient

pytestmark = [pytest.mark.runtimes, pytest.mark.native]


class ScriptedModel(Model):
    """Returns its scripted outputs in turn and keeps the input it was given each time."""

    def __init__(self, *turns: list[Any]) -> None:
        self.turns = list(turns)
        self.inputs: list[Any] = []

    async def get_response(self, system_instructions: Any, input: Any, model_settings: Any, tools: Any,
                           output_schema: Any, handoffs: Any, tracing: Any, **kwargs: Any) -> ModelResponse:
        self.inputs.append(input)
        return ModelResponse(output=self.turns.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


def shell(call_id: str, cmd: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(type="function_call", name="exec_command", call_id=call_id, id=f"fc_{call_id}",
                                    arguments=json.dumps({"cmd": cmd}), status="completed")


def say(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(type="message", id="msg_1", role="assistant", status="completed",
                                 content=[ResponseOutputText(type="output_text", text=text, annotations=[])])


def tool_outputs(model: ScriptedModel) -> dict[str, str]:
    last = model.inputs[-1]
    return {item["call_id"]: str(item["output"]) for item in last
            if isinstance(item, dict) and item.get("type") == "function_call_output"}


async def test_a_sandbox_agent_runs_its_shell_in_the_session(service_url: str) -> None:
    model = ScriptedModel(
        [shell("a", "printf 'x\\ny\\n' > notes.txt && wc -l < notes.txt && pwd")],
        [shell("b", "python3 -c 'print(sum(range(10)))'; cat missing.txt")],
        [say("done")],
    )
    async with AsyncClient(service_url) as client:
        sandboxes = WasmRunnerSandboxClient(client)
        session = await sandboxes.create()
        async with session:
            agent = SandboxAgent(name="worker", instructions="Use the shell.", model=model)
            config = RunConfig(sandbox=SandboxRunConfig(session=session), tracing_disabled=True)  # no export to OpenAI
            result = await Runner.run(agent, "Count the lines", run_config=config)
            assert result.final_output == "done"
            outputs = tool_outputs(model)
            assert "2" in outputs["a"] and "/workspace" in outputs["a"]
            assert "45" in outputs["b"] and "No such file" in outputs["b"]
            inner = session._inner
            assert await client.read_text(inner.wasm_runner_session_id, "notes.txt") == "x\ny\n"  # the session's file
        await sandboxes.delete(session)
        assert inner.wasm_runner_session_id not in {s.id for s in (await client.list_sessions()).sessions}


async def test_files_and_errors_come_back_in_the_sdks_types(service_url: str) -> None:
    async with AsyncClient(service_url) as client:
        sandboxes = WasmRunnerSandboxClient(client)
        session = await sandboxes.create()
        try:
            async with session:
                await session.write(Path("data/in.bin"), io.BytesIO(bytes(range(256))))
                assert (await session.read(Path("/workspace/data/in.bin"))).read() == bytes(range(256))
                with pytest.raises(WorkspaceReadNotFoundError):
                    await session.read(Path("data/absent.txt"))
                with pytest.raises(ExecTimeoutError):
                    await session.exec("sleep 30", timeout=1)
                result = await session.exec("exit 3")
                assert result.exit_code == 3
        finally:
            await sandboxes.delete(session)


async def test_persisted_workspace_hydrates_a_new_session(service_url: str) -> None:
    async with AsyncClient(service_url) as client:
        sandboxes = WasmRunnerSandboxClient(client)
        first = await sandboxes.create()
        second = await sandboxes.create()
        try:
            async with first, second:
                await first.exec("mkdir -p src && echo 'print(1)' > src/main.py")
                await second.hydrate_workspace(await first.persist_workspace())
                assert (await second.exec("cat src/main.py")).stdout == b"print(1)\n"
        finally:
            await sandboxes.delete(first)
            await sandboxes.delete(second)


async def test_resume_reattaches_to_the_session_or_replaces_a_gone_one(service_url: str) -> None:
    async with AsyncClient(service_url) as client:
        sandboxes = WasmRunnerSandboxClient(client)
        session = await sandboxes.create()
        payload = sandboxes.serialize_session_state(session._inner.state)
        resumed = await sandboxes.resume(sandboxes.deserialize_session_state(dict(payload)))
        assert resumed._inner.wasm_runner_session_id == session._inner.wasm_runner_session_id
        await sandboxes.delete(session)
        replaced = await sandboxes.resume(sandboxes.deserialize_session_state(dict(payload)))
        try:
            assert replaced._inner.wasm_runner_session_id != session._inner.wasm_runner_session_id
            assert await replaced._inner.running()
        finally:
            await sandboxes.delete(replaced)
