"""Guest output: held by the Python guest for the host to read after the call, kept in C
during a call (`_output_sink`), and the Python callback path without it."""

import ctypes

import pytest

from wasm_runner import Limits, Runner
from wasm_runner.lowlevel import output

_output_sink = pytest.importorskip("wasm_runner.lowlevel._output_sink")

_Write = ctypes.CFUNCTYPE(ctypes.c_ssize_t, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t)
_Release = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


@pytest.fixture
def sink():
    """A Sink, the C write function wasmtime would call, and what reached the forward callback."""
    forwarded: list[tuple[int, bytes]] = []

    @_Write
    def forward(key, data, size):
        forwarded.append((key, ctypes.string_at(data, size)))
        return size

    made = _output_sink.Sink(ctypes.cast(forward, ctypes.c_void_p).value, 7)
    state = made.lend()
    write = _Write(_output_sink.WRITE)
    yield made, lambda data: write(state, data, len(data)), forwarded
    _Release(_output_sink.RELEASE)(state)


def test_a_sink_needs_a_forward_callback():
    with pytest.raises(ValueError, match="forward"):
        _output_sink.Sink(0, 1)


def test_writes_within_the_limit_are_kept_until_taken(sink):
    made, write, forwarded = sink
    made.configure(10, False)
    assert write(b"abc") == 3 and write(b"def") == 3
    assert forwarded == [] and made.take() == b"abcdef" and made.take() == b""


def test_a_write_past_the_limit_forwards_what_was_kept_then_itself_in_order(sink):
    made, write, forwarded = sink
    made.configure(5, False)
    write(b"abc")
    assert write(b"defg") == 4
    assert forwarded == [(7, b"abc"), (7, b"defg")] and made.take() == b""


def test_forward_all_sends_each_write_at_once(sink):
    made, write, forwarded = sink
    made.configure(1 << 20, True)
    write(b"one")
    write(b"two")
    assert forwarded == [(7, b"one"), (7, b"two")] and made.take() == b""


@pytest.fixture(params=["sink", "python"])
def output_runner(request, runner, tmp_path, monkeypatch):
    """The session's runner, and one whose kernels were made without the compiled sink."""
    if request.param == "sink":
        yield runner
        return
    monkeypatch.setattr(output, "Sink", None)
    with Runner(tmp_path, isolation="in-process") as fallback:
        yield fallback


def test_every_line_arrives_in_order_on_each_stream(output_runner):
    code = "import sys\nfor i in range(3000):\n    print(i)\n    print(-i, file=sys.stderr)"
    result = output_runner.run_sync(code)
    assert result.stdout.splitlines() == [str(i) for i in range(3000)]
    assert result.stderr.splitlines() == [str(-i) for i in range(3000)]


def test_a_guest_stopped_at_its_deadline_keeps_what_it_printed(output_runner):
    result = output_runner.run_sync("print('before')\nwhile True: pass", limits=Limits(timeout_s=0.3))
    assert result.limit == "timeout" and result.stdout == "before\n"


def test_the_output_limit_still_stops_a_flood(output_runner):
    result = output_runner.run_sync("while True: print('x' * 999)", limits=Limits(output_bytes=50_000))
    assert result.limit == "output" and len(result.stdout) == 50_000
    assert output_runner.run_sync("print('next')").stdout == "next\n"


def test_output_held_by_the_guest_reaches_the_host_complete_and_in_order(runner):
    probe = "import sys\nprint('x')\nsys.stdout.flush()\nprint(sys.modules['app']._held_fill[0], file=sys.stderr)"
    assert runner.run_sync(probe).stderr == "2\n"  # the two bytes of "x\n" were held, not written
    lines = [f"{i:07d}" for i in range(30_000)]  # 240 kB: the 64 KiB buffer fills and is sent several times
    result = runner.run_sync("for i in range(30_000):\n    print(f'{i:07d}')")
    assert result.stdout.splitlines() == lines and result.limit is None


def test_a_write_larger_than_the_buffer_goes_through_and_holding_goes_on(runner):
    code = ("import sys\nprint('a')\nprint('b' * 100_000)\nprint('c')\nsys.stdout.flush()\n"
            "print(sys.modules['app']._held_fill[0], file=sys.stderr)")
    result = runner.run_sync(code)
    assert result.stdout == "a\n" + "b" * 100_000 + "\nc\n"
    assert int(result.stderr) > 0  # what came after the large write was held again


def test_a_direct_write_comes_after_what_was_printed_before_it(runner):
    result = runner.run_sync("import os\nprint('a')\nos.write(1, b'b\\n')\nprint('c')")
    assert result.stdout == "a\nb\nc\n"


def test_a_run_that_streams_its_output_is_not_held(runner):
    chunks = []
    result = runner.run_sync("import sys\nprint('x')\nsys.stdout.flush()\nprint(sys.modules['app']._held_fill[0])",
                             listener=lambda stream, data: chunks.append(data))
    assert result.stdout == "x\n0\n" and b"".join(chunks) == b"x\n0\n"


async def test_a_session_kernel_holds_its_output_too(runner):
    session = runner.session()
    probe = "import sys\nprint('x')\nsys.stdout.flush()\nprint(sys.modules['app']._held_fill[0], file=sys.stderr)"
    for _ in range(2):
        result = await session.run(probe)
        assert (result.stdout, result.stderr) == ("x\n", "2\n")
    stopped = await session.run("print('before')\nwhile True: pass", limits=Limits(timeout_s=0.3))
    assert stopped.limit == "timeout" and stopped.stdout == "before\n"
