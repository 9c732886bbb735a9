"""A smolagents `CodeAgent` end to end on `WasmRunnerExecutor`: a scripted `Model` (smolagents' documented way
to plug in a model: subclass it and implement `generate`) answers with code, the code runs in a wasm-runner
session, variables persist between steps, and errors come back as smolagents' own exception types."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from smolagents import ActionStep, ChatMessage, CodeAgent, MessageRole, Model, tool
from smolagents.utils import AgentExecutionError

from wasm_runner_client import Client
from wasm_runner_smolagents import WasmRunnerExecutor

pytestmark = [pytest.mark.runtimes, pytest.mark.native]


class ScriptedModel(Model):
    """Answers each step with the next scripted reply and keeps what it was shown."""

    def __init__(self, *replies: str) -> None:
        super().__init__(model_id="scripted")
        self.replies = list(replies)
        self.seen: list[list[ChatMessage]] = []

    def generate(self, messages: list[ChatMessage], stop_sequences: list[str] | None = None,
                 response_format: dict[str, str] | None = None, tools_to_call_from: Any = None,
                 **kwargs: Any) -> ChatMessage:
        self.seen.append(list(messages))
        return ChatMessage(role=MessageRole.ASSISTANT, content=self.replies.pop(0))


def code(source: str) -> str:
    return f"Thought: next step.\n<code>\n{source}\n</code>"


def steps(agent: CodeAgent) -> list[ActionStep]:
    return [step for step in agent.memory.steps if isinstance(step, ActionStep)]


@pytest.fixture
def client(service_url: str) -> Iterator[Client]:
    with Client(service_url) as client:
        yield client


@pytest.fixture
def executor(client: Client) -> Iterator[WasmRunnerExecutor]:
    executor = WasmRunnerExecutor(client, timeout_s=20)
    yield executor
    executor.cleanup()


def test_variables_persist_between_steps_and_final_answer_comes_back(executor: WasmRunnerExecutor,
                                                                     client: Client) -> None:
    model = ScriptedModel(
        code("import os\nrows = [3, 4, 5]\nprint('cwd', os.getcwd())"),
        code("total = sum(rows) * factor\nopen('total.txt', 'w').write(str(total))"),
        code("final_answer({'total': total, 'rows': rows})"),
    )
    agent = CodeAgent(tools=[], model=model, executor=executor, max_steps=5)
    answer = agent.run("Add the rows", additional_args={"factor": 10})  # sent with send_variables
    assert answer == {"total": 120, "rows": [3, 4, 5]}
    assert "cwd /workspace" in steps(agent)[0].observations  # ran in the sandbox, not here
    assert client.read_text(executor.session_id, "total.txt") == "120"


def test_a_failing_step_is_an_agent_execution_error_the_model_sees(executor: WasmRunnerExecutor) -> None:
    model = ScriptedModel(
        code("ratio = 1 / 0"),
        code("ratio = 0.5\nfinal_answer(ratio)"),
    )
    agent = CodeAgent(tools=[], model=model, executor=executor, max_steps=4)
    assert agent.run("Divide") == 0.5
    failed = steps(agent)[0]
    assert isinstance(failed.error, AgentExecutionError)
    assert "ZeroDivisionError" in str(failed.error)
    assert any("ZeroDivisionError" in str(message.content) for message in model.seen[1])  # the retry saw it


def test_tools_are_sent_into_the_sandbox_and_called_there(executor: WasmRunnerExecutor) -> None:
    @tool
    def where_am_i() -> str:
        """Returns the working directory of the process that runs it."""
        import os

        return os.getcwd()

    model = ScriptedModel(code("final_answer(where_am_i())"))
    agent = CodeAgent(tools=[where_am_i], model=model, executor=executor, max_steps=2)
    assert agent.run("Where?") == "/workspace"


def test_code_over_its_time_limit_is_stopped_as_an_agent_error(client: Client) -> None:
    executor = WasmRunnerExecutor(client, timeout_s=1)
    try:
        model = ScriptedModel(code("import time\nprint('started')\ntime.sleep(30)"), code("final_answer('gave up')"))
        agent = CodeAgent(tools=[], model=model, executor=executor, max_steps=3)
        assert agent.run("Wait") == "gave up"
        error = steps(agent)[0].error
        assert isinstance(error, AgentExecutionError)
        assert "limit" in str(error)
    finally:
        executor.cleanup()


def test_an_existing_session_is_used_and_kept(client: Client) -> None:
    session = client.create_session(profile="python-data").id
    try:
        client.exec(session, "greeting = 'hello from before'")
        executor = WasmRunnerExecutor(client, session_id=session)
        agent = CodeAgent(tools=[], model=ScriptedModel(code("final_answer(greeting)")), executor=executor, max_steps=2)
        assert agent.run("Greet") == "hello from before"
        agent.cleanup()
        assert client.get_session(session).id == session  # not ours to delete
    finally:
        client.delete_session(session)


def test_cleanup_deletes_the_session_it_created(client: Client) -> None:
    executor = WasmRunnerExecutor(client)
    executor.cleanup()
    assert executor.session_id not in {s.id for s in client.list_sessions().sessions}
