"""Mapping rules: one function per ATen op, turning an exported node into an ODL node.

A rule raises Unmapped (with the reason) for a form it does not cover; the importer then keeps
the node in torch and shows that reason. Row-wise ops (linear, layer_norm, softmax, last-axis
reductions) run on the 2-D "flat" view [rows, C]; elementwise ops run in whichever form their
operands already have, so a linear, its bias-free epilogue and a residual add stay adjacent
and can fuse.
"""

from __future__ import annotations

import operator

import torch
from torch import fx

from uol_core.graph import aten_map as A
from uol_core.graph.aten_map import Unmapped
from uol_core.graph.export_import import ExportImporter, _arg, packet
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


def _number(value) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Unmapped(f"argument {value!r} is not a number")
    return repr(float(value))


def elementwise(imp: ExportImporter, n: fx.Node, expr: str, operands: dict[str, fx.Node]) -> None:
    """`n` = expr over tensor operands (broadcast), in the form its operands already have."""
    out = imp.shape(n)
    flat_ok = len(out) >= 2 and all(_flat_broadcasts(imp.shape(a), out) for a in operands.values())
    live = [a for a in operands.values() if a.name not in imp.consts]
    if flat_ok and (not live or all("flat" in imp.forms[a.name] for a in live)
                    or not all("nd" in imp.forms[a.name] for a in live)):
        form = "flat"
    else:
        form = "nd"
    shape_of = (lambda s: ExportImporter.flat_shape(s)) if form == "flat" else (lambda s: s)
    shapes = {k: shape_of(imp.shape(a)) for k, a in operands.items()}
    text = A.elementwise(f"ew_{n.name}", expr, shape_of(out), shapes)
    imp.odl(n, text, {k: imp.tensor(a, form) for k, a in operands.items()}, form)


def _flat_broadcasts(shape: tuple[int, ...], out: tuple[int, ...]) -> bool:
    padded = (1,) * (len(out) - len(shape)) + tuple(shape)
    lead_ok = padded[:-1] == out[:-1] or all(s == 1 for s in padded[:-1])
    return lead_ok and padded[-1] in (out[-1], 1)


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
                reads[key] = _number(value)
        if alpha != 1:
            reads["B"] = f"{_number(alpha)} * {reads['B']}"
        expr = BINARY[kind].replace("{A}", f"({reads['A']})").replace("{B}", f"({reads['B']})")
        elementwise(imp, n, expr, operands)
    return rule


def clamp(imp: ExportImporter, n: fx.Node) -> None:
    lo, hi = _arg(n, 1, "min", None), _arg(n, 2, "max", None)
    expr = "{X}"
    if lo is not None:
        expr = f"max({expr}, {_number(lo)})"
    if hi is not None:
        expr = f"min({expr}, {_number(hi)})"
    elementwise(imp, n, expr, {"X": n.args[0]})


def hardtanh(imp: ExportImporter, n: fx.Node) -> None:
    lo, hi = _arg(n, 1, "min_val", -1.0), _arg(n, 2, "max_val", 1.0)
    elementwise(imp, n, f"min(max({{X}}, {_number(lo)}), {_number(hi)})", {"X": n.args[0]})


def leaky_relu(imp: ExportImporter, n: fx.Node) -> None:
    slope = _number(_arg(n, 1, "negative_slope", 0.01))
    elementwise(imp, n, f"where({{X}} > 0.0, {{X}}, {slope} * {{X}})", {"X": n.args[0]})


def elu(imp: ExportImporter, n: fx.Node) -> None:
    alpha = _number(_arg(n, 1, "alpha", 1.0))
    elementwise(imp, n, f"where({{X}} > 0.0, {{X}}, {alpha} * (exp({{X}}) - 1.0))", {"X": n.args[0]})


def softplus(imp: ExportImporter, n: fx.Node) -> None:
    beta, threshold = float(_arg(n, 1, "beta", 1.0)), _number(_arg(n, 2, "threshold", 20.0))
    expr = f"where({beta!r} * {{X}} > {threshold}, {{X}}, log(1.0 + exp({beta!r} * {{X}})) / {beta!r})"
    elementwise(imp, n, expr, {"X": n.args[0]})


def pow_scalar(imp: ExportImporter, n: fx.Node) -> None:
    exponent = n.args[1]
    if not isinstance(n.args[0], fx.Node):
        raise Unmapped("a number raised to a tensor power")
    expr = "{X} * {X}" if exponent == 2 else f"{{X}} ** {_number(exponent)}"
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
            reads[key] = _number(value)
    elementwise(imp, n, f"where({{C}} != 0.0, {reads['A']}, {reads['B']})", operands)


