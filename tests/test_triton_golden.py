"""Golden files of emitted Triton, one per pattern; refresh with `pytest --update-golden`."""

from __future__ import annotations

from pathlib import Path

import pytest

from uol_core.backends.triton import emit
from uol_core.ops import load_op

GOLDEN = Path(__file__).parent / "golden" / "triton"
CASES = ["matmul", "linear_bias_relu", "bmm", "conv2d", "softmax", "layernorm",
         "cross_entropy", "gelu_tanh", "stencil5", "cumsum", "attention"]


@pytest.mark.parametrize("name", CASES)
def test_emitted_triton_matches_golden(name: str, request) -> None:
    text = emit(load_op(name), {}).text
    path = GOLDEN / f"{name}.py"
    if request.config.getoption("--update-golden", default=False) or not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"{path} differs: rerun with --update-golden if intended"
