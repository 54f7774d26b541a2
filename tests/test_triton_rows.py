"""Row kernels for rows of any length: one tile when the row fits, BLOCK_C chunks when it does not."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported
pytest.importorskip("triton")

from uol_core.backends.triton import emit
from uol_core.backends.triton.row import row_block_limit, row_plan
from uol_core.ops import load_op
from uol_core.runtime.triton_runner import random_inputs, verify


@pytest.mark.parametrize("name", ["softmax", "layernorm", "rmsnorm", "cross_entropy",
                                  "log_softmax", "add_layernorm"])
def test_long_rows_loop_over_chunks(name: str) -> None:
    op = load_op(name)
    source = emit(op, {"MAX_BLOCK_C": 16})  # a 16-wide tile: rows of 37 take 3 chunks
    assert source.meta["pattern"] == ["row"]
    assert "if LOOPED:" in source.text and "range(0, C, BLOCK_C)" in source.text
    assert "LOOPED=triton.next_power_of_2(C) > 16" in source.text
    sizes = {d: (37 if d == "C" else 3) for d in op.dims}
    result = verify(source, op, random_inputs(op, sizes, seed=11))
    assert result.ok, f"{name}: {result.max_error}\n{source.text}"


def test_the_launcher_picks_the_variant_by_row_length() -> None:
    op = load_op("softmax")
    source = emit(op, {"MAX_BLOCK_C": 32})
    for cols in (20, 32, 33, 70):  # one tile, exactly one tile, then loops
        assert verify(source, op, random_inputs(op, {"R": 2, "C": cols}, seed=cols)).ok


def test_row_limit_comes_from_the_target() -> None:
    gpu = SimpleNamespace(registers_per_thread_max=255, warp_size=32)
    assert row_block_limit(gpu, 4) == 32 * 32 * 4
    assert row_block_limit(gpu, 16) == 32 * 32 * 16
    small = SimpleNamespace(registers_per_thread_max=64, warp_size=32)
    assert row_block_limit(small, 4) < row_block_limit(gpu, 4)
    assert row_block_limit(None, 4) == row_block_limit(gpu, 4)  # unknown: 255 registers
    text = emit(load_op("softmax"), {}, target=small).text
    assert f"> {row_block_limit(small, 4)}" in text


def test_default_limit_keeps_ordinary_rows_in_one_tile() -> None:
    op = load_op("layernorm")
    source = emit(op, {})
    assert f"min(triton.next_power_of_2(C), {row_block_limit(None, 4)})" in source.text
    assert verify(source, op, random_inputs(op, {"R": 3, "C": 33}, seed=12)).ok


def test_row_reduction_reading_the_output_column_is_not_a_row_kernel():
    # The derived rope gradient sums over t while its where() reads the output column x2:
    # one lane cannot be both, and the row kernel once gave wrong dX here.
    from uol_core.odl.grad import derive_grad

    grad = derive_grad(load_op("rope")).op
    assert row_plan(grad) is None
    assert verify(emit(grad, {}, None), grad, random_inputs(grad, {"S": 5, "P": 3}, seed=3)).ok
