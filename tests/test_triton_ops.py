"""Every library operator emits Triton that matches the reference under the interpreter."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported
pytest.importorskip("triton")

from uol_core.backends.triton import emit
from uol_core.ops import list_ops, load_op
from uol_core.runtime.triton_runner import random_inputs, verify


def small_sizes(op) -> dict[str, int]:
    """Odd sizes (masks are exercised); symbols subtracted in a shape (filters) get 2."""
    negative = {n for d in op.inputs + op.outputs for f in d.shape for n, c in f.terms if c < 0}
    return {d: (2 if d in negative else 7) for d in op.dims}


@pytest.mark.parametrize("name", list_ops())
def test_library_op_matches_reference(name: str) -> None:
    op = load_op(name)
    source = emit(op, {})
    result = verify(source, op, random_inputs(op, small_sizes(op), seed=1))
    assert result.ok, f"{name}: {result.max_error} over {result.tolerance}\n{source.text}"
    assert result.mode in ("gpu", "interpreted, no timing")


@pytest.mark.parametrize("config", [
    {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 2, "SPLIT_K": 1},
    {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 1, "SPLIT_K": 3},
])
def test_matmul_tiles_swizzle_and_split_k(config: dict) -> None:
    op = load_op("matmul")
    source = emit(op, config)
    assert "GROUP_M" in source.text and "tl.dot" in source.text
    if config["SPLIT_K"] > 1:
        assert "tl.atomic_add" in source.text and "torch.zeros" in source.text
    tensors = random_inputs(op, {"M": 33, "N": 40, "K": 50}, seed=2)
    assert verify(source, op, tensors).ok


def test_kernel_choice_follows_the_pattern() -> None:
    kinds = {n: emit(load_op(n), {}).meta["pattern"] for n in
             ("softmax", "layernorm", "matmul", "bmm", "conv2d", "gelu_tanh", "cumsum")}
    assert kinds["softmax"] == ["row"] and kinds["layernorm"] == ["row"]
    assert kinds["matmul"] == ["matmul"] and kinds["bmm"] == ["bmm"]
    assert kinds["conv2d"] == ["implicit-gemm"]
    assert kinds["gelu_tanh"] == ["generic"] and kinds["cumsum"] == ["generic"]


def test_line_map_points_at_odl_statements() -> None:
    op = load_op("layernorm")
    source = emit(op, {})
    lines = source.text.splitlines()
    stmt_lines = {s.line for s in op.stmts} | {d.line for d in op.inputs + op.outputs}
    assert set(source.line_map.values()) <= stmt_lines
    store = next(i for i, t in enumerate(lines, 1) if "tl.store(Y_ptr" in t)
    assert source.odl_line(store) == op.stmts[-1].line


def test_generic_path_handles_every_statement_kind() -> None:
    op = load_op("attention")
    source = emit(op, {"force_generic": True})
    assert set(source.meta["pattern"]) <= {"generic", "map"}
    assert verify(source, op, random_inputs(op, {"S": 5, "D": 4, "T": 6, "E": 3})).ok
