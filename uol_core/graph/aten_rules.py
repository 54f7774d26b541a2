"""Mapping rules: one function per ATen op, turning an exported node into an ODL node.

A rule raises Unmapped (with the reason) for a form it does not cover; the importer then keeps
the node in torch and shows that reason. Row-wise ops (linear, layer_norm, softmax, last-axis
reductions) run on the 2-D "flat" view [rows, C]; elementwise ops run in whichever form their
operands already have, so a linear, its bias-free epilogue and a residual add stay adjacent
and can fuse.
"""

from __future__ import annotations

import torch
from torch import fx

from uol_core.graph import aten_map as A
from uol_core.graph.aten_common import constant, elementwise, number_text
from uol_core.graph.aten_conv import (
    adaptive_avg_pool2d,
    batch_norm,
    conv2d,
    conv_transpose2d,
    max_pool2d,
)
from uol_core.graph.aten_map import Unmapped
from uol_core.graph.aten_text import TEXT_RULES, repeat_heads, zero_unseen_rows
from uol_core.graph.aten_vision import VISION_RULES
from uol_core.graph.export_import import ExportImporter, _arg
from uol_core.odl.ir import GELU_FORMS
from uol_core.ops import op_text

UNARY = {
    "relu": "relu({X})", "silu": "silu({X})", "sigmoid": "sigmoid({X})", "tanh": "tanh({X})",
    "exp": "exp({X})", "log": "log({X})", "sqrt": "sqrt({X})", "rsqrt": "rsqrt({X})",
    "abs": "abs({X})", "neg": "-{X}", "sin": "sin({X})", "cos": "cos({X})", "erf": "erf({X})",
    "floor": "floor({X})", "ceil": "ceil({X})", "reciprocal": "1.0 / {X}",
    "hardsigmoid": "min(max({X} / 6.0 + 0.5, 0.0), 1.0)",
    "hardswish": "{X} * min(max({X} / 6.0 + 0.5, 0.0), 1.0)",
    "mish": "{X} * tanh(where({X} > 20.0, {X}, log(1.0 + exp({X}))))",
    "log_sigmoid": "-where({X} < -20.0, -{X}, log(1.0 + exp(-{X})))",
}
BINARY = {"add": "{A} + {B}", "sub": "{A} - {B}", "mul": "{A} * {B}", "div": "{A} / {B}",
          "maximum": "max({A}, {B})", "minimum": "min({A}, {B})", "rsub": "{B} - {A}",
          "pow": "{A} ** {B}"}


def unary(kind: str):
    def rule(imp: ExportImporter, n: fx.Node) -> None:
        elementwise(imp, n, UNARY[kind], {"X": n.args[0]})
    return rule


def gelu(imp: ExportImporter, n: fx.Node) -> None:
    approximate = _arg(n, 1, "approximate", "none")
    fn = GELU_FORMS.get(approximate)
    if fn is None:
        raise Unmapped(f"gelu with approximate={approximate!r} has no ODL form")
    elementwise(imp, n, f"{fn}({{X}})", {"X": n.args[0]})


def binary(kind: str):
    def rule(imp: ExportImporter, n: fx.Node) -> None:
        a, b = n.args[0], n.args[1]
        alpha = n.kwargs.get("alpha", 1)
        if n.kwargs.get("rounding_mode") is not None:
            raise Unmapped(f"division with rounding_mode={n.kwargs['rounding_mode']!r}")
        operands, reads = {}, {}
        for key, value in (("A", a), ("B", b)):
            if isinstance(value, fx.Node):
                operands[key], reads[key] = value, "{" + key + "}"
            else:
                reads[key] = number_text(value)
        if alpha != 1:
            reads["B"] = f"{number_text(alpha)} * {reads['B']}"
        expr = BINARY[kind].replace("{A}", f"({reads['A']})").replace("{B}", f"({reads['B']})")
        elementwise(imp, n, expr, operands)
    return rule


