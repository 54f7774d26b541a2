"""Compare a kernel's outputs with the reference evaluator, with a tolerance by dtype and depth."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

# Unit roundoff per dtype; a sum of n terms may drift by about sqrt(n) of them (random signs).
EPS = {torch.float32: 2.0 ** -24, torch.float64: 2.0 ** -53, torch.float16: 2.0 ** -11,
       torch.bfloat16: 2.0 ** -8}


@dataclass(frozen=True)
class Verdict:
    """Outcome of a comparison: ok, worst errors, and the tolerance that was applied."""

    ok: bool
    max_abs_err: float
    max_rel_err: float
    atol: float
    rtol: float
    where: str = ""  # the output and element of the worst error

    def to_dict(self) -> dict:
        return asdict(self)


def tolerance(dtype: torch.dtype, reduction_length: int) -> tuple[float, float]:
    """(atol, rtol) for outputs of `dtype` that sum `reduction_length` products."""
    eps = EPS.get(dtype, 2.0 ** -24)
    grow = 64 * eps * max(1.0, math.sqrt(max(reduction_length, 1)))
    return grow, grow


def compare(outputs: dict[str, torch.Tensor], reference: dict[str, torch.Tensor],
            reduction_length: int) -> Verdict:
    """Elementwise |out - ref| <= atol * scale + rtol * |ref| over every output; scale = max |ref|."""
    worst = Verdict(True, 0.0, 0.0, 0.0, 0.0)
    for name, ref in reference.items():
        out = outputs[name].to(ref.dtype)
        atol, rtol = tolerance(ref.dtype, reduction_length)
        scale = max(1.0, float(ref.abs().max())) if ref.numel() else 1.0
        diff = (out - ref).abs()
        if not torch.isfinite(out).all() and torch.isfinite(ref).all():
            return Verdict(False, math.inf, math.inf, atol, rtol, f"{name}: non-finite output")
        bad = diff > atol * scale + rtol * ref.abs()
        max_abs = float(diff.max()) if diff.numel() else 0.0
        # relative to |ref|, floored at the absolute tolerance's size: against a value near
        # zero (a GELU of a large negative input) a quotient by |ref| reads as 1e+23
        tiny = torch.finfo(ref.dtype).tiny if ref.dtype.is_floating_point else 1.0
        floor = max(atol * scale, tiny)
        max_rel = float((diff / ref.abs().clamp_min(floor)).max()) if diff.numel() else 0.0
        ok = not bool(bad.any())
        where = ""
        if diff.numel():
            idx = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape))
            where = f"{name}{list(idx)}"
        if not ok or max_abs > worst.max_abs_err:
            worst = Verdict(ok and worst.ok, max_abs, max(max_rel, worst.max_rel_err), atol, rtol,
                            where)
        if not ok:
            return worst
    return worst
