"""Mapping rules of the convolution family: batch norm (folded into the conv before it where
it can be), conv2d (groups 1, depthwise or grouped) and its patchify form (a zero pad before
it folded into its padding), transposed conv, max and global average pooling."""

from __future__ import annotations

import operator

import torch
from torch import fx

from uol_core.graph import aten_map as A
from uol_core.graph.aten_common import constant
from uol_core.graph.aten_map import Unmapped
from uol_core.graph.export_import import ExportImporter, _arg, packet
from uol_core.graph.format import Node, TensorSpec
from uol_core.ops import op_text

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
    scale = torch.rsqrt(constant(imp, var, "running variance") + eps)
    if weight is not None:
        scale = scale * constant(imp, weight, "weight")
    shift = -constant(imp, mean, "running mean") * scale
    if bias is not None:
        shift = shift + constant(imp, bias, "bias")
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


def view(imp: ExportImporter, src: str, method: str, args: list, shape: tuple[int, ...]) -> str:
    """A torch view node `src.method(args)` (zero-copy where the layout allows)."""

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
    if (stride != kernel or conv_padding(n, kernel) != (0, 0, 0, 0)
            or A.pair(_arg(n, 5, "dilation", 1), "dilation") != (1, 1) or _arg(n, 6, "groups", 1) != 1
            or kernel == (1, 1)):
        return False
    batch, channels, height, width = imp.shape(x)
    (kh, kw), cout = kernel, imp.shape(weight)[0]
    if height % kh or width % kw:
        return False
    ho, wo = height // kh, width // kw
    grid = view(imp, imp.tensor(x), "reshape", [batch, channels, ho, kh, wo, kw],
                (batch, channels, ho, kh, wo, kw))
    moved = view(imp, grid, "permute", [0, 2, 4, 1, 3, 5], (batch, ho, wo, channels, kh, kw))
    patches = view(imp, moved, "reshape", [batch * ho * wo, channels * kh * kw],
                   (batch * ho * wo, channels * kh * kw))
    w = imp.param(f"{weight.name}_patches", constant(imp, weight, "weight").reshape(cout, -1).t())
    if bias is None:
        imp.odl(n, op_text("matmul"), {"A": patches, "B": w}, "flat", "matmul",
                reshape_to=(batch, ho, wo, cout))
    else:
        imp.odl(n, op_text("linear_bias"), {"X": patches, "W": w,
                                            "b": imp.param(bias.name, constant(imp, bias, "bias"))},
                "flat", "linear_bias", reshape_to=(batch, ho, wo, cout))
    imp.forms[n.name] = {"nd": view(imp, imp.forms[n.name]["nd"], "permute", [0, 3, 1, 2],
                                    (batch, cout, ho, wo))}
    return True


def conv_padding(n: fx.Node, kernel: tuple[int, int]) -> tuple[int, int, int, int]:
    """A conv's zero padding as (top, bottom, left, right); 'valid' is none, 'same' (stride 1)
    pads d * (k - 1) per axis, the odd one at the end, as torch does."""
    padding, dilation = _arg(n, 4, "padding", 0), A.pair(_arg(n, 5, "dilation", 1), "dilation")
    if padding == "valid":
        return 0, 0, 0, 0
    if padding == "same":
        (th, tw) = (d * (k - 1) for d, k in zip(dilation, kernel))
        return th // 2, th - th // 2, tw // 2, tw - tw // 2
    ph, pw = A.pair(padding, "padding")
    return ph, ph, pw, pw


def _folded_pad(imp: ExportImporter, x: fx.Node) -> tuple[int, int, int, int] | None:
    """The sides of a zero `constant_pad_nd` of H and W that only this conv reads, or None:
    such a pad (TF "SAME" padding, written before each conv) is the conv's own padding, which
    saves a copy of the activations per conv."""
    if (x.op != "call_function" or packet(x.target) != "constant_pad_nd" or len(x.users) != 1
            or x.name not in imp.forms):  # a pad folded at import (of a constant) is a parameter
        return None
    pads = list(x.args[1])
    if _arg(x, 2, "value", 0) != 0 or len(pads) > 4 or any(p < 0 for p in pads) or not any(pads):
        return None
    left, right, top, bottom = [*pads, 0, 0, 0, 0][:4]
    return top, bottom, left, right


def _drop_producer(imp: ExportImporter, x: fx.Node) -> None:
    """Remove the node that computes `x` (a pad folded into its only reader)."""
    tensor = imp.forms.pop(x.name)["nd"]
    imp.nodes[:] = [node for node in imp.nodes if tensor not in node.outputs.values()]


def conv2d(imp: ExportImporter, n: fx.Node) -> None:
    x, weight = n.args[:2]
    bias = _arg(n, 2, "bias", None)
    if len(imp.shape(x)) != 4:
        raise Unmapped("an unbatched (3-D) input")
    kernel = tuple(imp.shape(weight)[2:])
    padding = conv_padding(n, kernel)
    pad = _folded_pad(imp, x)
    if pad is not None:
        padding = tuple(p + q for p, q in zip(padding, pad))
        x_in = x.args[0]
    else:
        x_in = x
        if weight.name in imp.consts and patchify(imp, n, x, weight, bias):
            return
    filt, shift = constant(imp, weight, "weight"), constant(imp, bias, "bias")
    bn = _foldable_batch_norm(imp, n)
    if bn is not None:  # conv then norm is one conv: W * scale, b * scale + shift (per channel)
        scale, bn_shift = _bn_scale_shift(imp, bn)
        filt = filt * scale.reshape(-1, *[1] * (filt.dim() - 1))
        shift = bn_shift if shift is None else shift * scale + bn_shift
    text, out = A.conv2d(imp.shape(x_in), imp.shape(weight), shift is not None, _arg(n, 3, "stride", 1),
                         padding, _arg(n, 5, "dilation", 1), _arg(n, 6, "groups", 1))
    folded = f"_{bn.name}" if bn is not None else ""
    src = imp.tensor(x_in)
    if len(out) == 5:  # grouped: the operands split by group (views), the result reshaped back
        groups, per_group = out[1], imp.shape(x_in)[1] // out[1]
        split = (imp.shape(x_in)[0], groups, per_group, *imp.shape(x_in)[2:])
        src = view(imp, src, "reshape", list(split), split)
        filt = filt.reshape(groups, -1, *filt.shape[1:])
        shift = shift.reshape(groups, -1) if shift is not None else None
    ins = {"X": src, "F": imp.param(weight.name + folded, filt)}
    if shift is not None:
        base = bias.name if bias is not None else f"{weight.name}_bias"
        ins["b"] = imp.param(base + folded, shift)
    imp.odl(n, text, ins, "nd", reshape_to=imp.shape(n) if len(out) == 5 else None)
    if pad is not None:
        _drop_producer(imp, x)
        imp.notes.append(f"{x.name} folded into {n.name}")
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
    ins = {"X": imp.tensor(x), "F": imp.param(weight.name, constant(imp, weight, "weight"))}
    if bias is not None:
        ins["b"] = imp.param(bias.name, constant(imp, bias, "bias"))
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
