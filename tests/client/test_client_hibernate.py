"""`Client.hibernate` / `AsyncClient.hibernate`: POST /v1/sessions/{id}:hibernate saves and drops a
session's kernels at once; the next call restores them."""

from __future__ import annotations

import asyncio
import threading

import pytest

from wasm_runner_client import AsyncClient, Client, ConflictError, NotFoundError


def test_a_hibernated_session_drops_its_kernel_and_its_next_call_restores_it(server) -> None:
    with Client(server.url) as client:
        sid = client.create_session().id
        assert client.exec(sid, "x = 41").exit_code == 0
        assert client.get_session(sid).kernels == ["python"]
        info = client.hibernate(sid)
        assert (info.state, info.kernels) == ("hibernated", [])
        assert client.hibernate(sid).state == "hibernated"  # again: nothing more to save, still fine
        again = client.exec(sid, "print(x + 1)")
        assert again.stdout == "42\n", again.stderr  # the variable came back from the saved kernel
        with pytest.raises(NotFoundError) as missing:
            client.hibernate("no-such-session")
        assert missing.value.code == "session_not_found"


def test_a_session_running_a_call_is_not_hibernated(server) -> None:
    with Client(server.url) as client:
        sid = client.create_session().id
        started = threading.Event()

        def run() -> None:
            with client.exec_stream(sid, "print('on', flush=True)\nwhile True: pass",
                                    limits={"timeout_s": 60}) as stream:
                for _ in stream:  # read to the end: closing the stream early would stop the run
                    started.set()

        runner = threading.Thread(target=run, daemon=True)
        runner.start()
        assert started.wait(60)
        try:
            with pytest.raises(ConflictError) as busy:
                client.hibernate(sid)
            assert busy.value.code == "session_busy" and "cancel" in (busy.value.hint or "")
        finally:
            client.cancel(sid)
            runner.join(60)


def test_the_async_client_hibernates_too(server) -> None:
    async def main() -> tuple[str, str]:
        async with AsyncClient(server.url) as client:
            sid = (await client.create_session()).id
            await client.exec(sid, "name = 'kept'")
            info = await client.hibernate(sid)
            result = await client.exec(sid, "print(name)")
            return info.state, result.stdout

    assert asyncio.run(main()) == ("hibernated", "kept\n")
