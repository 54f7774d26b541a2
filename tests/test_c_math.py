"""The C backend's scalar math against torch in double precision, over the whole float range."""

from __future__ import annotations

import math

import pytest
import torch

from uol_core import compile as uol_compile
from uol_core.odl import parse

# erf within a few units in the last place (its rational fit is at 3.7e-7). GELU as
# 0.5 x (1 + erf(x / sqrt 2)) in float32 loses its relative accuracy on the negative tail, where
# 1 + erf cancels: torch's own float32 gelu is 1.2e-6 off there; we allow 2e-6.
REL_TOL = 4e-7
GELU_ABS_TOL = 2e-6


def _grid() -> torch.Tensor:
    dense = torch.linspace(-9.0, 9.0, 1_000_001, dtype=torch.float64)
    tiny = torch.logspace(-37, -1, 400, dtype=torch.float64)
    return torch.cat([dense, tiny, -tiny]).float()


def _run(fn: str, x: torch.Tensor) -> torch.Tensor:
    op = parse(f"op f(X: f32[N]) -> Y: f32[N]:\n    Y[i] = {fn}(X[i])\n")
    return uol_compile(op, shapes={"X": tuple(x.shape)}, backend="c")(X=x)


@pytest.mark.parametrize("fn, exact, abs_tol", [
    ("erf", torch.erf, 0.0),
    ("gelu", torch.nn.functional.gelu, GELU_ABS_TOL),
])
def test_erf_and_gelu_stay_within_their_tolerance_everywhere(fn, exact, abs_tol) -> None:
    x = _grid()
    got = _run(fn, x).double()
    want = exact(x.double())
    excess = (got - want).abs() - (REL_TOL * want.abs() + abs_tol)
    worst = int(excess.argmax())
    assert excess.max() <= 0, f"{fn}({x[worst].item()!r}): {got[worst].item()!r} against " \
                              f"{want[worst].item()!r}"


def test_erf_saturates_and_passes_nan_through() -> None:
    x = torch.tensor([math.inf, -math.inf, 1e30, -1e30, math.nan, 0.0, -0.0])
    got = _run("erf", x)
    assert got[:4].tolist() == [1.0, -1.0, 1.0, -1.0]
    assert math.isnan(got[4].item())
    assert got[5].item() == 0.0 and math.copysign(1.0, got[6].item()) == -1.0
