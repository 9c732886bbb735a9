"""Scenarios of `WasmRunnerCodeExecutor` with the real ADK, run inside the ADK test environment (ADK's
requirements conflict with the project's, see test_google_adk_executor.py): `python adk_scenarios.py
<scenario> <service url>` exits 0 when the scenario's checks hold, else shows the failed assertion.

`executor` calls the executor directly with ADK's own `InvocationContext` and `CodeExecutionInput`; `agent`
drives an `LlmAgent` through ADK's `InMemoryRunner` with a scripted `BaseLlm` (no real model calls), so the
code blocks are found, run, reported to the model and saved as artifacts by ADK's own LLM flow."""

from __future__ import annotations

import asyncio
import base64
import sys
from collections.abc import AsyncGenerator, Callable
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.agents.invocation_context import InvocationContext
from google.adk.code_executors.code_execution_utils import CodeExecutionInput, File
from google.adk.events import Event
from google.adk.models import BaseLlm, LlmRequest, LlmResponse
from google.adk.runners import InMemoryRunner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from wasm_runner_client import Client, NotFoundError
from wasm_runner_google_adk import WasmRunnerCodeExecutor


class ScriptedModel(BaseLlm):
    """Answers each model call with the next scripted text and keeps the requests it was sent."""

    model: str = "scripted"
    replies: list[str] = []
    requests: list[LlmRequest] = []

    async def generate_content_async(self, llm_request: LlmRequest,
                                     stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
        self.requests.append(llm_request)
        text = self.replies.pop(0)
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))


def python(code: str) -> str:
    return f"Let me compute that.\n```python\n{code}\n```"


def request_text(request: LlmRequest) -> str:
    return "\n".join(part.text or "" for content in request.contents for part in content.parts or [])


def results(events: list[Event]) -> list[types.CodeExecutionResult]:
    return [part.code_execution_result for event in events for part in (event.content.parts or []) if event.content
            if part.code_execution_result is not None]


async def executor_scenario(url: str) -> None:
    with Client(url) as client:
        executor = WasmRunnerCodeExecutor(client, timeout_seconds=30)
        sessions = InMemorySessionService()
        agent = LlmAgent(name="analyst", model=ScriptedModel(), code_executor=executor)

        async def context() -> InvocationContext:
            session = await sessions.create_session(app_name="adk", user_id="u")
            return InvocationContext(session_service=sessions, invocation_id="i", agent=agent, session=session)

        first, second = await context(), await context()

        def run(ctx: InvocationContext, code: str, files: list[File] | None = None) -> Any:
            return executor.execute_code(ctx, CodeExecutionInput(code=code, input_files=files or [],
                                                                 execution_id=ctx.session.id))

        # The code runs in wasm-runner: its own workspace, not this process's directory.
        ran = run(first, "import os\nx = 6 * 7\nprint('pid', os.getpid(), 'cwd', os.getcwd())\nx")
        assert ran.stderr == "" and ran.exit_code == 0, ran
        assert ran.stdout.endswith("42\n"), ran.stdout
        session_id = executor.session_id(first.session.id)
        assert session_id is not None and client.get_session(session_id).profile == "python-data"

        # State persists within an ADK session, and not across ADK sessions.
        assert run(first, "print(x + 1)").stdout == "43\n"
        other = run(second, "print(x)")
        assert "NameError" in other.stderr and other.exit_code != 0, other
        assert executor.session_id(second.session.id) != session_id

        # An error comes back in ADK's shape: a non-empty stderr (the traceback) and a non-zero exit code,
        # with what the code printed before it.
        error = run(first, "print('before')\n1 / 0")
        assert error.stdout == "before\n", error
        assert "ZeroDivisionError" in error.stderr and "division by zero" in error.stderr, error
        assert error.exit_code not in (None, 0)
        assert run(first, "print(x)").stdout == "42\n"  # the failed call kept the state

        # Input files (ADK passes base64 text) land in the workspace once; the code's own changes stay.
        data = File(name="data.csv", content=base64.b64encode(b"a,b\n1,2\n3,4\n").decode(), mime_type="text/csv")
        read = run(first, "import pandas as pd\ndf = pd.read_csv('data.csv')\nprint(int(df['b'].sum()))", [data])
        assert read.stdout == "6\n", read
        assert run(first, "open('data.csv', 'a').write('5,6\\n')", [data]).stderr == ""
        assert client.read_text(session_id, "data.csv") == "a,b\n1,2\n3,4\n5,6\n"

        # Files the code creates or changes, and its figures, are the result's output files.
        made = run(first, "open('report.txt', 'w').write('total=42')\n"
                          "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
                          "plt.plot([1, 2, 3])\nplt.show()")
        assert made.stderr == "", made
        files = {file.name: file for file in made.output_files}
        assert files["report.txt"].content == b"total=42" and files["report.txt"].mime_type == "text/plain"
        figure = files["figure_1.png"]
        assert figure.mime_type == "image/png" and isinstance(figure.content, bytes)
        assert figure.content.startswith(b"\x89PNG")
        assert "data.csv" not in files  # not changed by this call

        # A session the service dropped is replaced, and the model is told that the state is gone.
        client.delete_session(executor.session_id(second.session.id) or "")
        again = run(second, "print('hi')")
        assert again.exit_code == 0 and "expired" in again.stdout and again.stdout.endswith("hi\n"), again
        assert executor.session_id(second.session.id) not in (None, session_id)

        # A run over timeout_seconds is stopped by the sandbox and reported as a failure; the kernel is put
        # back as it was, so the session stays usable.
        quick = WasmRunnerCodeExecutor(client, timeout_seconds=2)
        fifth = await context()
        assert quick.execute_code(fifth, CodeExecutionInput(code="z = 5")).exit_code == 0
        hung = quick.execute_code(fifth, CodeExecutionInput(code="while True:\n    pass"))
        assert hung.exit_code not in (None, 0) and "timeout limit" in hung.stderr, hung
        assert quick.execute_code(fifth, CodeExecutionInput(code="print(z)")).stdout == "5\n"
        quick.close()

        # Bounded: a file over max_output_file_bytes, past max_output_files, or named as ADK's user-scoped
        # artifacts ("user:...", saved across the user's sessions) is named in stdout, not returned.
        bounded = WasmRunnerCodeExecutor(client, max_output_file_bytes=100, max_output_files=3)
        fourth = await context()
        many = bounded.execute_code(fourth, CodeExecutionInput(code=(
            "import os\nos.makedirs('out', exist_ok=True)\nopen('out/big.bin', 'wb').write(bytes(1000))\n"
            "open('user:notes.txt', 'w').write('x')\n"
            "for i in range(5):\n    open(f'out/small{i}.txt', 'w').write(str(i))")))
        assert many.exit_code == 0, many
        returned = {file.name: file.content for file in many.output_files}
        assert "out/big.bin" not in returned and "out/big.bin, 1000 bytes" in many.stdout, many
        assert "user:notes.txt" not in returned and "user:notes.txt" in many.stdout, many
        assert len(returned) <= 3 and "more changed files" in many.stdout, many
        assert all(returned[name] == name[-5].encode() for name in returned), returned
        bounded.close()

        # Not stateful: a fresh kernel per call, the workspace stays.
        stateless = WasmRunnerCodeExecutor(client, stateful=False)
        third = await context()
        assert stateless.execute_code(third, CodeExecutionInput(code="y = 1\nopen('y.txt', 'w').write('1')")).exit_code == 0
        gone = stateless.execute_code(third, CodeExecutionInput(code="print(open('y.txt').read())\nprint(y)"))
        assert gone.stdout == "1\n" and "NameError" in gone.stderr, gone
        stateless.close()

        # close() deletes the sessions the executor made.
        made_sessions = [executor.session_id(first.session.id), executor.session_id(second.session.id)]
        executor.close()
        for made_session in made_sessions:
            assert made_session is not None
            try:
                client.get_session(made_session)
            except NotFoundError:
                continue
            raise AssertionError(f"session {made_session} still there")