def _const(imp: ExportImporter, n, what: str) -> torch.Tensor | None:
    if n is None:
        return None
    if n.name not in imp.consts:
        raise Unmapped(f"the {what} is computed at run time, not a parameter")
    return imp.consts[n.name].float()


def linear(imp: ExportImporter, n: fx.Node) -> None:
    x, weight, bias = n.args[0], n.args[1], _arg(n, 2, "bias", None)
    if len(imp.shape(x)) < 2:
        raise Unmapped("a 1-D input")
    w = imp.param(f"{weight.name}_t", _const(imp, weight, "weight").t())  # [K, N], folded once
    if bias is None:
        imp.odl(n, op_text("matmul"), {"A": imp.tensor(x, "flat"), "B": w}, "flat", "matmul")
        return
    b = imp.param(bias.name, _const(imp, bias, "bias"))
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
    gamma = _const(imp, weight, "weight") if weight is not None else torch.ones(c)
    beta = _const(imp, bias, "bias") if bias is not None else torch.zeros(c)
    ins = {"X": imp.tensor(x, "flat"), "gamma": imp.param(f"{n.name}_gamma", gamma),
           "beta": imp.param(f"{n.name}_beta", beta)}
    text = op_text("layernorm").replace("1e-5", repr(float(eps)))
    imp.odl(n, text, ins, "flat", "layernorm" if eps == 1e-5 else "inline")


# batch_norm(input, weight, bias, mean, var, training, momentum, eps, cudnn) and the form a
# functionalised program has, _native_batch_norm_legit_no_training(input, weight, bias, mean,
# var, momentum, eps) -> (out, save_mean, save_invstd): where each keeps its epsilon
BATCH_NORMS = {"batch_norm": 7, "_native_batch_norm_legit_no_training": 6}


def _is_training(n: fx.Node) -> bool:
    return packet(n.target) == "batch_norm" and bool(_arg(n, 5, "training", False))


def _bn_scale_shift(imp: ExportImporter, n: fx.Node) -> tuple[torch.Tensor, torch.Tensor]:
    """An inference batch norm as y = x * scale + shift, per channel."""
    _, weight, bias, mean, var = n.args[:5]
    if _is_training(n):
        raise Unmapped("batch norm in training mode (batch statistics)")
    eps = float(_arg(n, BATCH_NORMS[packet(n.target)], "eps", 1e-5))
    scale = torch.rsqrt(_const(imp, var, "running variance") + eps)
    if weight is not None:
        scale = scale * _const(imp, weight, "weight")
    shift = -_const(imp, mean, "running mean") * scale
    if bias is not None:
        shift = shift + _const(imp, bias, "bias")
    return scale, shift


def _foldable_batch_norm(imp: ExportImporter, conv: fx.Node) -> fx.Node | None:
    """The inference batch norm that is `conv`'s only reader, with constant statistics and
    affine terms, or None: such a norm folds into the convolution's weight and bias."""
    if len(conv.users) != 1:
        return None
    bn = next(iter(conv.users))
    if packet(bn.target) not in BATCH_NORMS or bn.args[0] is not conv or _is_training(bn):
        return None
    if packet(bn.target) != "batch_norm" and not _only_first_item_read(bn):
        return None
    if len(bn.args) < 5 or bn.args[3] is None or bn.args[4] is None:
        return None
    terms = [a for a in bn.args[1:5] if a is not None]
    return bn if all(isinstance(a, fx.Node) and a.name in imp.consts for a in terms) else None


def batch_norm(imp: ExportImporter, n: fx.Node) -> None:
    """Inference batch norm: folded into the convolution before it when it is that
    convolution's only reader (`conv2d`), else a per-channel scale and shift. The functional
    form returns a tuple whose statistics (items 1, 2) an inference program never reads."""
    if packet(n.target) != "batch_norm":
        if not _only_first_item_read(n):
            raise Unmapped("its saved statistics (items 1 and 2) are read")
        imp.unpacked.add(n.name)  # mapped below, or absorbed; an Unmapped undoes it in visit
    if n.name in imp.absorbed:
        imp.forms[n.name] = dict(imp.forms[n.args[0].name])
        return
    x = n.args[0]
    scale, shift = _bn_scale_shift(imp, n)
    channels = imp.shape(x)[1]
    rank = len(imp.shape(x))
    text = A.elementwise(f"bn_{n.name}", "{X} * {S} + {T}", imp.shape(x),
                         {"X": imp.shape(x), "S": (channels,) + (1,) * (rank - 2),
                          "T": (channels,) + (1,) * (rank - 2)})
    ins = {"X": imp.tensor(x), "S": imp.param(f"{n.name}_scale", scale.reshape(-1, *[1] * (rank - 2))),
           "T": imp.param(f"{n.name}_shift", shift.reshape(-1, *[1] * (rank - 2)))}
    imp.odl(n, text, ins, "nd")


