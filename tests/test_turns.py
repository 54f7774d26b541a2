"""timed_turn: the hand-over from the previous contender lands on an untimed call."""

from __future__ import annotations

import time

from uol_core.graph.run import interleaved_times
from uol_core.runtime.turns import timed_turn


def test_the_first_call_of_a_turn_is_not_timed():
    calls = []

    def slow_once() -> None:  # the first call after a hand-over pays for it
        calls.append(time.perf_counter())
        time.sleep(0.2 if len(calls) == 1 else 0.001)

    assert timed_turn(slow_once) < 0.1 and len(calls) == 2


def test_alternated_rounds_time_each_turns_second_call():
    state = {"last": None}

    def contender(name: str, after_other_s: float):
        def call() -> None:
            time.sleep(after_other_s if state["last"] not in (None, name) else 0.001)
            state["last"] = name
        return call

    times = interleaved_times({"a": contender("a", 0.05), "b": contender("b", 0.05)}, 3)
    assert all(len(v) == 3 and max(v) < 0.03 for v in times.values())


def test_a_longer_lead_in_outlasts_a_longer_hand_over():
    """A peer runtime's hand-over can outlast LEAD_IN_S (runtime/turns.py): the turn's lead-in
    is the caller's to choose."""
    state = {"other_done": 0.0}

    def other() -> None:
        time.sleep(0.001)
        state["other_done"] = time.perf_counter()

    def slowed() -> None:  # slow for 0.15 s after the other contender's call
        time.sleep(0.04 if time.perf_counter() - state["other_done"] < 0.15 else 0.001)

    # 50 ms of lead-in: two slow calls (0.08 s), the timed one still inside the 0.15 s
    short = interleaved_times({"other": other, "slowed": slowed}, 2, lead_in_s=0.05)
    long = interleaved_times({"other": other, "slowed": slowed}, 2, lead_in_s=0.25)
    assert min(short["slowed"]) >= 0.035 and max(long["slowed"]) < 0.02