def clamp(imp: ExportImporter, n: fx.Node) -> None:
    lo, hi = _arg(n, 1, "min", None), _arg(n, 2, "max", None)
    expr = "{X}"
    if lo is not None:
        expr = f"max({expr}, {number_text(lo)})"
    if hi is not None:
        expr = f"min({expr}, {number_text(hi)})"
    elementwise(imp, n, expr, {"X": n.args[0]})


def hardtanh(imp: ExportImporter, n: fx.Node) -> None:
    lo, hi = _arg(n, 1, "min_val", -1.0), _arg(n, 2, "max_val", 1.0)
    elementwise(imp, n, f"min(max({{X}}, {number_text(lo)}), {number_text(hi)})", {"X": n.args[0]})


def leaky_relu(imp: ExportImporter, n: fx.Node) -> None:
    slope = number_text(_arg(n, 1, "negative_slope", 0.01))
    elementwise(imp, n, f"where({{X}} > 0.0, {{X}}, {slope} * {{X}})", {"X": n.args[0]})


def elu(imp: ExportImporter, n: fx.Node) -> None:
    alpha = number_text(_arg(n, 1, "alpha", 1.0))
    elementwise(imp, n, f"where({{X}} > 0.0, {{X}}, {alpha} * (exp({{X}}) - 1.0))", {"X": n.args[0]})


def softplus(imp: ExportImporter, n: fx.Node) -> None:
    beta, threshold = float(_arg(n, 1, "beta", 1.0)), number_text(_arg(n, 2, "threshold", 20.0))
    expr = f"where({beta!r} * {{X}} > {threshold}, {{X}}, log(1.0 + exp({beta!r} * {{X}})) / {beta!r})"
    elementwise(imp, n, expr, {"X": n.args[0]})


def pow_scalar(imp: ExportImporter, n: fx.Node) -> None:
    exponent = n.args[1]
    if not isinstance(n.args[0], fx.Node):
        raise Unmapped("a number raised to a tensor power")
    expr = "{X} * {X}" if exponent == 2 else f"{{X}} ** {number_text(exponent)}"
    elementwise(imp, n, expr, {"X": n.args[0]})


def where(imp: ExportImporter, n: fx.Node) -> None:
    cond, a, b = n.args[:3]
    if cond.name not in imp.consts:
        raise Unmapped("the condition is computed at run time (a bool tensor)")
    imp.consts[cond.name] = imp.consts[cond.name].float()
    operands, reads = {"C": cond}, {}
    for key, value in (("A", a), ("B", b)):
        if isinstance(value, fx.Node):
            operands[key], reads[key] = value, "{" + key + "}"
        else:
            reads[key] = number_text(value)
    elementwise(imp, n, f"where({{C}} != 0.0, {reads['A']}, {reads['B']})", operands)


def linear(imp: ExportImporter, n: fx.Node) -> None:
    x, weight, bias = n.args[0], n.args[1], _arg(n, 2, "bias", None)
    if len(imp.shape(x)) < 2:
        raise Unmapped("a 1-D input")
    w = imp.param(f"{weight.name}_t", constant(imp, weight, "weight").t())  # [K, N], folded once
    if bias is None:
        imp.odl(n, op_text("matmul"), {"A": imp.tensor(x, "flat"), "B": w}, "flat", "matmul")
        return
    b = imp.param(bias.name, constant(imp, bias, "bias"))
    imp.odl(n, op_text("linear_bias"), {"X": imp.tensor(x, "flat"), "W": w, "b": b}, "flat",
            "linear_bias")


