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

Where the previous contender is another runtime (ONNX Runtime, OpenVINO), the hand-over lasts
longer on some hosts: on a 2-vCPU AMD Zen 3 guest our MobileNetV2 call took 20-26 ms for the
first 90 ms after an ONNX Runtime call and 11-12 ms from then on, and after OpenVINO 13-18 ms
for 150 ms (a call every 11-18 ms, logged from the moment the peer returned). With 50 ms of
lead-in, a call of ours right after ONNX Runtime's turn took 14.8 ms where the same compiled
graph, in the same round, after our own turn took 7.5-7.8 ms. So turns among the deployment
runtimes take `PEER_LEAD_IN_S`.

    from uol_core.runtime.turns import timed_turn
    seconds = timed_turn(call)
"""

from __future__ import annotations

import time
from collections.abc import Callable

LEAD_IN_S = 0.05  # longer than ONNX Runtime's spin after a call (20-40 ms, measured above)
PEER_LEAD_IN_S = 0.25  # longer than the 90-150 ms a peer runtime's hand-over lasted (above)


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
