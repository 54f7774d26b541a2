"""The short call path of compiled C kernels (uol_core/api.py, CKernel.__call__ in
uol_core/backends/c/native.py): inputs of another dtype or layout are converted for the call,
outputs come in their declared dtype, a bad output or shape is refused with its name."""

from __future__ import annotations

import pytest
import torch

import uol_core
from uol_core.backends.c.native import CKernel
from uol_core.odl import parse
from uol_core.odl.shapes import ShapeError

SIGN = parse("op sgn(X: f32[N]) -> Y: i32[N]:\n    Y[i] = where(X[i] > 0.0, 1, 0 - 1)\n")


def test_layernorm_takes_the_short_path_and_matches_torch():
    kernel = uol_core.compile("layernorm", shapes={"X": (5, 96)})
    x, g, b = torch.randn(5, 96), torch.randn(96), torch.randn(96)
    y = kernel(X=x, gamma=g, beta=b)
    assert isinstance(kernel.native_for({"X": (5, 96)}), CKernel)
    assert kernel._fast[tuple((n, t.shape) for n, t in {"X": x, "gamma": g, "beta": b}.items())][-1]
    torch.testing.assert_close(y, torch.layer_norm(x, (96,), g, b), rtol=1e-4, atol=1e-5)
    out = torch.full((5, 96), float("nan"))
    assert kernel(out=out, X=x, gamma=g, beta=b) is out
    torch.testing.assert_close(out, y)


def test_inputs_of_another_layout_or_dtype_are_converted_for_the_call():
    kernel = uol_core.compile("layernorm", shapes={"X": (6, 40)})
    x = torch.randn(40, 6, dtype=torch.float64).t()  # transposed (not contiguous) and f64
    g, b = torch.randn(40), torch.randn(40)
    expected = torch.layer_norm(x.float(), (40,), g, b)
    torch.testing.assert_close(kernel(X=x, gamma=g, beta=b), expected, rtol=1e-4, atol=1e-5)
    assert x.dtype == torch.float64 and not x.is_contiguous()  # the caller's tensor untouched


def test_an_integer_output_comes_in_its_declared_dtype():
    kernel = uol_core.compile(SIGN, shapes={"X": (9,)})
    x = torch.tensor([-2.0, -1.0, 0.0, 0.5, 3.0, -0.1, 7.0, -8.0, 1.0])
    y = kernel(X=x)
    assert y.dtype == torch.int32
    assert y.tolist() == [-1, -1, -1, 1, 1, -1, 1, -1, 1]


@pytest.mark.parametrize("bad,message", [
    (lambda: torch.empty(9, dtype=torch.float32), "output Y must be a contiguous torch.int32"),
    (lambda: torch.empty(18, dtype=torch.int32)[::2], "output Y must be a contiguous"),
    (lambda: torch.empty(8, dtype=torch.int32), "Y has shape (8,)"),
    (lambda: torch.empty(9, dtype=torch.int32, device="meta"), "output Y must be a contiguous torch.int32 tensor on the CPU"),
])
def test_a_bad_output_is_refused_with_its_name(bad, message):
    kernel = uol_core.compile(SIGN, shapes={"X": (9,)})
    with pytest.raises(ShapeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        kernel(out=bad(), X=torch.randn(9))


def test_an_input_of_another_shape_is_refused_by_the_kernel():
    kernel = uol_core.compile("layernorm", shapes={"X": (5, 96)})
    native = kernel.native_for({"X": (5, 96)})
    with pytest.raises(ShapeError, match=r"gamma has shape \(95,\); this kernel was built for \(96,\)"):
        native({"X": torch.randn(5, 96), "gamma": torch.randn(95), "beta": torch.randn(96),
                "Y": torch.empty(5, 96)})


def test_an_input_off_the_cpu_is_never_read_as_host_memory():
    # a meta tensor has no data: its pointer handed to C would be read as host memory
    kernel = uol_core.compile(SIGN, shapes={"X": (9,)})
    with pytest.raises(NotImplementedError):
        kernel(X=torch.empty(9, device="meta"))
