"""Training-scenario matrix: every differentiable library op through `to_torch`, forward and
every input gradient checked against torch autograd (f64 gradcheck on small shapes, f32
tolerances on larger ones), on the reference and on the compiled (auto) backend."""

import pytest
import torch

from uol_core import evaluate, list_ops, load_op
from uol_core.odl.grad import differentiable_inputs
from uol_core.odl.ir import DType, retyped
from uol_core.odl.shapes import bind_sizes
from uol_core.runtime.inputs import random_inputs_in_domain
from uol_core.torch.bridge import to_torch

POSITIVE = {"var", "T"}
OPS = [name for name in list_ops() if differentiable_inputs(load_op(name))]
# Sizes per dimension: small enough for CI, odd on purpose (primes, a non-multiple of 8).
# Each (op, size) on the compiled backend costs a gcc run, so it gets one size, the reference two;
# Triton runs under its interpreter without a GPU (on an H200 the same ops run as GPU kernels).
F32_SIZES = {"auto": [7], "reference": [3, 12], "triton": [5]}


def tensors_for(op, size, seed=0):
    tensors = random_inputs_in_domain(op, bind_sizes(op, {d: size for d in op.dims}), seed=seed)
    return {k: (v.abs() + 0.5 if k in POSITIVE and v.is_floating_point() else v)
            for k, v in tensors.items()}


def scenarios():
    for name in OPS:
        yield pytest.param(name, 3, "f64", "reference", id=f"{name}-3-f64-reference")
        for backend, sizes in F32_SIZES.items():
            for size in sizes:
                yield pytest.param(name, size, "f32", backend, id=f"{name}-{size}-f32-{backend}")


def test_matrix_has_at_least_200_scenarios():
    assert len(list(scenarios())) >= 200


@pytest.mark.parametrize("name, size, dtype, backend", list(scenarios()))
def test_scenario(name, size, dtype, backend):
    f = to_torch(name, backend=backend)
    op = f.op
    tensors = tensors_for(op, size)
    wrt = [n for n in f.inputs if n in f.differentiable]
    if dtype == "f64":
        args = [t.double().requires_grad_() if n in wrt else t for n, t in tensors.items()]
        assert torch.autograd.gradcheck(lambda *a: _flat(f(*a)), args)
        return
    # f32: compare with torch autograd through the f64 reference (independent of our backward).
    leaves = {n: t.clone().requires_grad_() if n in wrt else t for n, t in tensors.items()}
    ref_leaves = {n: t.double().clone().requires_grad_() if n in wrt else t
                  for n, t in tensors.items()}
    ours = _as_dict(op, f(*leaves.values()))
    ref = _as_dict(op, evaluate(retyped(op, DType.f64), **ref_leaves))
    weights = {k: torch.randn_like(v, dtype=torch.float64) for k, v in ref.items()}
    for k in ours:
        torch.testing.assert_close(ours[k].double(), ref[k], rtol=1e-4, atol=1e-4)
    if any(v.requires_grad for v in ref.values()):
        sum((ref[k] * weights[k]).sum() for k in ref).backward()
    if not any(v.requires_grad for v in ours.values()):
        # Piecewise-constant outputs (masks, sign, comparisons): no gradient path; torch's
        # gradient must then be absent or zero everywhere.
        for n in wrt:
            assert not _grad_or_zero(ref_leaves[n]).any(), f"{name}: torch has a gradient for {n}"
        return
    sum((ours[k].double() * weights[k]).sum() for k in ours).backward()
    for n in wrt:  # an input only a mask or comparison reads gets no gradient: zero
        want = _grad_or_zero(ref_leaves[n])
        scale = max(want.abs().max().item(), 1.0)
        torch.testing.assert_close(_grad_or_zero(leaves[n]).double(), want,
                                   rtol=1e-3, atol=1e-4 * scale)


def _grad_or_zero(leaf):
    return leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)


def _as_dict(op, value):
    if isinstance(value, dict):
        return value
    return {op.outputs[0].name: value}


def _flat(value):
    return tuple(value.values()) if isinstance(value, dict) else value
