"""Derived backward ops: plain ODL, checked against torch autograd and finite differences."""

import pytest
import torch

from uol_core import evaluate, list_ops, load_op, parse
from uol_core.odl import OdlError
from uol_core.odl.grad import derive_grad, differentiable_inputs
from uol_core.odl.ir import DType, retyped
from uol_core.odl.shapes import bind_sizes
from uol_core.runtime.inputs import random_inputs_in_domain

POSITIVE = {"var", "T"}  # inputs that must stay positive (variance, temperature)


def inputs_for(op, size):
    tensors = random_inputs_in_domain(op, bind_sizes(op, {d: size for d in op.dims}), seed=size)
    return {k: (v.abs() + 0.5 if k in POSITIVE and v.is_floating_point() else v)
            for k, v in tensors.items()}


def backward_inputs(grad, tensors, outputs, upstream):
    """What the backward reads: inputs, saved outputs and extras (from the forward with saves)."""
    feed = dict(tensors)
    if grad.saved_extra:
        outputs = {**outputs, **as_dict(grad.forward_with_saves,
                                        evaluate(grad.forward_with_saves, **tensors))}
    feed.update({name: outputs[name] for name in (*grad.saved, *grad.saved_extra)})
    feed.update({grad.grad_of_output[name]: g for name, g in upstream.items()})
    return feed


def as_dict(op, value):
    return value if isinstance(value, dict) else {op.outputs[0].name: value}


@pytest.mark.parametrize("name", list_ops())
@pytest.mark.parametrize("size", [3, 4])
def test_backward_matches_torch_autograd(name, size):
    op = retyped(load_op(name), DType.f64)
    grad = derive_grad(op)
    assert grad.wrt == differentiable_inputs(op)
    tensors = inputs_for(op, size)
    leaves = {k: v.clone().requires_grad_() if k in grad.wrt else v for k, v in tensors.items()}
    outputs = as_dict(op, evaluate(op, **leaves))
    upstream = {k: torch.randn_like(v) for k, v in outputs.items()}
    loss = sum((outputs[k] * upstream[k]).sum() for k in outputs)
    expected = (torch.autograd.grad(loss, [leaves[n] for n in grad.wrt], allow_unused=True)
                if loss.requires_grad else [None] * len(grad.wrt))  # piecewise constant: zero
    got = as_dict(grad.op, evaluate(grad.op, **backward_inputs(
        grad, tensors, {k: v.detach() for k, v in outputs.items()}, upstream)))
    for wrt, ref in zip(grad.wrt, expected):
        ref = torch.zeros_like(tensors[wrt]) if ref is None else ref
        torch.testing.assert_close(got[grad.grad_of_input[wrt]], ref, rtol=1e-9, atol=1e-9)


class _ReferenceOp(torch.autograd.Function):
    """Forward by the reference evaluator, backward by the derived ODL op."""

    @staticmethod
    def forward(ctx, op, grad, names, *values):
        tensors = dict(zip(names, values))
        outputs = as_dict(op, evaluate(op, **tensors))
        ctx.save_for_backward(*values, *(outputs[n] for n in grad.saved))
        ctx.meta = (op, grad, names)
        return tuple(outputs[d.name] for d in op.outputs)

    @staticmethod
    def backward(ctx, *upstream):
        op, grad, names = ctx.meta
        saved = ctx.saved_tensors
        tensors = dict(zip(names, saved[: len(names)]))
        kept = dict(zip(grad.saved, saved[len(names):]))
        ups = {d.name: u for d, u in zip(op.outputs, upstream)}
        result = as_dict(grad.op, evaluate(grad.op, **backward_inputs(grad, tensors, kept, ups)))
        return (None, None, None, *(result[grad.grad_of_input[n]] if n in grad.wrt else None
                                    for n in names))


@pytest.mark.parametrize("name", ["linear_bias_gelu", "softmax", "layernorm", "conv2d",
                                  "avgpool2d", "attention", "cumsum", "stencil3", "cross_entropy"])
