"""Training through attention: the forward with saves runs on the flash template, the derived
backward on the flash backward template, and both give torch's gradients.

Update the golden kernels with `pytest tests/test_attention_backward.py --update-golden`.
"""

import shutil
import subprocess
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from uol_core.acg.fixtures import fixed_target
from uol_core.backends.c.attention.backward import GENERATOR, flash_grad_plan
from uol_core.backends.c.attention.forward import flash_plan
from uol_core.backends.c.native import compile_c
from uol_core.backends.c.route import emit_any, whole_op_template
from uol_core.odl.grad import derive_grad
from uol_core.odl.ir import Binary, Const
from uol_core.ops import load_op
from uol_core.runtime.inputs import random_inputs
from uol_core.runtime.reference import evaluate_all
from uol_core.torch.bridge import to_torch
from uol_core.torch.nn import UolAttention

TARGETS = {"avx2": fixed_target(),
           "avx512": fixed_target("test-avx512", isa=("avx512f", "avx2", "fma"), vector_bits=512,
                                  registers=32)}


def _grads(out, inputs, upstream):
    out.backward(upstream)
    return [x.grad for x in inputs]


@pytest.mark.parametrize("B, H, S, T, D", [
    (1, 2, 37, 45, 64),   # ragged: neither S nor T a multiple of a block, T != S
    (2, 3, 70, 64, 32),
    (1, 1, 16, 130, 80),  # head dim 80: padded to whole register tiles
    (1, 8, 128, 128, 64),
    (1, 3, 20, 5, 16),    # 3 slices (not split evenly over 2 threads), fewer keys than a tile
    (1, 2, 28, 28, 16),   # keys in whole register tiles: no short tile
])
def test_uol_attention_gradients_match_torch(B, H, S, T, D):
    torch.manual_seed(S + T + D)
    module = UolAttention(D)
    q, k, v = (torch.randn(B, H, n, D, requires_grad=True) for n in (S, T, T))
    out = module(q, k, v)
    upstream = torch.randn_like(out)
    got = _grads(out, (q, k, v), upstream)
    ref_in = [x.detach().double().requires_grad_() for x in (q, k, v)]
    ref = F.scaled_dot_product_attention(*ref_in)
    want = _grads(ref, ref_in, upstream.double())
    torch.testing.assert_close(out.double(), ref, atol=2e-5, rtol=1e-4)
    for name, g, w in zip("qkv", got, want):
        torch.testing.assert_close(g.double(), w, atol=5e-5, rtol=1e-4, msg=f"d{name}")
    # Both directions ran as one C kernel each, not as groups or on the reference.
    forward, backward = module.fn.runners((q, k, v))
    assert set(forward.used.values()) == {"c"} and set(backward.used.values()) == {"c"}


def test_causal_attention_gradients_use_the_flash_backward():
    f = to_torch("causal_attention")
    torch.manual_seed(1)
    q, k, v = (torch.randn(53, 16, requires_grad=True) for _ in range(3))
    out = f(q, k, v)
    upstream = torch.randn_like(out)
    got = _grads(out, (q, k, v), upstream)
    ref_in = [x.detach().double().requires_grad_() for x in (q, k, v)]
    ref = F.scaled_dot_product_attention(*ref_in, is_causal=True, scale=0.125)
    for g, w in zip(got, _grads(ref, ref_in, upstream.double())):
        torch.testing.assert_close(g.double(), w, atol=5e-5, rtol=1e-4)
    assert set(f.runners((q, k, v))[1].used.values()) == {"c"}
    plan = flash_grad_plan(f.grad.op)
    assert plan is not None and plan.slope.args[1] == Const(0.125)  # where(j <= i, 0.125, 0)


def test_training_saves_row_statistics_not_scores():
    grad = UolAttention(64).fn.grad
    assert grad.saved_extra == ("mx", "l")  # the S x T score matrix is recomputed
    # and sum[j](p V) is O * l: the output the backward keeps, never a second copy of it
    assert grad.saved == ("O",) and [d.name for d in grad.forward_with_saves.outputs] == \
        ["O", "mx", "l"]
    assert any("recomputed although a reduction" in n and n.endswith(": s") for n in grad.notes)
    assert flash_plan(grad.forward_with_saves).saves == ("mx", "l", None)
    assert whole_op_template(grad.op) and whole_op_template(grad.forward_with_saves)


def test_backward_plan_refuses_other_ops():
    grad = derive_grad(load_op("attention"), recompute_wide=True)
    assert flash_grad_plan(grad.op) is not None
    for name in ("softmax", "linear_bias_gelu", "layernorm"):
        assert flash_grad_plan(derive_grad(load_op(name)).op) is None
    # Any change to what the gradient computes (here dV scaled by 2) is no longer recognised.
    dv = grad.op.stmts[-1]
    changed = replace(dv, expr=Binary("mul", dv.expr, Const(2.0)))
    assert flash_grad_plan(replace(grad.op, stmts=(*grad.op.stmts[:-1], changed))) is None


