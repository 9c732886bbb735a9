"""The fair queue's order: least recently served share first, then caller, then arrival (no runtime needed)."""

from __future__ import annotations

from wasm_runner_server.sessions.fair_queue import FairQueue


def drain(queue: FairQueue[str]) -> list[str]:
    order = []
    while (next_up := queue.pop()) is not None:
        order.append(next_up[2])
    return order


def test_a_share_that_started_without_waiting_is_behind_one_that_has_not_run():
    queue: FairQueue[str] = FairQueue()
    queue.served("alpha", "")  # alpha runs a call that found a slot free
    for number in range(3):
        queue.push("alpha", "", f"alpha-{number}")
    queue.push("beta", "s1", "beta-0")
    assert len(queue) == 4 and queue.count("alpha") == 3 and queue.shares() == 2
    assert drain(queue) == ["beta-0", "alpha-0", "alpha-1", "alpha-2"]
    assert len(queue) == 0 and queue.shares() == 0


def test_callers_of_one_share_take_turns_and_keep_their_own_order():
    queue: FairQueue[str] = FairQueue()
    for item in ("a-1", "a-2", "a-3"):
        queue.push("ws", "a", item)
    queue.push("ws", "b", "b-1")
    queue.push("ws", "b", "b-2")
    assert drain(queue) == ["a-1", "b-1", "a-2", "b-2", "a-3"]


def test_a_removed_item_is_never_served_and_leaves_no_empty_share():
    queue: FairQueue[str] = FairQueue()
    gone, kept = "gone", "kept"
    queue.push("alpha", "", gone)
    queue.push("beta", "", kept)
    assert queue.remove("alpha", "", gone) is True
    assert queue.remove("alpha", "", gone) is False
    assert queue.count("alpha") == 0 and queue.shares() == 1
    assert drain(queue) == ["kept"]