async def agent_scenario(url: str) -> None:
    with Client(url) as client:
        executor = WasmRunnerCodeExecutor(client, timeout_seconds=30)
        model = ScriptedModel(replies=[
            python("rows = [3, 4, 5]\nprint(sum(rows))"),
            python("total = sum(rows) * 2\nopen('total.txt', 'w').write(str(total))\nprint('total', total)"),
            python("print(rows[10])"),
            "The total is 24.",
            python("print(open('total.txt').read(), total + 1)"),
            "Still 24.",
        ])
        agent = LlmAgent(name="analyst", model=model, code_executor=executor,
                         instruction="Answer with Python code blocks.")
        runner = InMemoryRunner(agent=agent, app_name="adk")
        session = await runner.session_service.create_session(app_name="adk", user_id="u")

        async def turn(text: str) -> list[Event]:
            message = types.Content(role="user", parts=[types.Part(text=text)])
            return [event async for event in runner.run_async(user_id="u", session_id=session.id,
                                                              new_message=message)]

        events = await turn("Sum the rows, double it, then look past the end.")
        outcomes = results(events)
        assert [result.outcome for result in outcomes] == [types.Outcome.OUTCOME_OK, types.Outcome.OUTCOME_OK,
                                                           types.Outcome.OUTCOME_FAILED], outcomes
        assert "12" in (outcomes[0].output or "")
        assert "total 24" in (outcomes[1].output or "") and "total.txt" in (outcomes[1].output or "")
        assert "IndexError" in (outcomes[2].output or ""), outcomes[2]
        # The model was shown each result in ADK's own delimiters, the error included.
        shown = request_text(model.requests[3])
        assert "```tool_output\nCode execution result:\n12" in shown, shown
        assert "IndexError: list index out of range" in shown, shown
        assert events[-1].is_final_response() and events[-1].content.parts[0].text == "The total is 24."

        # The file the code wrote is an artifact of the ADK session.
        keys = await runner.artifact_service.list_artifact_keys(app_name="adk", user_id="u", session_id=session.id)
        assert keys == ["total.txt"], keys
        artifact = await runner.artifact_service.load_artifact(app_name="adk", user_id="u", session_id=session.id,
                                                               filename="total.txt")
        assert artifact is not None and artifact.inline_data is not None and artifact.inline_data.data == b"24"

        # A later turn of the same ADK session: the same kernel (variables) and workspace (files).
        events = await turn("And again?")
        later = results(events)
        assert len(later) == 1 and later[0].outcome == types.Outcome.OUTCOME_OK, later
        assert "24 25" in (later[0].output or ""), later
        session_id = executor.session_id(session.id)
        assert session_id is not None and client.read_text(session_id, "total.txt") == "24"
        assert not model.replies
        executor.close()
        await runner.close()


SCENARIOS: dict[str, Callable[[str], Any]] = {"executor": executor_scenario, "agent": agent_scenario}

if __name__ == "__main__":
    asyncio.run(SCENARIOS[sys.argv[1]](sys.argv[2]))
    print(f"{sys.argv[1]}: ok")