def test_gradcheck_in_float64(name):
    op = retyped(load_op(name), DType.f64)
    grad = derive_grad(op)
    tensors = inputs_for(op, 3)
    names = tuple(tensors)
    values = [v.requires_grad_() if n in grad.wrt else v for n, v in tensors.items()]
    assert torch.autograd.gradcheck(lambda *v: _ReferenceOp.apply(op, grad, names, *v), values)


def test_matmul_gradient_is_two_contractions():
    grad = derive_grad(load_op("matmul"))
    assert grad.text.splitlines()[1:] == [
        "    dA[a0, a1] = sum[n](dC[a0, n] * B[a1, n])",
        "    dB[b0, b1] = sum[m](dC[m, b1] * A[m, b0])",
    ]


def test_softmax_gradient_saves_reductions_and_recomputes_maps():
    grad = derive_grad(load_op("softmax"))
    assert grad.saved_extra == ("mx", "z_Y")  # the row max and the row sum: passes over X
    assert grad.op.stmts[0].target == "e"  # exp(X - mx): elementwise, recomputed
    assert any("recomputed" in n for n in grad.notes) and any("saved" in n for n in grad.notes)
    forward = grad.forward_with_saves
    assert [d.name for d in forward.outputs] == ["Y", "mx", "z_Y"]


def test_linear_gradient_saves_the_pre_activation():
    grad = derive_grad(load_op("linear_bias_gelu"))
    assert grad.saved_extra == ("z_Y",)
    assert [s.target for s in grad.op.stmts] == ["g_Y", "dX", "dW", "db"]


def test_a_reduction_divided_into_an_output_is_read_back_from_the_output():
    """Y = z / c with z a reduction over all of Y's indices: the gradient reads z as Y * c,
    so the forward saves no copy of z; the gradients are still torch's."""
    op = parse("op weighted_mean(A: f64[M, J], B: f64[J, E], c: f64[M]) -> Y: f64[M, E]:\n"
               "    Y[m, e] = sum[j](A[m, j] * B[j, e]) / c[m]\n")
    grad = derive_grad(op)
    assert grad.saved == ("Y",) and grad.saved_extra == ()
    assert [d.name for d in grad.forward_with_saves.outputs] == ["Y"]
    gen = torch.Generator().manual_seed(0)
    tensors = {"A": torch.randn(3, 5, generator=gen, dtype=torch.float64),
               "B": torch.randn(5, 4, generator=gen, dtype=torch.float64),
               "c": torch.rand(3, generator=gen, dtype=torch.float64) + 0.5}
    leaves = {k: v.clone().requires_grad_() for k, v in tensors.items()}
    y = leaves["A"] @ leaves["B"] / leaves["c"][:, None]
    upstream = torch.randn(3, 4, generator=gen, dtype=torch.float64)
    expected = torch.autograd.grad((y * upstream).sum(), [leaves[n] for n in grad.wrt])
    got = as_dict(grad.op, evaluate(grad.op, **backward_inputs(
        grad, tensors, {"Y": y.detach()}, {"Y": upstream})))
    for wrt, ref in zip(grad.wrt, expected):
        torch.testing.assert_close(got[grad.grad_of_input[wrt]], ref, rtol=1e-9, atol=1e-9)


def test_integer_inputs_get_no_gradient_and_bad_wrt_is_an_error():
    op = load_op("cross_entropy")
    assert derive_grad(op).wrt == ("X",)
    with pytest.raises(OdlError, match="not a float input"):
        derive_grad(op, ("T",))


def test_unused_input_has_zero_gradient():
    op = parse("op f(X: f32[N], Z: f32[N]) -> Y: f32[N]:\n    Y[i] = where(Z[i] > 0, X[i], 0)\n")
    grad = derive_grad(op)
    dz = next(s for s in grad.op.stmts if s.target == "dZ")
    assert grad.text.count("dZ[z0] = 0") == 1 and dz.expr.value == 0