def _only_first_item_read(n: fx.Node) -> bool:
    return all(u.target is operator.getitem and u.args[1] == 0 for u in n.users)


def _view(imp: ExportImporter, src: str, method: str, args: list, shape: tuple[int, ...]) -> str:
    """A torch view node `src.method(args)` (zero-copy where the layout allows)."""
    from uol_core.graph.format import Node, TensorSpec

    out = imp.fresh(f"{src}_{method}")
    imp.nodes.append(Node(out, "torch", source=f"method:{method}", outputs={"out": out},
                          args=[{"tensor": src}, list(args)], fn=getattr(torch.Tensor, method),
                          label="view"))
    imp.shapes[out] = TensorSpec(tuple(shape), "f32")
    return out


def patchify(imp: ExportImporter, n: fx.Node, x: fx.Node, weight: fx.Node, bias) -> bool:
    """A conv whose stride equals its kernel, unpadded (a ViT patch embedding), as a GEMM over
    the patches: the patches are a permutation of the input (one copy), the GEMM is the
    backend's best kernel, while a direct conv of a 16x16 kernel has little reuse to block."""
    stride = A.pair(_arg(n, 3, "stride", 1), "stride")
    kernel = tuple(imp.shape(weight)[2:])
    if (stride != kernel or A.pair(_arg(n, 4, "padding", 0), "padding") != (0, 0)
            or A.pair(_arg(n, 5, "dilation", 1), "dilation") != (1, 1) or _arg(n, 6, "groups", 1) != 1
            or kernel == (1, 1)):
        return False
    batch, channels, height, width = imp.shape(x)
    (kh, kw), cout = kernel, imp.shape(weight)[0]
    if height % kh or width % kw:
        return False
    ho, wo = height // kh, width // kw
    grid = _view(imp, imp.tensor(x), "reshape", [batch, channels, ho, kh, wo, kw],
                 (batch, channels, ho, kh, wo, kw))
    moved = _view(imp, grid, "permute", [0, 2, 4, 1, 3, 5], (batch, ho, wo, channels, kh, kw))
    patches = _view(imp, moved, "reshape", [batch * ho * wo, channels * kh * kw],
                    (batch * ho * wo, channels * kh * kw))
    w = imp.param(f"{weight.name}_patches", _const(imp, weight, "weight").reshape(cout, -1).t())
    if bias is None:
        imp.odl(n, op_text("matmul"), {"A": patches, "B": w}, "flat", "matmul",
                reshape_to=(batch, ho, wo, cout))
    else:
        imp.odl(n, op_text("linear_bias"), {"X": patches, "W": w,
                                            "b": imp.param(bias.name, _const(imp, bias, "bias"))},
                "flat", "linear_bias", reshape_to=(batch, ho, wo, cout))
    imp.forms[n.name] = {"nd": _view(imp, imp.forms[n.name]["nd"], "permute", [0, 3, 1, 2],
                                     (batch, cout, ho, wo))}
    return True


def conv2d(imp: ExportImporter, n: fx.Node) -> None:
    x, weight = n.args[:2]
    bias = _arg(n, 2, "bias", None)
    if len(imp.shape(x)) != 4:
        raise Unmapped("an unbatched (3-D) input")
    if weight.name in imp.consts and patchify(imp, n, x, weight, bias):
        return
    filt, shift = _const(imp, weight, "weight"), _const(imp, bias, "bias")
    bn = _foldable_batch_norm(imp, n)
    if bn is not None:  # conv then norm is one conv: W * scale, b * scale + shift (per channel)
        scale, bn_shift = _bn_scale_shift(imp, bn)
        filt = filt * scale.reshape(-1, *[1] * (filt.dim() - 1))
        shift = bn_shift if shift is None else shift * scale + bn_shift
    text, _ = A.conv2d(imp.shape(x), imp.shape(weight), shift is not None, _arg(n, 3, "stride", 1),
                       _arg(n, 4, "padding", 0), _arg(n, 5, "dilation", 1), _arg(n, 6, "groups", 1))
    folded = f"_{bn.name}" if bn is not None else ""
    ins = {"X": imp.tensor(x), "F": imp.param(weight.name + folded, filt)}
    if shift is not None:
        base = bias.name if bias is not None else f"{weight.name}_bias"
        ins["b"] = imp.param(base + folded, shift)
    imp.odl(n, text, ins, "nd")
    if bn is not None:
        imp.absorbed[bn.name] = n.name
        imp.notes.append(f"{bn.name} folded into {n.name}")


