"""Flash attention from multi-statement ODL: recognised structurally, verified under the interpreter."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported
pytest.importorskip("triton")

from uol_core.backends.triton import emit
from uol_core.backends.triton.attention import flash_plan
from uol_core.odl import parse
from uol_core.ops import load_op
from uol_core.runtime.triton_runner import random_inputs, verify
from uol_core.torch.nn import _ATTENTION

TINY = {"BLOCK_M": 16, "BLOCK_N": 16}

# K stored transposed ([D, T]), V with the key axis last, an additive bias, other index names.
ODD_LAYOUT = """op attn_t(Q: f32[S, D], Kt: f32[D, T], Vt: f32[E, T], Bias: f32[S, T]) -> O: f32[S, E]:
    sc[a, b] = sum[k](Kt[k, b] * Q[a, k]) / 4.0 + Bias[a, b]
    m[a] = max[b](sc[a, b])
    w[a, b] = exp(sc[a, b] - m[a])
    z[a] = sum[b](w[a, b])
    O[a, c] = sum[b](Vt[c, b] * w[a, b]) / z[a]
"""
# Softmax without the max subtraction: not the flash structure (p must be exp(s - mx)).
NO_MAX = """op attn_nomax(Q: f32[S, D], K: f32[T, D], V: f32[T, E]) -> O: f32[S, E]:
    s[i, j] = sum[d](Q[i, d] * K[j, d])
    mx[i] = max[j](s[i, j])
    p[i, j] = exp(s[i, j])
    l[i] = sum[j](p[i, j])
    O[i, e] = sum[j](p[i, j] * V[j, e]) / l[i]
"""
# Sliding window below the diagonal (j <= i - 2): some rows see no key, no block skipping.
SHIFTED = """op attn_shift(Q: f32[S, D], K: f32[S, D], V: f32[S, D]) -> O: f32[S, D]:
    s[i, j] = where(j < i - 1, sum[d](Q[i, d] * K[j, d]) * 0.5, -1e30)
    mx[i] = max[j](s[i, j])
    p[i, j] = exp(s[i, j] - mx[i])
    l[i] = sum[j](p[i, j])
    O[i, d] = sum[j](p[i, j] * V[j, d]) / l[i]
"""


@pytest.mark.parametrize("name, sizes", [
    ("attention", {"S": 19, "D": 5, "T": 37, "E": 3}),
    ("attention_batched", {"B": 2, "NH": 2, "S": 17, "T": 20, "D": 6}),
    ("causal_attention", {"S": 35, "D": 4}),
])
def test_flash_kernel_is_chosen_and_matches_reference(name: str, sizes: dict) -> None:
    op = load_op(name)
    assert flash_plan(op) is not None
    source = emit(op, TINY)
    assert source.meta["pattern"] == ["flash"]
    assert "tl.dot" in source.text and "m_new" in source.text
    assert "s_ptr" not in source.text and "p_ptr" not in source.text  # scores never stored
    result = verify(source, op, random_inputs(op, sizes, seed=3))
    assert result.ok, f"{name}: {result.max_error}\n{source.text}"


def test_causal_mask_skips_key_blocks_past_the_diagonal() -> None:
    op = load_op("causal_attention")
    plan = flash_plan(op)
    assert plan is not None and plan.causal == 0
    text = emit(op, TINY).text
    assert "hi = tl.minimum(S, (pid_m + 1) * BLOCK_M)" in text
    assert flash_plan(load_op("attention")).causal is None
    shifted = parse(SHIFTED)
    assert flash_plan(shifted).causal is None  # rows with no visible key: every block is visited
    assert verify(emit(shifted, TINY), shifted,
                  random_inputs(shifted, {"S": 20, "D": 3}, seed=4)).ok


def test_nn_template_layout_and_bias_variants() -> None:
    op = parse(_ATTENTION.format(score="sum[d](Q[b, h, i, d] * K[b, h, j, d]) * 0.25"))
    source = emit(op, TINY)
    assert source.meta["pattern"] == ["flash"]
    assert verify(source, op, random_inputs(op, {"B": 1, "NH": 2, "S": 9, "T": 18, "D": 4},
                                            seed=5)).ok
    odd = parse(ODD_LAYOUT)
    source = emit(odd, TINY)
    assert source.meta["pattern"] == ["flash"]
    assert verify(source, odd, random_inputs(odd, {"S": 18, "D": 3, "T": 17, "E": 5}, seed=6)).ok


def test_non_matching_structure_declines_to_the_generic_path() -> None:
    op = parse(NO_MAX)
    assert flash_plan(op) is None
    source = emit(op, {})
    assert "flash" not in source.meta["pattern"]
    assert verify(source, op, random_inputs(op, {"S": 5, "D": 3, "T": 6, "E": 2}, seed=7)).ok
    single = load_op("softmax")  # one-statement-per-step ops never match
    assert flash_plan(single) is None


def test_line_map_points_kernel_lines_at_the_statements() -> None:
    op = load_op("attention")
    source = emit(op, TINY)
    lines = source.text.splitlines()
    s, mx, p, lsum, o = (st.line for st in op.stmts)

    def odl(fragment: str) -> int | None:
        return source.odl_line(next(n for n, t in enumerate(lines, 1) if fragment in t))

    assert odl("qk = tl.dot") == s
    assert odl("m_new = tl.maximum") == mx
    assert odl("p = tl.exp") == p
    assert odl("l_i = l_i * alpha") == lsum
    assert odl("tl.store(O_ptr") == o
    decls = {d.line for d in op.inputs + op.outputs}  # the launcher's allocation of O
    assert set(source.line_map.values()) <= {st.line for st in op.stmts} | decls


def test_half_precision_inputs() -> None:
    op = parse(load_op("attention").source.replace("f32", "f16"))
    source = emit(op, TINY)
    assert source.meta["pattern"] == ["flash"] and "p.to(tl.float16)" in source.text
    assert verify(source, op, random_inputs(op, {"S": 17, "D": 4, "T": 18, "E": 4}, seed=8)).ok


def test_flash_tile_space_has_its_own_knobs() -> None:
    from types import SimpleNamespace

    from uol_core.backends.triton.space import first_rejections, gpu_space, rank

    gpu = SimpleNamespace(smem_per_block_optin_bytes=65536, smem_per_block_bytes=49152,
                          registers_per_thread_max=255, warp_size=32, max_threads_per_block=1024,
                          mma_shapes={}, peak_gflops={"fp32": 10000.0},
                          mem_bandwidth_gbps=1000.0, cores=100)
    space = gpu_space(load_op("attention_batched"), {"B": 2, "NH": 8, "S": 1024, "T": 1024,
                                                     "D": 64}, gpu)
    assert space.facts["problem"]["flash"] and set(space.configs[0]) == {"BLOCK_M", "BLOCK_N",
                                                                 "num_warps", "num_stages"}
    big = {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8, "num_stages": 4}
    assert any(r.startswith("shared_memory") for r in space.explain(big))
    assert len(space.configs) + sum(first_rejections(space).values()) == space.product_size
    times = [p["time_s"] for _, p in rank(space, gpu, top=5)]
    assert times == sorted(times) and len(times) == 5
