"""Roofline data: each measured kernel as a point under its target's roofs, with bound and fraction."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from uol_core.hfl import load_target
from uol_core.hfl.roofline import roofline
from uol_core.hfl.schema import Target


@dataclass(frozen=True)
class RoofCurve:
    """The two roofs of one target and dtype: peak GFLOP/s and DRAM GB/s, meeting at the ridge."""

    target: str
    dtype: str
    peak_gflops: float
    bandwidth_gbps: float

    @property
    def ridge(self) -> float:
        """Intensity (FLOP/byte) where the memory roof meets the compute roof."""
        return self.peak_gflops / self.bandwidth_gbps

    def attainable(self, intensity: float) -> float:
        """GFLOP/s the roofline allows at `intensity`."""
        return min(self.peak_gflops, intensity * self.bandwidth_gbps)

    def to_dict(self) -> dict:
        """JSON-ready, with the ridge."""
        return {**asdict(self), "ridge": self.ridge}


@dataclass(frozen=True)
class RooflinePoint:
    """One measured run on one target's roofline."""

    label: str
    target: str
    dtype: str
    intensity: float  # FLOP per byte of compulsory traffic
    achieved_gflops: float
    attainable_gflops: float
    bound: str  # "memory" or "compute"
    fraction: float  # of the roofline's minimum time that the run achieved (1.0 = on the roof)
    seconds: float

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return asdict(self)


def resolve(target: Target | str) -> Target:
    """A Target from a name or a Target."""
    if isinstance(target, str):
        return load_target(target)
    return target


def roof_curve(target: Target | str, dtype: str = "fp32") -> RoofCurve:
    """The roofs of `target` for `dtype`."""
    t = resolve(target)
    r = roofline(1.0, 1.0, t, dtype)
    return RoofCurve(t.name, dtype, r.peak_gflops, r.bandwidth_gbps)


def point(label: str, flops: float, nbytes: float, seconds: float, target: Target | str,
          dtype: str = "fp32") -> RooflinePoint:
    """Place one measured kernel (its FLOPs, bytes and median seconds) on a target's roofline."""
    t = resolve(target)
    r = roofline(flops, nbytes, t, dtype, seconds)
    return RooflinePoint(label, t.name, dtype, r.intensity, r.achieved_gflops or 0.0,
                         r.attainable_gflops, r.bound, r.fraction_of_roofline or 0.0, seconds)