def test_backward_kernel_source_says_its_plan():
    grad = derive_grad(load_op("attention_batched"), recompute_wide=True)
    src = emit_any(grad.op, {"B": 1, "NH": 2, "S": 40, "T": 33, "D": 16}, TARGETS["avx2"],
                   {"threads": 2})
    assert src.meta["generator"] == GENERATOR
    assert "never stored" in src.text and "schedule(static)" in src.text
    assert "_mm256_fmadd_ps" in src.text  # explicit AVX2 from the target's ISA


@pytest.mark.parametrize("isa", sorted(TARGETS))
def test_flash_backward_golden(isa, golden):
    grad = derive_grad(load_op("causal_attention"), recompute_wide=True)
    text = emit_any(grad.op, {"S": 40, "D": 16}, TARGETS[isa], {"threads": 2}).text
    golden(f"c/pattern_flash_backward_causal_attention_{isa}.c", text)


def test_flash_backward_golden_owned_slices(golden):
    """Slices that split evenly over the threads: each thread sums its slices' dQ in one
    buffer (no partials, no reduction pass); no padding: Q and dO rows read in place."""
    grad = derive_grad(load_op("attention_batched"), recompute_wide=True)
    text = emit_any(grad.op, {"B": 1, "NH": 4, "S": 64, "T": 64, "D": 32}, TARGETS["avx512"],
                    {"threads": 2}).text
    assert "dq = dqp + omp_get_thread_num()" in text and "sum of the partials" not in text
    assert "*const qp" not in text and "*const dop" not in text  # rows read in place
    golden("c/pattern_flash_backward_attention_owned_avx512.c", text)


def test_flash_forward_with_saves_golden(golden):
    forward = derive_grad(load_op("attention"), recompute_wide=True).forward_with_saves
    text = emit_any(forward, {"S": 40, "T": 24, "D": 16, "E": 16}, TARGETS["avx2"],
                    {"threads": 2}).text
    golden("c/pattern_flash_attention_with_saves.c", text)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc")
def test_avx512_backward_builds(tmp_path):
    grad = derive_grad(load_op("attention_batched"), recompute_wide=True)
    src = emit_any(grad.op, {"B": 1, "NH": 2, "S": 70, "T": 45, "D": 24}, TARGETS["avx512"],
                   {"threads": 2})
    assert src.meta["generator"] == GENERATOR and "_mm512_fmadd_ps" in src.text
    path = tmp_path / "k.c"
    path.write_text(src.text)
    done = subprocess.run(["gcc", "-O2", "-std=gnu11", "-mavx512f", "-mfma", "-fopenmp", "-c",
                           str(path), "-o", str(tmp_path / "k.o")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


def test_portable_backward_matches_the_reference():
    """gcc vector extensions (a target without x86 intrinsics) give the same gradients."""
    portable = fixed_target("test-portable", isa=("neon",), vector_bits=128, registers=32)
    grad = derive_grad(load_op("attention"), recompute_wide=True)
    sizes = {"S": 21, "T": 30, "D": 12, "E": 7}
    kernel = compile_c(grad.op, sizes, portable, {"threads": 2})
    assert kernel.src.meta["generator"] == GENERATOR and "_mm" not in kernel.src.text
    inputs = random_inputs(grad.forward_with_saves, kernel.sizes, seed=5)
    saved = evaluate_all(grad.forward_with_saves, inputs)
    feed = {**inputs, **{n: saved[n] for n in ("O", "mx", "l")},
            "dO": torch.randn(sizes["S"], sizes["E"], generator=torch.Generator().manual_seed(2))}
    got, want = kernel.run(feed), evaluate_all(grad.op, feed)
    for name in ("dQ", "dK", "dV"):
        torch.testing.assert_close(got[name], want[name], atol=1e-5, rtol=1e-4)


def test_causal_uol_attention_module_matches_sdpa_is_causal():
    att = UolAttention(32, causal=True)
    q, k, v = (torch.randn(1, 2, 70, 32, requires_grad=True) for _ in range(3))
    ours = att(q, k, v)
    ref = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    want = torch.nn.functional.scaled_dot_product_attention(*ref, is_causal=True)
    torch.testing.assert_close(ours, want, rtol=1e-4, atol=1e-5)
    up = torch.randn_like(want)
    ours.backward(up)
    want.backward(up)
    for mine, theirs in zip((q, k, v), ref):
        torch.testing.assert_close(mine.grad, theirs.grad, rtol=1e-3, atol=1e-4)
    assert flash_grad_plan(att.fn.grad.op).causal == 0  # query blocks before the keys skipped
