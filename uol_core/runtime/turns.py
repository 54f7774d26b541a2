"""One contender's turn in an alternated timing: untimed lead-in calls, then the timed call.

Runtimes leave work running after a call returns: ONNX Runtime's intra-op pool spins on for
20-40 ms (allow_spinning, on by default), OpenMP's and TBB's workers wait in their own ways. In
one process that alternates contenders call by call, that lands on the next contender's call,
though a deployment holds one runtime per process and never pays it. Measured on MobileNetV2 at
batch 1 (2 cores, AMD Zen 4): our compiled graph took 6.6 ms back to back, 14.8 ms alternated
with ONNX Runtime call by call, and a call of ours 10 ms after ONNX Runtime's 39.7 ms, 40 ms
after it 6.9 ms. Waiting for the process's threads to go idle did not remove it (the slowdown
outlived their CPU use), nor did one untimed call (ours is shorter than the spin). So each turn
calls its contender, untimed, until `LEAD_IN_S` has passed (at least once), then times a call.

    from uol_core.runtime.turns import timed_turn
    seconds = timed_turn(call)
"""

from __future__ import annotations

import time
from collections.abc import Callable

LEAD_IN_S = 0.05  # longer than ONNX Runtime's spin after a call (20-40 ms, measured above)


def timed_turn(call: Callable[[], object], lead_in_s: float = LEAD_IN_S) -> float:
    """Seconds of one call of `call` made after it ran, untimed, for at least `lead_in_s`
    (at least once): the lead-in takes the hand-over from whatever ran before."""
    start = time.perf_counter()
    call()
    while time.perf_counter() - start < lead_in_s:
        call()
    begin = time.perf_counter()
    call()
    return time.perf_counter() - begin
