"""A Deep Agent end to end on a `WasmRunnerSandbox`: LangChain's own fake chat model plays the model (its
tool calls are scripted), the agent's tools run in a wasm-runner session, and the files it writes are the
session's."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from deepagents import create_deep_agent
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from wasm_runner_client import Client
from wasm_runner_deepagents import WasmRunnerSandbox

pytestmark = [pytest.mark.runtimes, pytest.mark.native]


class ScriptedModel(FakeMessagesListChatModel):
    """The fake model answers with its scripted messages in turn; binding tools changes nothing."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedModel:
        return self


def call(name: str, call_id: str, **args: Any) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}])


def tool_answers(messages: list[BaseMessage]) -> dict[str, str]:
    return {m.tool_call_id: str(m.content) for m in messages if isinstance(m, ToolMessage)}


@pytest.fixture
def client(service_url: str) -> Iterator[Client]:
    with Client(service_url) as client:
        yield client


def test_agent_writes_runs_and_reads_in_the_session(client: Client) -> None:
    script = [
        call("write_file", "w", file_path="/workspace/data/rows.csv", content="a,1\nb,2\nc,3\n"),
        call("execute", "x", command="wc -l < /workspace/data/rows.csv; python3 -c 'print(6*7)'"),
        call("read_file", "r", file_path="/workspace/data/rows.csv"),
        AIMessage(content="The sum is 6."),
    ]
    with WasmRunnerSandbox.create(client) as sandbox:
        agent = create_deep_agent(model=ScriptedModel(responses=script), backend=sandbox)
        state = agent.invoke({"messages": [{"role": "user", "content": "Sum column 2 of rows.csv"}]})
        answers = tool_answers(state["messages"])
        assert client.read_text(sandbox.id, "data/rows.csv") == "a,1\nb,2\nc,3\n"  # the session's own file
        assert answers["x"].split()[:2] == ["3", "42"] and "exit code 0" in answers["x"]
        assert "b,2" in answers["r"]
        assert state["messages"][-1].content == "The sum is 6."


def test_a_failing_command_reports_its_exit_code_and_stderr(client: Client) -> None:
    script = [call("execute", "x", command="ls /workspace/missing; exit 7"), AIMessage(content="It failed.")]
    with WasmRunnerSandbox.create(client) as sandbox:
        agent = create_deep_agent(model=ScriptedModel(responses=script), backend=sandbox)
        answers = tool_answers(agent.invoke({"messages": [{"role": "user", "content": "list"}]})["messages"])
    assert "No such file or directory" in answers["x"]
    assert "exit code 7" in answers["x"]


def test_state_persists_between_commands_as_files(client: Client) -> None:
    with WasmRunnerSandbox.create(client) as sandbox:
        assert sandbox.execute("echo kept > /workspace/state.txt").exit_code == 0
        assert sandbox.execute("cat state.txt").output.strip() == "kept"  # the working directory is /workspace
        assert sandbox.download_files(["/workspace/state.txt"])[0].content == b"kept\n"


@pytest.mark.parametrize("path", ["/etc/passwd", "/tmp/x", "/workspace", "/workspace/../etc/passwd",
                                  "/workspace/a/../../etc/passwd", "relative.txt"])
def test_paths_outside_the_workspace_are_invalid_before_any_call(client: Client, path: str) -> None:
    sandbox = WasmRunnerSandbox(client, "no-such-session")  # no call is made: a missing session is never seen
    assert sandbox.upload_files([(path, b"x")])[0].error == "invalid_path"
    assert sandbox.download_files([path])[0].error == "invalid_path"


def test_a_command_over_its_timeout_is_stopped_and_says_so(client: Client) -> None:
    with WasmRunnerSandbox.create(client) as sandbox:
        result = sandbox.execute("echo started; sleep 30", timeout=1)
    assert result.output.startswith("started")
    assert "limit was reached" in result.output
    assert result.exit_code != 0


def test_close_deletes_the_session_it_created(client: Client) -> None:
    sandbox = WasmRunnerSandbox.create(client)
    sandbox.execute("true")
    sandbox.close()
    assert sandbox.id not in {s.id for s in client.list_sessions().sessions}
