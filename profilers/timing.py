"""Kernel timing for every backend: the runtime harness on CPU, CUDA events on a GPU, one schema."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from uol_core.runtime.measure import Timing, summarize, time_call

# A run whose IQR exceeds this fraction of the median is flagged as noisy.
NOISY_SPREAD = 0.10


@dataclass
class KernelTiming:
    """The timing record every profiler, report and comparison reads (seconds per call)."""

    label: str
    backend: str  # "c", "triton", "torch", ...
    device: str  # "cpu" or "cuda:0"
    method: str  # "perf_counter" or "cuda_events"
    median_s: float
    iqr_s: float
    q1_s: float
    q3_s: float
    min_s: float
    repeats: int
    outliers: int
    noisy: bool
    cache_flush: bool = False
    flops: float | None = None
    bytes: float | None = None
    samples: list[float] = field(default_factory=list)

    @property
    def gflops(self) -> float | None:
        """Achieved GFLOP/s at the median time."""
        return self.flops / self.median_s / 1e9 if self.flops and self.median_s > 0 else None

    @property
    def gbps(self) -> float | None:
        """Achieved GB/s of compulsory traffic at the median time."""
        return self.bytes / self.median_s / 1e9 if self.bytes and self.median_s > 0 else None

    def to_dict(self) -> dict:
        """JSON-ready, with the derived rates."""
        data = asdict(self)
        data.update(gflops=self.gflops, gbps=self.gbps)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> KernelTiming:
        """Inverse of `to_dict` (derived fields ignored)."""
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in names})


def from_timing(t: Timing, label: str, backend: str = "c", device: str = "cpu",
                method: str = "perf_counter", cache_flush: bool = False,
                flops: float | None = None, nbytes: float | None = None) -> KernelTiming:
    """The common record from the runtime harness's Timing."""
    return KernelTiming(label, backend, device, method, t.median_s, t.iqr_s, t.q1_s, t.q3_s,
                        t.min_s, t.repeats, t.outliers, t.spread > NOISY_SPREAD or t.outliers > 0,
                        cache_flush, flops, nbytes, list(t.samples))


def time_kernel(fn: Callable[[], object], label: str, backend: str = "c", *, warmup: int = 2,
                repeats: int = 7, flush_bytes: int = 0, device: str | None = None,
                flops: float | None = None, nbytes: float | None = None,
                min_seconds: float = 0.0) -> KernelTiming:
    """Time `fn` on its device: CUDA events when `device` is cuda, else the runtime harness."""
    if device is None:
        device = "cpu"
    if device.startswith("cuda"):
        samples = _cuda_samples(fn, warmup, repeats, flush_bytes)
        return from_timing(summarize(samples), label, backend, device, "cuda_events",
                           bool(flush_bytes), flops, nbytes)
    t = time_call(fn, warmup=warmup, repeats=repeats, flush_bytes=flush_bytes,
                  min_seconds=min_seconds)
    return from_timing(t, label, backend, device, "perf_counter", bool(flush_bytes), flops, nbytes)


def _cuda_samples(fn: Callable[[], object], warmup: int, repeats: int,
                  flush_bytes: int) -> list[float]:
    """Per-call seconds from CUDA events (device time, not host launch time)."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' requested but torch sees no GPU")
    flush = torch.empty(flush_bytes // 4, device="cuda") if flush_bytes else None
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    pairs = []
    for _ in range(repeats):
        if flush is not None:
            flush.zero_()  # evicts L2 so each call starts cold
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        pairs.append((start, end))
    torch.cuda.synchronize()
    return [s.elapsed_time(e) / 1e3 for s, e in pairs]


def speedup(base: KernelTiming, new: KernelTiming) -> float:
    """How many times faster `new` is than `base` (median over median)."""
    return base.median_s / new.median_s if new.median_s > 0 else float("inf")


def median_of(samples: list[float]) -> float:
    """Median of samples (0 for none)."""
    return statistics.median(samples) if samples else 0.0
