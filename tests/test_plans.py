"""Plans are recognised once and shared: the C and Triton flash templates take the same
AttentionPlan and differ only in what they decline."""

from __future__ import annotations

import pytest

from uol_core.backends.c.attention import forward as c_attention
from uol_core.backends.triton import attention as triton_attention
from uol_core.odl import parse
from uol_core.ops import list_ops, load_op
from uol_core.plans import attention_plan

ATTENTION_OPS = [name for name in list_ops() if attention_plan(load_op(name)) is not None]


def test_the_library_has_attention_ops_the_shared_plan_recognises():
    assert {"attention", "attention_batched"} <= set(ATTENTION_OPS)


@pytest.mark.parametrize("name", ATTENTION_OPS)
def test_both_templates_take_the_same_plan_object(name):
    op = load_op(name)
    shared = attention_plan(op)
    for template in (c_attention.flash_plan, triton_attention.flash_plan):
        plan = template(op)
        assert plan is None or plan == shared, (name, template.__module__)
    assert triton_attention.flash_plan(op) == shared  # the library's forms are all elementwise


def test_each_template_declines_only_by_its_own_limits():
    f16 = parse("op att16(Q: f16[S, D], K: f16[T, D], V: f16[T, E]) -> O: f16[S, E]:\n"
                "    s[i, j] = sum[d](Q[i, d] * K[j, d])\n"
                "    mx[i] = max[j](s[i, j])\n"
                "    p[i, j] = exp(s[i, j] - mx[i])\n"
                "    l[i] = sum[j](p[i, j])\n"
                "    O[i, e] = sum[j](p[i, j] * V[j, e]) / l[i]\n")
    plan = attention_plan(f16)
    assert plan is not None and plan.canonical and not plan.split
    assert c_attention.flash_plan(f16) is None  # the C template reads f32 only
    assert triton_attention.flash_plan(f16) == plan
    transposed = parse("op attT(Q: f32[D, S], K: f32[T, D], V: f32[T, E]) -> O: f32[S, E]:\n"
                       "    s[i, j] = sum[d](Q[d, i] * K[j, d])\n"
                       "    mx[i] = max[j](s[i, j])\n"
                       "    p[i, j] = exp(s[i, j] - mx[i])\n"
                       "    l[i] = sum[j](p[i, j])\n"
                       "    O[i, e] = sum[j](p[i, j] * V[j, e]) / l[i]\n")
    plan = attention_plan(transposed)
    assert plan is not None and not plan.canonical
    assert c_attention.flash_plan(transposed) is None  # C reads the canonical layout only
    assert triton_attention.flash_plan(transposed) == plan


def test_the_forward_with_saves_is_one_plan_that_only_c_renders():
    from uol_core.torch.nn import UolAttention

    grad = UolAttention(64).fn.grad  # training saves the row statistics, and keeps O itself
    plan = attention_plan(grad.forward_with_saves)
    assert plan is not None and not plan.split and plan.saves == ("mx", "l", None)
    assert c_attention.flash_plan(grad.forward_with_saves) == plan
    assert triton_attention.flash_plan(grad.forward_with_saves) is None
    split = parse("op att_split(Q: f32[S, D], K: f32[T, D], V: f32[T, E]) -> (O: f32[S, E], "
                  "mx: f32[S], l: f32[S], z: f32[S, E]):\n"
                  "    s[i, j] = sum[d](Q[i, d] * K[j, d])\n"
                  "    mx[i] = max[j](s[i, j])\n"
                  "    p[i, j] = exp(s[i, j] - mx[i])\n"
                  "    l[i] = sum[j](p[i, j])\n"
                  "    z[i, e] = sum[j](p[i, j] * V[j, e])\n"
                  "    O[i, e] = z[i, e] / l[i]\n")
    plan = attention_plan(split)  # O = z / l written out, z returned too
    assert plan is not None and plan.split and plan.saves == ("mx", "l", "z")
    assert c_attention.flash_plan(split) == plan and triton_attention.flash_plan(split) is None



@pytest.mark.parametrize("scan", ["cumsum", "cummax", "cumprod"])
def test_the_scan_plan_takes_one_running_reduction_and_the_c_template_adds_its_length(scan):
    from uol_core.backends.c.scan import emitter as c_scan
    from uol_core.plans.scan import scan_plan

    op = parse(f"op s(X: f32[N]) -> Y: f32[N]:\n    Y[i] = {scan}[i](X[i] * 2.0)\n")
    plan = scan_plan(op)
    assert plan.scan.op == scan and plan.index == "i"
    long, short = c_scan.SCAN_PARALLEL_MIN * 4, c_scan.SCAN_PARALLEL_MIN
    assert c_scan.scan_fits(op, {"N": long}, threads=4)
    assert not c_scan.scan_fits(op, {"N": short}, threads=4)  # too short to split
    assert not c_scan.scan_fits(op, {"N": long}, threads=1)


@pytest.mark.parametrize("text", [
    "op rows(X: f32[R, C]) -> Y: f32[R, C]:\n    Y[r, c] = cumsum[c](X[r, c])\n",  # two indices
    "op m(X: f32[N]) -> Y: f32[N]:\n    Y[i] = X[i] * 2.0\n",  # no scan
    "op n(X: f32[N]) -> Y: f32[N]:\n    Y[i] = cumsum[i](X[i]) + 1.0\n",  # scan inside a map
    "op k(X: i32[N]) -> Y: i32[N]:\n    Y[i] = cumsum[i](X[i])\n",  # not float
])
def test_the_scan_plan_declines_every_other_op(text):
    from uol_core.plans.scan import scan_plan

    assert scan_plan(parse(text)) is None