def matmul(imp: ExportImporter, n: fx.Node) -> None:
    a, b = n.args[:2]
    sa, sb = imp.shape(a), imp.shape(b)
    if b.name in imp.consts and len(sb) == 2 and len(sa) >= 2:
        w = imp.param(f"{b.name}_mat", imp.consts[b.name].float())
        imp.odl(n, op_text("matmul"), {"A": imp.tensor(a, "flat"), "B": w}, "flat", "matmul")
        return
    if len(sa) != len(sb) or len(sa) < 2 or sa[:-2] != sb[:-2] or sa[-1] != sb[-2]:
        raise Unmapped(f"operands {list(sa)} @ {list(sb)} (batched with equal batch axes is mapped)")
    idx = A.indices(len(sa) - 2)
    lead = "".join(f"{i}, " for i in idx)
    out = imp.shape(n)
    text = (f"op bmm_{len(sa)}d(P: {A.shape_text(sa)}, Q: {A.shape_text(sb)}) -> Y: {A.shape_text(out)}:\n"
            f"    Y[{lead}m, n] = sum[k](P[{lead}m, k] * Q[{lead}k, n])\n")
    imp.odl(n, text, {"P": imp.tensor(a), "Q": imp.tensor(b)}, "nd")


def layer_norm(imp: ExportImporter, n: fx.Node) -> None:
    x, normalized = n.args[0], list(n.args[1])
    weight, bias, eps = _arg(n, 2, "weight", None), _arg(n, 3, "bias", None), _arg(n, 4, "eps", 1e-5)
    if len(normalized) != 1:
        raise Unmapped(f"normalized_shape {normalized} (the last axis alone is mapped)")
    c = normalized[0]
    gamma = constant(imp, weight, "weight") if weight is not None else torch.ones(c)
    beta = constant(imp, bias, "bias") if bias is not None else torch.zeros(c)
    ins = {"X": imp.tensor(x, "flat"), "gamma": imp.param(f"{n.name}_gamma", gamma),
           "beta": imp.param(f"{n.name}_beta", beta)}
    text = op_text("layernorm").replace("1e-5", repr(float(eps)))
    imp.odl(n, text, ins, "flat", "layernorm" if eps == 1e-5 else "inline")


def reduction(kind: str):
    def rule(imp: ExportImporter, n: fx.Node) -> None:
        x = n.args[0]
        dims = _arg(n, 1, "dim", None)
        dims = [dims] if isinstance(dims, int) else list(dims or [])
        keepdim = bool(_arg(n, 2, "keepdim", False))
        shape = imp.shape(x)
        if len(shape) >= 2 and keepdim and [d % len(shape) for d in dims] == [len(shape) - 1]:
            flat = ExportImporter.flat_shape(shape)
            text, _ = A.reduce(kind, flat, [1], True)
            imp.odl(n, text, {"X": imp.tensor(x, "flat")}, "flat")
            return
        text, _ = A.reduce(kind, shape, dims, keepdim)
        imp.odl(n, text, {"X": imp.tensor(x)}, "nd")
    return rule


def softmax(library: str):
    def rule(imp: ExportImporter, n: fx.Node) -> None:
        x, dim = n.args[0], n.args[1]
        if dim % len(imp.shape(x)) != len(imp.shape(x)) - 1:
            raise Unmapped(f"dim={dim} (the last axis is mapped)")
        imp.odl(n, op_text(library), {"X": imp.tensor(x, "flat")}, "flat", library)
    return rule


