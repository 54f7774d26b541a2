"""Wait until this process's other threads have gone idle, before a timed call.

Runtimes keep their worker threads spinning for a while after a call, so that the next call
finds them awake: ONNX Runtime's intra-op pool (allow_spinning, on by default), OpenMP's wait
policy (torch's and ours), TBB's arena (OpenVINO). In one process that alternates contenders
call by call, that spin runs on the cores the next contender needs and is charged to it, though
a deployment holds one runtime per process and never pays it: measured on MobileNetV2 and
EfficientNet-B0 at batch 1 (2 cores), our compiled graph took 2.1x longer when called right
after ONNX Runtime than 50 ms later, while idle after ONNX Runtime the process burned 50 ms of
CPU in the first half second. So every alternated timing starts from a settled process.

    from uol_core.runtime.settle import settle
    settle()          # returns the seconds it waited (at most `limit_s`)
"""

from __future__ import annotations

import time

WINDOW_S = 0.002  # a spinning pool shows within a few scheduler ticks
IDLE_SHARE = 0.1  # CPU of other threads per wall second below which the process is idle
LIMIT_S = 0.25  # a pool that never sleeps (or other work of this process) stops the wait here


def settle(window_s: float = WINDOW_S, idle_share: float = IDLE_SHARE,
           limit_s: float = LIMIT_S) -> float:
    """Sleep in windows of `window_s` until one passes in which the process's threads used less
    than `idle_share` of a CPU, or `limit_s` has passed; the seconds waited."""
    start = time.perf_counter()
    while True:
        cpu, wall = time.process_time(), time.perf_counter()
        time.sleep(window_s)
        used = time.process_time() - cpu
        now = time.perf_counter()
        if used <= idle_share * (now - wall) or now - start >= limit_s:
            return now - start
