"""Golden files of emitted Triton, one per pattern; refresh with `pytest --update-golden`."""

from __future__ import annotations

import pytest

from uol_core.backends.triton import emit
from uol_core.ops import load_op

CASES = ["matmul", "linear_bias_relu", "bmm", "conv2d", "softmax", "layernorm",
         "cross_entropy", "gelu_tanh", "stencil5", "cumsum", "attention"]


@pytest.mark.parametrize("name", CASES)
def test_emitted_triton_matches_golden(name: str, golden) -> None:
    text = emit(load_op(name), {}).text
    golden(f"triton/{name}.py", text)
