"""The output ring: bounded, read by offset, oldest bytes dropped and counted."""

from __future__ import annotations

import threading

from wasm_runner.processes.ring import OutputRing, utf8_prefix


def test_reads_resume_from_an_offset_without_loss_or_repeat() -> None:
    ring = OutputRing(100)
    ring.write(b"hello ")
    first = ring.read(0)
    ring.write(b"world")
    second = ring.read(first.next_offset)
    assert (first.data, second.data) == (b"hello ", b"world")
    assert second.offset == 6 and second.next_offset == 11 and second.dropped == 0


def test_the_oldest_bytes_are_dropped_past_the_capacity_and_counted() -> None:
    ring = OutputRing(10)
    ring.write(b"0123456789")
    ring.write(b"abcde")
    chunk = ring.read(0)
    assert chunk.data == b"56789abcde"
    assert chunk.offset == 5 and chunk.dropped == 5 and ring.dropped == 5 and ring.end == 15
    ring.write(b"X" * 25)  # one write larger than the ring
    assert ring.read(0).data == b"X" * 10 and ring.dropped == 30


def test_a_reader_waiting_is_woken_by_a_write_and_by_close() -> None:
    ring = OutputRing(10)
    assert ring.wait(0, 0.01) is False
    threading.Timer(0.05, ring.write, args=(b"x",)).start()
    assert ring.wait(0, 5) is True
    threading.Timer(0.05, ring.close).start()
    assert ring.wait(1, 5) is True and ring.closed


def test_subscribers_are_told_of_each_write_until_they_unsubscribe() -> None:
    ring = OutputRing(10)
    seen: list[int] = []
    unsubscribe = ring.subscribe(lambda: seen.append(ring.end))
    ring.write(b"ab")
    unsubscribe()
    ring.write(b"cd")
    assert seen == [2]


def test_an_incomplete_utf8_sequence_at_the_end_waits_for_its_rest() -> None:
    euro = "€".encode()
    assert utf8_prefix(b"ab" + euro[:2], final=False) == b"ab"
    assert utf8_prefix(b"ab" + euro, final=False) == b"ab" + euro
    assert utf8_prefix(b"ab" + euro[:2], final=True) == b"ab" + euro[:2]
