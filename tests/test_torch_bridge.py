"""ODL ops inside PyTorch: custom ops with derived backward kernels, torch.compile, nn swaps."""

import copy

import pytest
import torch
from torch import nn

from uol_core.torch.bridge import to_torch
from uol_core.torch.nn import UolLayerNorm, UolLinear, UolMLP, swap_modules

torch.manual_seed(0)


def test_linear_gelu_forward_and_gradients_match_torch():
    f = to_torch("linear_bias_gelu")
    x, w, b = (torch.randn(33, 17), torch.randn(17, 9), torch.randn(9))
    ours = [t.clone().requires_grad_() for t in (x, w, b)]
    ref = [t.clone().requires_grad_() for t in (x, w, b)]
    y = f(*ours)
    torch.nn.functional.gelu(ref[0] @ ref[1] + ref[2]).backward(torch.ones(33, 9))
    y.backward(torch.ones(33, 9))
    torch.testing.assert_close(y, torch.nn.functional.gelu(x @ w + b), rtol=1e-5, atol=1e-5)
    for a, r in zip(ours, ref):
        torch.testing.assert_close(a.grad, r.grad, rtol=1e-4, atol=1e-4)


def test_forward_runs_compiled_c_when_the_backend_can_emit_it():
    f = to_torch("matmul")
    f(torch.randn(8, 4), torch.randn(4, 5))
    assert "c" in f.forward_runner.used.values()


@pytest.mark.parametrize("name", ["softmax", "layernorm", "attention", "cumsum", "conv2d"])
def test_gradcheck_float64(name):
    f = to_torch(name, backend="reference")
    op = f.op
    shapes = {d: 3 for d in op.dims}
    from uol_core.odl.shapes import bind_sizes
    from uol_core.runtime.inputs import random_inputs

    tensors = random_inputs(op, bind_sizes(op, shapes))
    args = [t.double().requires_grad_() for t in tensors.values()]
    assert torch.autograd.gradcheck(lambda *a: f(*a), args)


def test_torch_compile_traces_without_graph_break():
    f = to_torch("softmax")
    g = torch.compile(lambda x: f(x) * 2, fullgraph=True, backend="eager")
    x = torch.randn(5, 7)
    torch.testing.assert_close(g(x), 2 * torch.softmax(x, dim=1))


def test_several_outputs_come_back_as_a_dict():
    f = to_torch("add_layernorm")
    args = [torch.randn(4, 6), torch.randn(4, 6), torch.ones(6), torch.zeros(6)]
    out = f(*args)
    assert set(out) == {d.name for d in f.op.outputs}


def test_swap_modules_keeps_outputs_and_gradients():
    model = nn.Sequential(nn.Linear(12, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 3))
    ours = copy.deepcopy(model)
    assert swap_modules(ours, mlp=False) == ["0+gelu", "2", "3"]
    assert isinstance(ours[0], UolLinear) and isinstance(ours[2], UolLayerNorm)
    x = torch.randn(5, 12)
    torch.testing.assert_close(ours(x), model(x), rtol=1e-5, atol=1e-5)
    model(x).square().sum().backward()
    ours(x).square().sum().backward()
    torch.testing.assert_close(ours[0].weight.grad, model[0].weight.grad.T, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(ours[2].weight.grad, model[2].weight.grad, rtol=1e-4, atol=1e-4)


def test_swap_modules_fuses_an_mlp_into_one_op():
    model = nn.Sequential(nn.Linear(12, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 16),
                          nn.ReLU(), nn.RMSNorm(16), nn.Linear(16, 3, bias=False), nn.Softmax(-1))
    ours = copy.deepcopy(model)
    assert swap_modules(ours) == ["0-6 (mlp)"]
    assert isinstance(ours[0], UolMLP) and isinstance(ours[3], nn.Identity)
    assert isinstance(ours[7], nn.Softmax)  # not supported: stays torch's
    x = torch.randn(2, 5, 12)
    torch.testing.assert_close(ours(x), model(x), rtol=1e-5, atol=1e-5)
    model(x).square().sum().backward()
    ours(x).square().sum().backward()
    mlp = ours[0]
    expected = {"l0_weight": model[0].weight.grad.T, "l0_bias": model[0].bias.grad,
                "l2_weight": model[2].weight.grad, "l2_bias": model[2].bias.grad,
                "l3_weight": model[3].weight.grad.T, "l5_weight": model[5].weight.grad,
                "l6_weight": model[6].weight.grad.T}
    for name, grad in expected.items():
        torch.testing.assert_close(getattr(mlp, name).grad, grad, rtol=1e-4, atol=1e-5)


def test_linear_on_three_dimensional_input():
    layer = UolLinear(8, 4, "silu")
    x = torch.randn(2, 3, 8)
    expected = torch.nn.functional.silu(x @ layer.weight + layer.bias)
    torch.testing.assert_close(layer(x), expected, rtol=1e-5, atol=1e-5)


def test_rows_reach_the_op_without_views_and_other_shapes_keep_theirs():
    """A 2-D input goes to the kernel as it is (a view would be one more backward node per
    call); 3-D inputs are folded into rows and their output unfolded, gradients as torch's."""
    torch.manual_seed(0)
    ref_ln, ref_lin = nn.LayerNorm(16), nn.Linear(16, 8)
    ln, lin = UolLayerNorm(16), UolLinear.from_torch(ref_lin)
    rows = torch.randn(6, 16, requires_grad=True)
    for module in (ln, lin):
        assert type(module(rows).grad_fn).__name__ == "_EagerCallBackward"
    seq = torch.randn(2, 3, 16, requires_grad=True)
    ref_seq = seq.detach().clone().requires_grad_()
    out, want = lin(ln(seq)), ref_lin(ref_ln(ref_seq))
    assert out.shape == want.shape == (2, 3, 8)
    out.square().sum().backward()
    want.square().sum().backward()
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(seq.grad, ref_seq.grad, rtol=1e-4, atol=1e-5)


def test_mlp_backward_saves_hidden_activations_and_skips_unneeded_gradients():
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
    swap_modules(model)
    fn = model[0].fn
    # Recomputing a hidden activation would cost its GEMM again: the MLP saves them.
    assert not any("recomputed although a reduction" in n for n in fn.grad.notes)
    assert "h0" in fn.grad.saved_extra or "z_h0" in fn.grad.saved_extra
    x = torch.randn(5, 8)  # no gradient wanted for the input: its GEMM (dX) is not run
    model(x).sum().backward()
    assert ("l0_weight", "l0_bias", "l2_weight", "l2_bias") in fn._subsets
    assert model[0].l0_weight.grad is not None


def test_training_step_under_torch_compile_matches_eager():
    # The backward is an opaque custom op too: AOT autograd traces it without the kernels.
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 4))
    swap_modules(model)
    compiled = torch.compile(model, fullgraph=True)
    x = torch.randn(6, 8)
    compiled(x).square().sum().backward()
    got = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    model(x).square().sum().backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(got[n], p.grad, rtol=1e-5, atol=1e-6)
