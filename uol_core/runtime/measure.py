"""The timing harness: warm-up, repeats, median, IQR, outlier flag, optional cache flush."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch


@dataclass(frozen=True)
class Timing:
    """Seconds per call over `repeats` runs: median, quartiles, spread, and every sample."""

    median_s: float
    q1_s: float
    q3_s: float
    min_s: float
    repeats: int
    outliers: int  # samples beyond 1.5 IQR above the third quartile
    samples: list[float] = field(default_factory=list)

    @property
    def iqr_s(self) -> float:
        return self.q3_s - self.q1_s

    @property
    def spread(self) -> float:
        """IQR relative to the median (0.02 = 2 %)."""
        return self.iqr_s / self.median_s if self.median_s > 0 else 0.0

    def to_dict(self) -> dict:
        out = asdict(self)
        out["iqr_s"], out["spread"] = self.iqr_s, self.spread
        return out


def time_call(fn: Callable[[], object], *, warmup: int = 2, repeats: int = 7,
              min_seconds: float = 0.0, flush_bytes: int = 0, max_seconds: float = 30.0) -> Timing:
    """Time `fn`: `warmup` untimed calls, then at least `repeats` timed ones (more until
    `min_seconds` of samples, never past `max_seconds`). `flush_bytes` > 0 writes a buffer of
    that size before each call so the caches start cold (size it from the target's L3)."""
    flush = torch.empty(flush_bytes // 4) if flush_bytes else None
    for _ in range(warmup):
        fn()
    samples: list[float] = []
    start = time.perf_counter()
    while True:
        if flush is not None:
            flush.fill_(1.0)
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
        spent = time.perf_counter() - start
        if len(samples) >= repeats and (spent >= min_seconds or spent >= max_seconds):
            break
        if spent >= max_seconds and len(samples) >= 1:
            break
    return summarize(samples)


def summarize(samples: list[float]) -> Timing:
    """Median, quartiles and outlier count of timing samples."""
    ordered = sorted(samples)
    if len(ordered) >= 4:
        q1, _, q3 = statistics.quantiles(ordered, n=4)
    else:
        q1, q3 = ordered[0], ordered[-1]
    outliers = sum(1 for s in ordered if s > q3 + 1.5 * (q3 - q1))
    return Timing(statistics.median(ordered), q1, q3, ordered[0], len(ordered), outliers, ordered)


def time_interleaved(fns: list[Callable[[], object]], *, seconds: float, rounds: int = 5,
                     batch_s: float = 0.002, warmup: int = 2) -> list[Timing]:
    """Seconds per call of each of `fns`, timed in turn, round after round, so that a change in
    the machine's speed (another process, a clock change) hits each alike: at least `rounds`
    rounds and `seconds` in all. A round times each function over a batch of calls lasting
    about `batch_s` (a single microsecond call is too short for the clock), and starts at a
    different function each time so none always runs right after another."""
    batches = []
    for fn in fns:
        for _ in range(warmup):
            fn()
        t0 = time.perf_counter()
        fn()
        one = time.perf_counter() - t0
        batches.append(max(1, min(1000, int(batch_s / max(one, 1e-9)))))
    samples: list[list[float]] = [[] for _ in fns]
    start, turn = time.perf_counter(), 0
    while turn < rounds or time.perf_counter() - start < seconds:
        for i in (turn % len(fns) + k for k in range(len(fns))):
            i %= len(fns)
            t0 = time.perf_counter()
            for _ in range(batches[i]):
                fns[i]()
            samples[i].append((time.perf_counter() - t0) / batches[i])
        turn += 1
    return [summarize(s) for s in samples]