def sdpa(imp: ExportImporter, n: fx.Node) -> None:
    q, k, v = n.args[:3]
    mask, dropout = _arg(n, 3, "attn_mask", None), _arg(n, 4, "dropout_p", 0.0)
    causal, scale = _arg(n, 5, "is_causal", False), _arg(n, 6, "scale", None)
    sq, sk = imp.shape(q), imp.shape(k)
    gqa = bool(_arg(n, 7, "enable_gqa", False)) and len(sq) == len(sk) == 4 and sq[1] % sk[1] == 0
    if dropout:
        raise Unmapped(f"dropout_p={dropout}")
    if (len(sq) != 4 or sk != imp.shape(v) or sq[0] != sk[0] or (sq[1] != sk[1] and not gqa)
            or sq[3] != sk[3]):
        raise Unmapped(f"q {list(sq)}, k {list(sk)}: [B, H, S, D] with equal heads (or grouped, "
                       "enable_gqa) is mapped")
    if causal and sq[2] != sk[2]:
        raise Unmapped("causal attention with different query and key lengths")
    ins = {"Q": imp.tensor(q), "K": imp.tensor(k), "V": imp.tensor(v)}
    if sq[1] != sk[1]:  # enable_gqa: key/value head g serves query heads g*R .. g*R + R - 1
        ins["K"], ins["V"] = (repeat_heads(imp, ins[t], sk, sq[1] // sk[1]) for t in "KV")
        sk = (sk[0], sq[1], sk[2], sk[3])
    # a bool mask computed at run time is read as it is (where false, the key is left out)
    bool_mask = mask is not None and mask.name not in imp.consts and mask.meta["val"].dtype == torch.bool
    if mask is not None:
        ins["M"] = imp.tensor(mask) if bool_mask else _additive_mask(imp, mask)
    imp.odl(n, A.attention(sq, sk, scale, bool(causal), imp.shape(mask) if mask is not None else None,
                           bool_mask), ins, "nd")
    if bool_mask:
        zero_unseen_rows(imp, n, sq, ins["M"], imp.shape(mask))


def _additive_mask(imp: ExportImporter, mask: fx.Node) -> str:
    """The graph tensor of an attention mask as scores to add: a float mask as it is; a bool
    mask known at import (built from sizes or buffers: causal, padding) as 0 where attention
    is allowed and -inf where not, which is what torch adds."""
    value = mask.meta["val"]
    if mask.name in imp.consts and value.dtype == torch.bool:
        allowed = imp.consts[mask.name]
        additive = torch.zeros(allowed.shape).masked_fill(~allowed, float("-inf"))
        return imp.param(f"{mask.name}_additive", additive)
    if value.dtype != torch.float32:
        raise Unmapped(f"a {str(value.dtype).replace('torch.', '')} attn_mask computed at run time "
                       "(a float mask, or a bool mask built from sizes or buffers, is mapped)")
    return imp.tensor(mask)


def repeat_interleave(imp: ExportImporter, n: fx.Node) -> None:
    x, repeats, dim = n.args[0], n.args[1], _arg(n, 2, "dim", None)
    shape = imp.shape(x)
    if not isinstance(repeats, int) or dim is None or len(shape) != 4 or dim % 4 != 1:
        raise Unmapped("repeat_interleave is mapped for an int repeat along axis 1 of a 4-D tensor")
    text, _ = A.repeat_interleave_heads(shape, repeats)
    imp.odl(n, text, {"X": imp.tensor(x)}, "nd", reshape_to=imp.shape(n))


RULES = {
    **{k: unary(k) for k in UNARY}, **{k: binary(k) for k in BINARY},
    "gelu": gelu, "clamp": clamp, "hardtanh": hardtanh, "leaky_relu": leaky_relu, "elu": elu,
    "softplus": softplus, "pow": None, "where": where, "linear": linear, "matmul": matmul,
    "mm": matmul, "bmm": matmul, "layer_norm": layer_norm, "batch_norm": batch_norm,
    "_native_batch_norm_legit_no_training": batch_norm,
    "conv2d": conv2d, "conv_transpose2d": conv_transpose2d, "max_pool2d": max_pool2d,
    "adaptive_avg_pool2d": adaptive_avg_pool2d, "mean": reduction("mean"), "sum": reduction("sum"),
    "amax": reduction("max"), "amin": reduction("min"), "softmax": softmax("softmax"),
    "_softmax": softmax("softmax"), "log_softmax": softmax("log_softmax"),
    "_log_softmax": softmax("log_softmax"), "scaled_dot_product_attention": sdpa,
    "repeat_interleave": repeat_interleave, **TEXT_RULES, **VISION_RULES,
}


def _pow(imp: ExportImporter, n: fx.Node) -> None:
    """pow.Tensor_Scalar (x ** 2 in RMSNorm) or pow.Tensor_Tensor."""
    if isinstance(n.args[1], fx.Node):
        binary("pow")(imp, n)
    else:
        pow_scalar(imp, n)


RULES["pow"] = _pow
