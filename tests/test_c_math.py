"""The C backend's scalar math against torch in double precision, over the whole float range."""

from __future__ import annotations

import math
import re
import shutil
import subprocess

import pytest
import torch

from uol_core import compile as uol_compile
from uol_core.odl import parse
from uol_core.runtime.build import BASE_FLAGS

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
    ("gelu_tanh", lambda x: torch.nn.functional.gelu(x, approximate="tanh"), GELU_ABS_TOL),
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


SPECIALS = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -2.5, 3e38]


@pytest.mark.parametrize("fn, exact", [("max", torch.maximum), ("min", torch.minimum)])
def test_max_and_min_pass_a_nan_from_either_side(fn, exact) -> None:
    a, b = (t.reshape(-1).contiguous() for t in torch.meshgrid(torch.tensor(SPECIALS),
                                                              torch.tensor(SPECIALS), indexing="ij"))
    op = parse(f"op f(A: f32[N], B: f32[N]) -> Y: f32[N]:\n    Y[i] = {fn}(A[i], B[i])\n")
    got = uol_compile(op, shapes={"A": tuple(a.shape), "B": tuple(b.shape)}, backend="c")(A=a, B=b)
    want = exact(a, b)
    assert torch.equal(got.isnan(), want.isnan())
    finite = ~want.isnan()
    assert torch.equal(got[finite], want[finite])


# -march=native as gcc 12 resolves it on the x86-64 host kinds the project runs on
VECTOR_HOSTS = {"avx2": ("-march=haswell",), "avx512": ("-march=skylake-avx512", "-mtune=znver3")}


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc to compile the kernel")
@pytest.mark.parametrize("host", VECTOR_HOSTS)
def test_a_max_pool_compiles_to_vector_compares_not_scalar_branches(tmp_path, host) -> None:
    # `a > b || a != a ? a : b` compiled to scalar compare-and-branch under -fno-trapping-math:
    # a 2x2 max pool over 8x32x32x32 ran 0.38 ms, 0.022 ms in vector form
    op = parse("op pool(X: f32[8, 32, 32, 32]) -> Y: f32[8, 32, 16, 16]:\n"
               "    Y[n, c, h, w] = max(max(max(X[n, c, 2*h, 2*w], X[n, c, 2*h, 2*w + 1]),"
               " X[n, c, 2*h + 1, 2*w]), X[n, c, 2*h + 1, 2*w + 1])\n")
    source = tmp_path / "pool.c"
    source.write_text(uol_compile(op, shapes={"X": (8, 32, 32, 32)}, backend="c").source)
    flags = [f for f in BASE_FLAGS if f not in ("-march=native", "-shared")]
    subprocess.run(["gcc", *flags, *VECTOR_HOSTS[host], "-S", str(source), "-o", str(tmp_path / "pool.s")],
                   check=True, capture_output=True)
    asm = (tmp_path / "pool.s").read_text()
    assert re.search(r"\bvcmp\w*ps\b.*%[yz]mm", asm), "no vector compare in the pool's loop"
    assert not re.search(r"\bv?u?comiss\b", asm), "a scalar compare-and-branch is left"
