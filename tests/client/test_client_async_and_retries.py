"""AsyncClient, and retries of 429 answers (honouring Retry-After), against a real server on 127.0.0.1."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from wasm_runner_client import AsyncClient, Client, ExecResult, NotFoundError, RateLimitedError, Retry, TransportError

SLOW = "import time\ntime.sleep(1.6)\n'slow done'"
"""Holds the only execution slot of a server with concurrency 1 and no queue."""


class Recorder(httpx.HTTPTransport):
    """The default transport, noting (status, Retry-After, time) of every answer."""

    def __init__(self) -> None:
        super().__init__()
        self.answers: list[tuple[int, str | None, float]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        self.answers.append((response.status_code, response.headers.get("Retry-After"), time.monotonic()))
        return response


class AsyncRecorder(httpx.AsyncHTTPTransport):
    def __init__(self) -> None:
        super().__init__()
        self.statuses: list[int] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        self.statuses.append(response.status_code)
        return response


def hold_the_slot(url: str, session_id: str, started: threading.Event) -> threading.Thread:
    def run() -> None:
        with Client(url) as client:
            started.set()
            client.exec(session_id, SLOW)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def wait_until_busy(client: Client, session_id: str) -> None:
    """Until the slow execution holds the slot (its session reports active)."""
    deadline = time.monotonic() + 10
    while client.get_session(session_id).state != "active":
        assert time.monotonic() < deadline, "the slow execution never started"
        time.sleep(0.02)


@pytest.fixture
def busy_server(start_server):
    return start_server(server={"concurrency": 1, "queue_size": 0})


def test_a_429_is_retried_after_retry_after_and_then_succeeds(busy_server) -> None:
    recorder = Recorder()
    with Client(busy_server.url) as plain, Client(busy_server.url, transport=recorder,
                                                  retry=Retry(attempts=5)) as client:
        holder, other = plain.create_session().id, plain.create_session().id
        plain.exec(holder, "1")  # the runtime is loaded before timing anything
        started = threading.Event()
        thread = hold_the_slot(busy_server.url, holder, started)
        started.wait(5)
        wait_until_busy(plain, holder)
        result = client.exec(other, "6 * 7")
        thread.join(10)
    assert isinstance(result, ExecResult) and result.value == "42"
    statuses = [status for status, _, _ in recorder.answers]
    assert statuses[0] == 429 and statuses[-1] == 200 and set(statuses) == {429, 200}
    for (status, retry_after, at), (_, _, next_at) in zip(recorder.answers, recorder.answers[1:], strict=False):
        assert status == 429 and retry_after is not None
        assert next_at - at >= float(retry_after) - 0.05  # waited as long as the server asked


def test_a_streamed_execution_is_retried_too(busy_server) -> None:
    recorder = Recorder()
    with Client(busy_server.url) as plain, Client(busy_server.url, transport=recorder,
                                                  retry=Retry(attempts=5)) as client:
        holder, other = plain.create_session().id, plain.create_session().id
        plain.exec(holder, "1")
        started = threading.Event()
        thread = hold_the_slot(busy_server.url, holder, started)
        started.wait(5)
        wait_until_busy(plain, holder)
        with client.exec_stream(other, "print('streamed')") as stream:
            chunks = [c.text for c in stream]
        thread.join(10)
    assert chunks == ["streamed\n"] and stream.result.exit_code == 0
    assert recorder.answers[0][0] == 429 and recorder.answers[-1][0] == 200


def test_without_retries_a_429_raises_rate_limited_with_code_hint_and_retry_after(busy_server) -> None:
    with Client(busy_server.url) as plain, Client(busy_server.url, retry=Retry(attempts=0)) as client:
        holder, other = plain.create_session().id, plain.create_session().id
        plain.exec(holder, "1")
        started = threading.Event()
        thread = hold_the_slot(busy_server.url, holder, started)
        started.wait(5)
        wait_until_busy(plain, holder)
        with pytest.raises(RateLimitedError) as caught:
            client.exec(other, "1")
        thread.join(10)
    error = caught.value
    assert error.status == 429 and error.code == "overloaded"
    assert error.hint and "Retry-After" in error.hint
    assert error.retry_after is not None and error.retry_after >= 1


def test_retry_after_longer_than_allowed_is_not_waited_for() -> None:
    policy = Retry(attempts=3, max_retry_after_s=5)
    assert policy.delay(0, 429, {"retry-after": "30"}) is None
    assert 2 <= policy.delay(0, 503, {"retry-after": "2"}) <= 2.25
    assert policy.delay(3, 429, {}) is None  # out of attempts
    assert policy.delay(0, 500, {}) is None  # only 429 and 503
    assert 0.25 <= policy.delay(1, 429, {}) <= 1.0  # exponential backoff with jitter


async def test_async_client_runs_streams_and_handles_files(server) -> None:
    recorder = AsyncRecorder()
    async with AsyncClient(server.url, transport=recorder, api_key="k") as client:
        session = await client.create_session()
        assert (await client.exec(session.id, "y = 2 ** 10\ny")).value == "1024"
        chunks = []
        async with client.exec_stream(session.id, "for i in range(3):\n    print(i, flush=True)\ny") as stream:
            async for chunk in stream:
                chunks.append(chunk)
        assert "".join(c.text for c in chunks) == "0\n1\n2\n" and {c.stream for c in chunks} == {"stdout"}
        assert stream.result.value == "1024"

        await client.write_file(session.id, "dir/t.txt", "hello")
        await client.upload(session.id, {"u.bin": b"\x01\x02"})
        assert await client.read_file(session.id, "u.bin") == b"\x01\x02"
        assert (await client.edit_file(session.id, "dir/t.txt", "hello", "bye")).size == 3
        assert [m.path for m in (await client.glob(session.id, "**/*.txt")).matches] == ["dir/t.txt"]
        assert (await client.grep(session.id, "bye")).matches[0].path == "dir/t.txt"
        assert {e.path for e in (await client.list_files(session.id)).entries} == {"dir", "u.bin"}
        one_shot = await client.run("print(len(open('a').read()))", files={"a": "xyz"})
        assert one_shot.stdout == "3\n"
        sessions = [s.id async for s in client.iter_sessions(page_size=1)]
        assert sessions == [session.id]
        await client.delete_session(session.id)
        with pytest.raises(NotFoundError):
            await client.exec(session.id, "1")
    assert 404 in recorder.statuses and 429 not in recorder.statuses


async def test_async_client_reports_an_unreachable_server() -> None:
    async with AsyncClient("http://127.0.0.1:9", timeout=2) as client:
        with pytest.raises(TransportError):
            await client.health()