def conv_transpose2d(imp: ExportImporter, n: fx.Node) -> None:
    x, weight = n.args[:2]
    bias = _arg(n, 2, "bias", None)
    kernel = tuple(imp.shape(weight)[2:])
    stride, padding = A.pair(_arg(n, 3, "stride", 1), "stride"), A.pair(_arg(n, 4, "padding", 0), "padding")
    out_pad, groups = A.pair(_arg(n, 5, "output_padding", 0), "output_padding"), _arg(n, 6, "groups", 1)
    dilation = A.pair(_arg(n, 7, "dilation", 1), "dilation")
    if stride != kernel or padding != (0, 0) or out_pad != (0, 0) or groups != 1 or dilation != (1, 1):
        raise Unmapped("transposed conv is mapped when stride == kernel, no padding, groups 1")
    text, _ = A.conv_transpose2d_patches(imp.shape(x), imp.shape(weight), bias is not None)
    ins = {"X": imp.tensor(x), "F": imp.param(weight.name, _const(imp, weight, "weight"))}
    if bias is not None:
        ins["b"] = imp.param(bias.name, _const(imp, bias, "bias"))
    imp.odl(n, text, ins, "nd", reshape_to=imp.shape(n))


def max_pool2d(imp: ExportImporter, n: fx.Node) -> None:
    x = n.args[0]
    if len(imp.shape(x)) != 4:
        raise Unmapped("an unbatched (3-D) input")
    text, _ = A.max_pool2d(imp.shape(x), _arg(n, 1, "kernel_size", None), _arg(n, 2, "stride", None),
                           _arg(n, 3, "padding", 0), _arg(n, 4, "dilation", 1), _arg(n, 5, "ceil_mode", False))
    imp.odl(n, text, {"X": imp.tensor(x)}, "nd")


def adaptive_avg_pool2d(imp: ExportImporter, n: fx.Node) -> None:
    x, size = n.args[0], list(n.args[1])
    if size not in ([1, 1], [1]) or len(imp.shape(x)) != 4:
        raise Unmapped(f"output size {size} (global pooling, 1x1, is mapped)")
    imp.odl(n, op_text("global_avgpool"), {"X": imp.tensor(x)}, "nd", "global_avgpool",
            reshape_to=imp.shape(n))


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
    if dropout:
        raise Unmapped(f"dropout_p={dropout}")
    if len(sq) != 4 or sk != imp.shape(v) or sq[:2] != sk[:2] or sq[3] != sk[3]:
        raise Unmapped(f"q {list(sq)}, k {list(sk)}: [B, H, S, D] with equal heads is mapped")
    if causal and sq[2] != sk[2]:
        raise Unmapped("causal attention with different query and key lengths")
    ins = {"Q": imp.tensor(q), "K": imp.tensor(k), "V": imp.tensor(v)}
    if mask is not None:
        ins["M"] = _additive_mask(imp, mask)
    imp.odl(n, A.attention(sq, sk, scale, bool(causal), imp.shape(mask) if mask is not None else None),
            ins, "nd")


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


def cat(imp: ExportImporter, n: fx.Node) -> None:
    parts, dim = list(n.args[0]), _arg(n, 1, "dim", 0)
    text, _ = A.cat([imp.shape(p) for p in parts], dim)
    imp.odl(n, text, {f"A{k}": imp.tensor(p) for k, p in enumerate(parts)}, "nd")


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
    "_log_softmax": softmax("log_softmax"), "scaled_dot_product_attention": sdpa, "cat": cat,
    "repeat_interleave": repeat_interleave,
}


def _pow(imp: ExportImporter, n: fx.Node) -> None:
    """pow.Tensor_Scalar (x ** 2 in RMSNorm) or pow.Tensor_Tensor."""
    if isinstance(n.args[1], fx.Node):
        binary("pow")(imp, n)
    else:
        pow_scalar(imp, n)


RULES["pow"] = _pow
