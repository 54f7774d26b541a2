"""Roofline model (Williams, Waterman, Patterson, CACM 2009): attainable FLOP/s of an operator."""

from __future__ import annotations

from dataclasses import dataclass

from uol_core.hfl.schema import HflError, Target


@dataclass(frozen=True)
class Roofline:
    """Where one operator sits under a target's roofline (GFLOP/s, GB/s, FLOP/byte)."""

    target: str
    dtype: str
    flops: float
    bytes_moved: float
    peak_gflops: float
    bandwidth_gbps: float
    intensity: float          # FLOP per byte of DRAM traffic
    ridge_intensity: float    # intensity at which memory and compute roofs meet
    attainable_gflops: float  # min(peak, intensity x bandwidth)
    bound: str                # "compute" or "memory"
    min_seconds: float        # time at the attainable rate
    achieved_gflops: float | None = None
    fraction_of_roofline: float | None = None

    def to_dict(self) -> dict:
        """JSON-ready fields."""
        return dict(self.__dict__)


def peak_key(target: Target, dtype: str) -> str:
    """`dtype` when the target records its peak, else "fp32": a host without bf16 units runs a
    bf16 GEMM widened to f32, at its f32 vector rate."""
    return dtype if dtype in target.peak_gflops else "fp32"


def roofline(flops: float, bytes_moved: float, target: Target, dtype: str = "fp32",
             seconds: float | None = None) -> Roofline:
    """Attainable GFLOP/s, bound and ridge point; with `seconds`, the fraction achieved."""
    if flops < 0 or bytes_moved < 0:
        raise ValueError(f"flops and bytes must be >= 0, got {flops} and {bytes_moved}")
    peak = target.peak_gflops.get(dtype)
    if peak is None:
        raise HflError(target.source_file or target.name, f"peak_gflops.{dtype}",
                       f"target {target.name} has no {dtype} peak; it has "
                       f"{', '.join(target.peak_gflops)}")
    bandwidth = target.mem_bandwidth_gbps
    if not bandwidth:
        raise HflError(target.source_file or target.name, "mem_bandwidth_gbps", "missing")
    ridge = peak / bandwidth  # GFLOP/s over GB/s = FLOP/byte
    intensity = flops / bytes_moved if bytes_moved else float("inf")
    attainable = min(peak, intensity * bandwidth)
    bound = "compute" if intensity >= ridge else "memory"
    # the slower roof sets the time; written as a max so flops=0 or bytes=0 still works
    min_seconds = max(flops / (peak * 1e9), bytes_moved / (bandwidth * 1e9))
    achieved = fraction = None
    if seconds is not None:
        if seconds <= 0:
            raise ValueError(f"measured time must be > 0 seconds, got {seconds}")
        achieved = flops / seconds / 1e9
        # time-based, so a zero-FLOP copy still gets a meaningful fraction
        fraction = min_seconds / seconds
    return Roofline(target=target.name, dtype=dtype, flops=flops, bytes_moved=bytes_moved,
                    peak_gflops=peak, bandwidth_gbps=bandwidth, intensity=intensity,
                    ridge_intensity=ridge, attainable_gflops=attainable, bound=bound,
                    min_seconds=min_seconds, achieved_gflops=achieved,
                    fraction_of_roofline=fraction)


def fork_join_seconds(target: Target, threads: int) -> float:
    """One fork and join of the target's cores when work is split over `threads` > 1, else 0
    (HFL fork_join_cycles at its clock; a target without a clock counts 1 cycle per ns, as the
    cost models' other cycle counts do)."""
    if threads <= 1:
        return 0.0
    return float(target.fork_join_cycles or 0) / ((target.clock_ghz or 1.0) * 1e9)
