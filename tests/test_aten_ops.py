"""Core ATen operator library: each ODL op against the torch op it stands for, at small shapes.

The ODL op runs in the reference evaluator (f32); torch computes in float64 from the same
inputs. Inputs are drawn per op: `pos` for ops defined on positive numbers, `prob` for (0, 1).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from uol_core.ops import load_op
from uol_core.runtime.reference import evaluate

SHAPES_2D = [(1, 1), (3, 5), (7, 16)]


def _u(fn, kind="any"):
    return {"inputs": lambda m, n: {"X": ((m, n), kind)}, "ref": lambda X: fn(X)}


def _b(fn, kind_b="any", kind_a="any"):
    return {"inputs": lambda m, n: {"A": ((m, n), kind_a), "B": ((m, n), kind_b)},
            "ref": lambda A, B: fn(A, B)}


CASES = {
    "relu": _u(torch.relu), "gelu": _u(F.gelu), "silu": _u(F.silu), "sigmoid": _u(torch.sigmoid),
    "tanh": _u(torch.tanh), "exp": _u(torch.exp), "expm1": _u(torch.expm1),
    "log": _u(torch.log, "pos"), "log1p": _u(torch.log1p, "pos"), "sqrt": _u(torch.sqrt, "pos"),
    "rsqrt": _u(torch.rsqrt, "pos"), "abs": _u(torch.abs), "neg": _u(torch.neg),
    "sin": _u(torch.sin), "cos": _u(torch.cos), "erf": _u(torch.erf), "floor": _u(torch.floor),
    "ceil": _u(torch.ceil), "trunc": _u(torch.trunc), "sign": _u(torch.sign),
    "reciprocal": _u(torch.reciprocal, "pos"), "square": _u(torch.square),
    "hardsigmoid": _u(F.hardsigmoid), "hardswish": _u(F.hardswish), "hardtanh": _u(F.hardtanh),
    "relu6": _u(F.relu6), "clamp_unit": _u(lambda x: torch.clamp(x, -0.5, 0.5)), "elu": _u(F.elu),
    "celu": _u(lambda x: F.celu(x, 0.5)), "selu": _u(F.selu), "softplus": _u(F.softplus),
    "mish": _u(F.mish), "log_sigmoid": _u(F.logsigmoid), "softsign": _u(F.softsign),
    "tanhshrink": _u(F.tanhshrink), "hardshrink": _u(F.hardshrink), "softshrink": _u(F.softshrink),
    "threshold": _u(lambda x: F.threshold(x, 0.1, 20.0)), "logit": _u(torch.logit, "prob"),
    "sigmoid_grad_form": _u(lambda x: torch.sigmoid(x) * (1 - torch.sigmoid(x))),
    "add": _b(torch.add), "sub": _b(torch.sub), "mul": _b(torch.mul), "div": _b(torch.div, "pos"),
    "maximum": _b(torch.maximum), "minimum": _b(torch.minimum),
    "pow_tensor": _b(torch.pow, "any", "pos"), "lerp": _b(lambda a, b: torch.lerp(a, b, 0.25)),
    "sq_diff": _b(lambda a, b: (a - b) ** 2), "gt_mask": _b(lambda a, b: (a > b).double()),
    "where_select": {"inputs": lambda m, n: {"C": ((m, n), "mask"), "A": ((m, n), "any"),
                                             "B": ((m, n), "any")},
                     "ref": lambda C, A, B: torch.where(C.bool(), A, B)},
    "masked_fill": {"inputs": lambda m, n: {"X": ((m, n), "any"), "K": ((m, n), "mask")},
                    "ref": lambda X, K: X.masked_fill(K.bool(), -1e9)},
    "addmm": {"inputs": lambda m, n: {"C": ((m, n), "any"), "A": ((m, 4), "any"), "B": ((4, n), "any")},
              "ref": lambda C, A, B: torch.addmm(C, A, B)},
    "baddbmm": {"inputs": lambda m, n: {"C": ((2, m, n), "any"), "A": ((2, m, 3), "any"),
                                        "W": ((2, 3, n), "any")},
                "ref": lambda C, A, W: torch.baddbmm(C, A, W)},
    "row_min": _u(lambda x: x.amin(-1)), "row_prod": _u(lambda x: x.prod(-1)),
    "row_norm": _u(lambda x: torch.linalg.vector_norm(x, dim=-1)),
    "row_amax_keepdim": _u(lambda x: x.amax(-1, keepdim=True)), "sum_all": _u(torch.sum),
    "mean_dim0": _u(lambda x: x.mean(0)), "select_row0": _u(lambda x: x[0]),
    "tril": _u(torch.tril), "triu": _u(torch.triu), "roll_cols": _u(lambda x: torch.roll(x, 1, -1)),
    "constant_pad_cols": _u(lambda x: F.pad(x, (2, 2))),
    "repeat_cols": _u(lambda x: x.repeat(1, 2)), "cumprod": _u(lambda x: torch.cumprod(x, -1)),
    "logcumsumexp": _u(lambda x: torch.logcumsumexp(x, -1)),
    "cat_cols": {"inputs": lambda m, n: {"A": ((m, n), "any"), "B": ((m, 3), "any")},
                 "ref": lambda A, B: torch.cat([A, B], -1)},
    "cat_rows": {"inputs": lambda m, n: {"A": ((m, n), "any"), "B": ((2, n), "any")},
                 "ref": lambda A, B: torch.cat([A, B], 0)},
    "expand_rows": {"inputs": lambda m, n: {"X": ((1, n), "any"), "Z": ((m, n), "any")},
                    "ref": lambda X, Z: X.expand(Z.shape[0], -1)},
    "diagonal": {"inputs": lambda m, n: {"X": ((n, n), "any")}, "ref": torch.diagonal},
    "slice_cols": {"inputs": lambda m, n: {"X": ((m, n + 2), "any")}, "ref": lambda X: X[:, 1:-1]},
    "slice_step2": {"inputs": lambda m, n: {"X": ((m, 2 * n), "any")}, "ref": lambda X: X[:, ::2]},
    "permute_021": {"inputs": lambda m, n: {"X": ((2, m, n), "any")}, "ref": lambda X: X.permute(0, 2, 1)},
    "permute_0213": {"inputs": lambda m, n: {"X": ((2, m, n, 3), "any")},
                     "ref": lambda X: X.permute(0, 2, 1, 3)},
    "instance_norm": {"inputs": lambda m, n: {"X": ((2, m, n + 1), "any")}, "ref": F.instance_norm},
    "avg_pool1d": {"inputs": lambda m, n: {"X": ((2, m, 2 * n), "any")}, "ref": lambda X: F.avg_pool1d(X, 2)},
    "max_pool1d": {"inputs": lambda m, n: {"X": ((2, m, 2 * n), "any")}, "ref": lambda X: F.max_pool1d(X, 2)},
    "l1_loss": {"inputs": lambda m, n: {"P": ((m, n), "any"), "T": ((m, n), "any")}, "ref": F.l1_loss},
    "smooth_l1_loss": {"inputs": lambda m, n: {"P": ((m, n), "any"), "T": ((m, n), "any")},
                       "ref": F.smooth_l1_loss},
    "bce_with_logits": {"inputs": lambda m, n: {"X": ((m, n), "any"), "T": ((m, n), "prob")},
                        "ref": F.binary_cross_entropy_with_logits},
    "kl_div": {"inputs": lambda m, n: {"X": ((m, n), "any"), "T": ((m, n), "prob")},
               "ref": lambda X, T: F.kl_div(X, T, reduction="mean")},
    "conv_transpose2d_s2": {
        "inputs": lambda m, n: {"X": ((1, 2, m, n), "any"), "F": ((2, 3, 2, 2), "any")},
        "ref": lambda X, F_: F.conv_transpose2d(X, F_, stride=2).reshape(
            1, 3, X.shape[2], 2, X.shape[3], 2)},
    "conv2d_stride2": {"inputs": lambda m, n: {"X": ((1, 2, 2 * m + 1, 2 * n + 1), "any"),
                                               "F": ((3, 2, 3, 3), "any")},
                       "ref": lambda X, F_: F.conv2d(X, F_, stride=2)},
}
CASES["row_var"] = {"inputs": lambda m, n: {"X": ((m, n + 1), "any")}, "ref": lambda X: X.var(-1)}
CASES["row_std"] = {"inputs": lambda m, n: {"X": ((m, n + 1), "any")}, "ref": lambda X: X.std(-1)}
CASES["replication_pad_cols"] = {"inputs": lambda m, n: {"X": ((m, n + 1), "any")},
                                 "ref": lambda X: F.pad(X, (1, 1), mode="replicate")}
CASES["reflection_pad_cols"] = {"inputs": lambda m, n: {"X": ((m, n + 1), "any")},
                                "ref": lambda X: F.pad(X, (1, 1), mode="reflect")}


def _draw(shape, kind, gen):
    x = torch.randn(shape, generator=gen)
    if kind == "pos":
        return x.abs() + 0.5
    if kind == "prob":
        return torch.rand(shape, generator=gen) * 0.9 + 0.05
    if kind == "mask":
        return (x > 0).float()
    return x


def test_every_case_names_a_library_op():
    for name in CASES:
        assert load_op(name).name == name


@pytest.mark.parametrize("name", sorted(CASES))
def test_aten_op_matches_torch(name):
    case, gen = CASES[name], torch.Generator().manual_seed(0)
    op = load_op(name)
    for m, n in SHAPES_2D:
        inputs = {k: _draw(shape, kind, gen) for k, (shape, kind) in case["inputs"](m, n).items()}
        got = evaluate(op, **inputs)
        want = case["ref"](*[v.double() for v in inputs.values()])
        assert got.shape == want.shape, (name, m, n)
        scale = max(1.0, want.abs().max().item())
        assert (got.double() - want).abs().max().item() <= 2e-5 * scale, (name, m, n)
