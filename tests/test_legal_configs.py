"""A legal config for every library op on every HFL target at every size (issue: right on every
machine). Constraint evaluation and code emission only, so the results do not depend on the host;
the host builds and verifies the small and degenerate cases it can run."""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from uol_core.api import choose_config
from uol_core.api import compile as uol_compile
from uol_core.backends import c as c_backend
from uol_core.backends import triton as triton_backend
from uol_core.backends.triton.space import gpu_space
from uol_core.hfl import list_targets, load_target
from uol_core.odl import parse
from uol_core.odl.shapes import shape_of
from uol_core.ops import list_ops, load_op
from uol_core.runtime.reference import evaluate_all

SHIPPED = [t for t in list_targets() if t != "host"]
TARGETS = {name: load_target(name) for name in SHIPPED}
CPU = [n for n, t in TARGETS.items() if t.kind != "gpu"]
GPU = [n for n, t in TARGETS.items() if t.kind == "gpu"]
OPS = {name: load_op(name) for name in list_ops()}
DONE_WHEN_SIZES = (1, 2, 3, 5, 7, 8, 13, 64, 1000)
# Sizes a property test draws from: tiny, odd, prime, powers of two and their neighbours.
SIZE = st.one_of(st.integers(1, 16), st.sampled_from([17, 31, 61, 127, 251, 509, 1021, 2039]),
                 st.integers(1, 4096))


def legal_configs(op, sizes: dict[str, int], target) -> list:
    """The legal configs the backend of `target` would choose from (non-empty is the property)."""
    if target.kind == "gpu":
        return gpu_space(op, sizes, target).configs
    cfg, space, _ = choose_config(op, sizes, target, None)
    return space.configs or [cfg]


def test_the_library_and_targets_are_all_covered() -> None:
    assert len(OPS) >= 50 and CPU and GPU


@settings(max_examples=120, deadline=None)
@given(target=st.sampled_from(SHIPPED), op=st.sampled_from(sorted(OPS)), data=st.data())
def test_every_op_has_a_legal_config_on_every_target_at_any_size(target, op, data) -> None:
    sizes = {dim: data.draw(SIZE, label=dim) for dim in OPS[op].dims}
    assert legal_configs(OPS[op], sizes, TARGETS[target]), (op, sizes, target)


def emits(op, size: int, target) -> bool:
    """Emit the kernel of `op` with every dimension `size` on `target` (no build, no run)."""
    sizes = {dim: size for dim in op.dims}
    if target.kind == "gpu":
        configs = gpu_space(op, sizes, target).configs
        return bool(configs) and "@triton.jit" in triton_backend.emit(op, configs[0], target).text
    cfg, _, _ = choose_config(op, sizes, target, None)
    src = c_backend.emit(op, cfg, target, sizes)
    return src.lang == "c" and src.entry in src.text


def rotation(target: str) -> list[tuple[str, int]]:
    """Each op on `target` at one of the listed sizes, rotating over targets so that across all
    targets every op meets every size and every target every size (the full product is the
    UOL_LONG run below)."""
    t = SHIPPED.index(target)
    return [(name, DONE_WHEN_SIZES[(i + t) % len(DONE_WHEN_SIZES)])
            for i, name in enumerate(sorted(OPS))]


@pytest.mark.parametrize("target", SHIPPED)
def test_every_op_emits_for_every_target_at_a_rotating_listed_size(target) -> None:
    failed = [(name, size) for name, size in rotation(target)
              if not emits(OPS[name], size, TARGETS[target])]
    assert not failed, failed


@pytest.mark.skipif(not os.environ.get("UOL_LONG"), reason="the full product takes minutes: "
                    "UOL_LONG=1 runs every op x target x listed size")
@pytest.mark.parametrize("target", SHIPPED)
def test_every_op_emits_for_every_target_at_every_listed_size(target) -> None:
    failed = [(name, size) for name in sorted(OPS) for size in DONE_WHEN_SIZES
              if not emits(OPS[name], size, TARGETS[target])]
    assert not failed, failed


def test_a_small_gemm_explains_the_relaxed_latency_rule() -> None:
    """Grace needs 4 units x 4 cycles = 16 accumulators; at M=N=K=5 a legal tile holds at most
    10 (5 rows x 2 vectors of 4 lanes): the rule asks for what fits and says so."""
    from uol_core.backends.c.gemm.explain import explain

    grace = TARGETS["grace-neoverse-v2"]
    cfg, space, model = choose_config(OPS["matmul"], {"M": 5, "N": 5, "K": 5}, grace, None)
    assert space.facts["latency"][cfg.isa] == (10, 16)  # sve: Grace's SVE2 vectors are 128 bits
    lines = explain(space, model, cfg).binding
    assert any("relaxed to 10" in line and "latency-bound" in line for line in lines), lines


def test_a_flash_op_too_wide_for_shared_memory_falls_back_to_generic_kernels() -> None:
    gpu = TARGETS["a100-sxm-80gb"]
    space = gpu_space(OPS["attention"], {dim: 1000 for dim in OPS["attention"].dims}, gpu)
    assert space.configs and all(c["force_generic"] for c in space.configs)
    assert "shared_memory" in space.facts["problem"]["fallback"]


GATED_MLP = """op gated_mlp(X: f32[M, K], Wg: f32[K, N], Wu: f32[K, N]) -> Y: f32[M, N]:
    g[m, n] = sum[k](X[m, k] * Wg[k, n])
    u[m, n] = sum[k](X[m, k] * Wu[k, n])
    Y[m, n] = silu(g[m, n]) * u[m, n]
"""


def test_a_gated_mlp_at_odd_small_sizes_compiles_and_verifies() -> None:
    op = parse(GATED_MLP)
    torch.manual_seed(0)
    inputs = {"X": torch.randn(10, 24), "Wg": torch.randn(24, 14), "Wu": torch.randn(24, 14)}
    got = uol_compile(op, target="host")(**inputs)
    want = evaluate_all(op, inputs)["Y"]
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 13])
@pytest.mark.parametrize("name", ["matmul", "linear_bias_relu", "softmax", "layernorm", "bmm"])
def test_degenerate_sizes_build_and_verify_on_the_host(name, size) -> None:
    op = OPS[name]
    sizes = {dim: size for dim in op.dims}
    torch.manual_seed(size)
    inputs = {d.name: torch.randn(*shape_of(op, d.name, sizes)) for d in op.inputs}
    got = uol_compile(op, target="host")(**inputs)
    first = evaluate_all(op, inputs)[op.outputs[0].name]
    got = got[op.outputs[0].name] if isinstance(got, dict) else got
    torch.testing.assert_close(got, first, rtol=1e-4, atol=1e-4)
