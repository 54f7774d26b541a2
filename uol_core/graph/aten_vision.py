"""Mapping rules for the ops vision models add to the convolution family: constant padding,
group and instance norm, average pooling, and resizing (nearest, bilinear, bicubic).

Activations (hardswish, hardsigmoid, ReLU6 as hardtanh, SiLU, both GELUs) are elementwise rules
in aten_rules.py; pixel shuffle arrives as views (reshape, permute) and dropout and stochastic
depth vanish in eval mode, so none of those needs a rule here.
"""

from __future__ import annotations

import math
import operator

import torch
from torch import fx

from uol_core.graph import aten_map as A
from uol_core.graph.aten_common import constant, number_text
from uol_core.graph.aten_conv import view
from uol_core.graph.aten_map import Unmapped, shape_text
from uol_core.graph.export_import import ExportImporter, _arg, packet


def constant_pad_nd(imp: ExportImporter, n: fx.Node) -> None:
    """F.pad(x, pads, value=v): each output element reads x shifted by its axis' leading pad,
    `v` outside x; a negative pad crops. A zero pad that a conv alone reads is folded into that
    conv's padding instead (aten_conv.conv2d drops this op again)."""
    x, pads, value = n.args[0], list(n.args[1]), _arg(n, 2, "value", 0)
    shape = imp.shape(x)
    if len(pads) % 2 or len(pads) // 2 > len(shape):
        raise Unmapped(f"pads {pads} for a rank-{len(shape)} tensor")
    if not any(pads):  # TF-style padding computes all-zero pads for a 1x1 conv: an identity
        imp.forms[n.name] = dict(imp.forms[x.name]) if x.name in imp.forms else {"nd": imp.tensor(x)}
        return
    if not math.isfinite(float(value)):
        raise Unmapped(f"fill value {value} (a finite number is mapped)")
    before = [0] * len(shape)
    for k in range(len(pads) // 2):  # pads run from the last axis backwards: (left, right, top, ...)
        before[len(shape) - 1 - k] = pads[2 * k]
    idx = A.indices(len(shape))
    read = ", ".join(i if b == 0 else f"{i} - {b}" if b > 0 else f"{i} + {-b}" for i, b in zip(idx, before))
    read = f"X[{read}]"
    if any(p > 0 for p in pads):
        read = f"pad({read}, {number_text(value)})"
    text = (f"op constant_pad(X: {shape_text(shape)}) -> Y: {shape_text(imp.shape(n))}:\n"
            f"    Y[{', '.join(idx)}] = {read}\n")
    imp.odl(n, text, {"X": imp.tensor(x)}, "nd")


def _only_output_read(n: fx.Node) -> bool:
    """Only item 0 (the normalised tensor) of a norm's (out, mean, rstd) is read."""
    return all(u.target is operator.getitem and u.args[1] == 0 for u in n.users)


def _affine(imp: ExportImporter, n: fx.Node, weight, bias, shape: tuple[int, ...],
            index: str) -> tuple[str, str, dict[str, str]]:
    """The affine terms of a norm: signature text, the `* W + B` epilogue and the parameters
    (per channel, reshaped to `shape`); empty where the norm has none."""
    if weight is None and bias is None:
        return "", "", {}
    channels = math.prod(shape)
    w = constant(imp, weight, "weight") if weight is not None else torch.ones(channels)
    b = constant(imp, bias, "bias") if bias is not None else torch.zeros(channels)
    params = {"W": imp.param(f"{n.name}_weight", w.reshape(shape)),
              "B": imp.param(f"{n.name}_bias", b.reshape(shape))}
    return (f", W: {shape_text(shape)}, B: {shape_text(shape)}", f" * W[{index}] + B[{index}]", params)


def group_norm(imp: ExportImporter, n: fx.Node) -> None:
    """native_group_norm(x, weight, bias, N, C, HxW, groups, eps) -> (out, mean, rstd): x
    viewed as [N, G, C/G, HxW] (free: x is contiguous), statistics per (sample, group)."""
    x, weight, bias = n.args[:3]
    batch, channels, length, groups, eps = n.args[3:8]
    if not _only_output_read(n):
        raise Unmapped("its saved statistics (items 1 and 2) are read")
    shape = imp.shape(x)
    per_group = channels // groups
    grouped = (batch, groups, per_group, length)
    sig, epilogue, params = _affine(imp, n, weight, bias, (groups, per_group), "g, c")
    text = (f"op group_norm(X: {shape_text(grouped)}{sig}) -> Y: {shape_text(grouped)}:\n"
            "    mu[n, g] = mean[c, l](X[n, g, c, l])\n"
            "    var[n, g] = mean[c, l]((X[n, g, c, l] - mu[n, g]) ** 2)\n"
            f"    Y[n, g, c, l] = (X[n, g, c, l] - mu[n, g]) * rsqrt(var[n, g] + {float(eps)!r})"
            f"{epilogue}\n")
    src = view(imp, imp.tensor(x), "reshape", list(grouped), grouped)
    imp.unpacked.add(n.name)  # an Unmapped from here on is undone by the importer
    imp.odl(n, text, {"X": src, **params}, "nd", reshape_to=shape)


def batch_statistics_norm(imp: ExportImporter, n: fx.Node) -> None:
    """_native_batch_norm_legit.no_stats(x, weight, bias, training, momentum, eps): a norm
    over every axis but the channel axis with the batch's own statistics. Instance norm
    arrives as this over x viewed as [1, N*C, H, W] (its affine terms repeated per sample)."""
    if getattr(n.target, "_overloadname", "") != "no_stats":
        raise Unmapped("batch norm with batch statistics that updates running statistics (training)")
    x, weight, bias = n.args[:3]
    eps = _arg(n, 5, "eps", 1e-5)
    if not _only_output_read(n):
        raise Unmapped("its saved statistics (items 1 and 2) are read")
    shape = imp.shape(x)
    if len(shape) < 2:
        raise Unmapped("an input without a channel axis")
    lead, channels = shape[0], shape[1]
    planes = (lead, channels, math.prod(shape[2:]))
    sig, epilogue, params = _affine(imp, n, weight, bias, (channels,), "c")
    text = (f"op batch_stats_norm(X: {shape_text(planes)}{sig}) -> Y: {shape_text(planes)}:\n"
            "    mu[c] = mean[b, l](X[b, c, l])\n"
            "    var[c] = mean[b, l]((X[b, c, l] - mu[c]) ** 2)\n"
            f"    Y[b, c, l] = (X[b, c, l] - mu[c]) * rsqrt(var[c] + {float(eps)!r}){epilogue}\n")
    src = view(imp, imp.tensor(x), "reshape", list(planes), planes)
    imp.unpacked.add(n.name)
    imp.odl(n, text, {"X": src, **params}, "nd", reshape_to=shape)


# where each resize op keeps its scale arguments: (position of scale_factors in .vec,
# position of scales_h in .default); scales_w follows scales_h
_RESIZE_SCALES = {"upsample_nearest2d": (2, 2), "_upsample_nearest_exact2d": (2, 2),
                  "upsample_bilinear2d": (3, 3), "upsample_bicubic2d": (3, 3)}


def _axis_matrix(n: fx.Node, kind: str, axis: int, size: int, out: int) -> torch.Tensor:
    """The [out, size] matrix that the resize `n` applies along spatial `axis` (0: H, 1: W),
    taken from torch's own op on an identity (the other axis at size 1, where every mode is
    the identity), so rounding, align_corners and the scale arguments are torch's exactly."""
    vec = getattr(n.target, "_overloadname", "") == "vec"
    probe_shape = [1, size, 1, 1]
    probe_shape[2 + axis] = size
    probe = torch.eye(size).reshape(probe_shape)
    names = [a.name for a in n.target._schema.arguments]
    args = list(n.args) + [None] * (len(names) - len(n.args))
    for key, value in n.kwargs.items():
        args[names.index(key)] = value
    one = [1, 1]
    one[axis] = out
    scale_at = _RESIZE_SCALES[kind][0 if vec else 1]
    if vec:
        scales = args[scale_at]
        args[1] = one if args[1] is not None else None
        if scales is not None:
            args[scale_at] = [float(scales[axis]) if k == axis else 1.0 for k in range(2)]
    else:
        args[1] = one
        args[scale_at:scale_at + 2] = [args[scale_at + axis] if k == axis else None for k in range(2)]
    result = n.target(probe, *args[1:len(names)]).reshape(size, out)  # [j, i]: input j's weights
    return result.t().contiguous()  # [out, size]: row i holds the weights output i reads


def _repeats(matrix: torch.Tensor) -> int | None:
    """k when `matrix` repeats each input k times in order (integer-factor nearest), else None."""
    out, size = matrix.shape
    if out % size:
        return None
    k = out // size
    expected = torch.eye(size).repeat_interleave(k, dim=0)
    return k if torch.equal(matrix, expected) else None


MAX_TAPS = 5  # bicubic reads 4 inputs per output, bilinear 2 (3 offsets over a phase's outputs)


def _periodic_taps(matrix: torch.Tensor) -> tuple[int, int, torch.Tensor] | None:
    """(k, first offset, weights [k, taps]) when output k*h + a of `matrix` is
    sum over t of weights[a, t] * input clamp(h + first + t) exactly (bilinear and bicubic
    by an integer factor: k phases, each a fixed stencil), else None."""
    out, size = matrix.shape
    if out % size or size < 2 * MAX_TAPS:
        return None
    k, h0 = out // size, size // 2
    rows = matrix[k * h0:k * h0 + k]
    cols = rows.abs().sum(0).nonzero().flatten()
    first, last = int(cols.min()) - h0, int(cols.max()) - h0
    if last - first + 1 > MAX_TAPS:
        return None
    weights = rows[:, h0 + first:h0 + last + 1].contiguous()
    rebuilt = torch.zeros_like(matrix)
    for t in range(last - first + 1):  # the stencil at every h, its reads clamped to the edges
        src = (torch.arange(size) + first + t).clamp(0, size - 1)
        for a in range(k):
            rebuilt[torch.arange(size) * k + a] += torch.nn.functional.one_hot(src, size) * weights[a, t]
    return (k, first, weights) if torch.allclose(rebuilt, matrix, rtol=0, atol=1e-6) else None


def _clamped(read: str, index: str, offset: int, size: int, edge_read: str) -> str:
    """`read` at `index + offset` with the index clamped to [0, size - 1] (`edge_read` formats
    the read at a fixed index), as torch clamps a resize's source index."""
    if offset == 0:
        return read.format(index)
    shifted = read.format(f"{index} + {offset}" if offset > 0 else f"{index} - {-offset}")
    if offset < 0:
        return f"where({index} >= {-offset}, pad({shifted}, 0), {edge_read.format(0)})"
    return f"where({index} <= {size - 1 - offset}, pad({shifted}, 0), {edge_read.format(size - 1)})"


def _stencil_text(shape: tuple[int, ...], rows: tuple[int, int, torch.Tensor],
                  cols: tuple[int, int, torch.Tensor]) -> tuple[str, tuple[int, ...]]:
    """A resize by integer factors as two stencils (rows, then columns), each output phase
    weighting a few clamped neighbours: a handful of reads per output, where the matrix form
    reads a whole row and column."""
    batch, channels, height, width = shape
    (kh, fh, wh), (kw, fw, ww) = rows, cols
    out = (batch, channels, height, kh, width, kw)
    along_h = " + ".join(
        f"WH[a, {t}] * " + _clamped("X[n, c, {}, w]", "h", fh + t, height, "X[n, c, {}, w]")
        for t in range(wh.shape[1]))
    along_w = " + ".join(
        f"WW[b, {t}] * " + _clamped("t[n, c, h, a, {}]", "w", fw + t, width, "t[n, c, h, a, {}]")
        for t in range(ww.shape[1]))
    text = (f"op resize_stencil(X: {shape_text(shape)}, WH: {shape_text(tuple(wh.shape))}, "
            f"WW: {shape_text(tuple(ww.shape))}) -> Y: {shape_text(out)}:\n"
            f"    t[n, c, h, a, w] = {along_h}\n"
            f"    Y[n, c, h, a, w, b] = {along_w}\n")
    return text, out


def resize(imp: ExportImporter, n: fx.Node) -> None:
    """Nearest, nearest-exact, bilinear and bicubic resizing of NCHW, by any size or scale:
    separable, so Y = RH X RW^T with the per-axis matrices torch's op applies. Nearest by an
    integer factor is a broadcast instead (each pixel copied into a k x k block), and any mode
    by integer factors a stencil per output phase (`_periodic_taps`)."""

    x = n.args[0]
    shape, out = imp.shape(x), imp.shape(n)
    if len(shape) != 4:
        raise Unmapped("an input that is not NCHW")
    (batch, channels, height, width), (oh, ow) = shape, out[2:]
    kind = packet(n.target)
    rh, rw = _axis_matrix(n, kind, 0, height, oh), _axis_matrix(n, kind, 1, width, ow)
    kh, kw = _repeats(rh), _repeats(rw)
    if kh is not None and kw is not None:
        blocks = (batch, channels, height, kh, width, kw)
        text = (f"op upsample_repeat(X: {shape_text(shape)}) -> Y: {shape_text(blocks)}:\n"
                "    Y[n, c, h, a, w, b] = X[n, c, h, w]\n")
        imp.odl(n, text, {"X": imp.tensor(x)}, "nd", reshape_to=out)
        return
    rows, cols = _periodic_taps(rh), _periodic_taps(rw)
    if rows is not None and cols is not None:
        text, _ = _stencil_text(shape, rows, cols)
        imp.odl(n, text, {"X": imp.tensor(x), "WH": imp.param(f"{n.name}_row_taps", rows[2]),
                          "WW": imp.param(f"{n.name}_col_taps", cols[2])}, "nd", reshape_to=out)
        return
    text = (f"op resize(X: {shape_text(shape)}, RH: {shape_text((oh, height))}, "
            f"RW: {shape_text((ow, width))}) -> Y: {shape_text(out)}:\n"
            "    t[n, c, h, j] = sum[w](X[n, c, h, w] * RW[j, w])\n"
            "    Y[n, c, i, j] = sum[h](RH[i, h] * t[n, c, h, j])\n")
    imp.odl(n, text, {"X": imp.tensor(x), "RH": imp.param(f"{n.name}_rows", rh),
                      "RW": imp.param(f"{n.name}_cols", rw)}, "nd")


def avg_pool2d(imp: ExportImporter, n: fx.Node) -> None:
    """avg_pool2d(x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override):
    a window sum, written as a depthwise conv with unit weights (the conv template's form),
    times 1 / divisor per output pixel. The divisors come from torch's own op on ones, so the
    border windows (padding counted or not, ceil_mode's partial windows) divide as torch's."""
    x = n.args[0]
    shape = imp.shape(x)
    if len(shape) != 4:
        raise Unmapped("an unbatched (3-D) input")
    kernel = A.pair(_arg(n, 1, "kernel_size", None), "kernel_size")
    stride = A.pair(_arg(n, 2, "stride", None) or kernel, "stride")
    ph, pw = A.pair(_arg(n, 3, "padding", 0), "padding")
    out = imp.shape(n)
    ones = torch.ones(1, 1, *shape[2:])
    args = [kernel, stride, [ph, pw], *list(n.args[4:])]
    with torch.no_grad():
        averaged = n.target(ones, *args)  # count / divisor per window
        summed = torch.nn.functional.avg_pool2d(ones, kernel, stride, [ph, pw],
                                                bool(_arg(n, 4, "ceil_mode", False)), True, 1)
    scale = torch.where(summed > 0, averaged / summed.clamp(min=1), 0.0).reshape(out[2:])  # 1 / divisor
    reads, padded = [], False
    for i, r, step, before, size, k, extent in (("h", "r", stride[0], ph, shape[2], kernel[0], out[2]),
                                                ("w", "s", stride[1], pw, shape[3], kernel[1], out[3])):
        index = f"{step}*{i} + {r}" if step != 1 else f"{i} + {r}"
        reads.append(index + (f" - {before}" if before else ""))
        padded = padded or before > 0 or (extent - 1) * step + k - 1 - before > size - 1
    read = f"X[n, c, {reads[0]}, {reads[1]}]"
    if padded:
        read = f"pad({read}, 0)"
    window = (shape[1], 1, *kernel)
    text = (f"op avg_pool2d_k{kernel[0]}x{kernel[1]}(X: {shape_text(shape)}, F: {shape_text(window)}, "
            f"D: {shape_text(tuple(out[2:]))}) -> Y: {shape_text(out)}:\n"
            f"    Y[n, c, h, w] = sum[r, s]({read} * F[c, 0, r, s]) * D[h, w]\n")
    imp.odl(n, text, {"X": imp.tensor(x), "F": imp.param(f"{n.name}_window", torch.ones(window)),
                      "D": imp.param(f"{n.name}_divisors", scale)}, "nd")


VISION_RULES = {
    "constant_pad_nd": constant_pad_nd, "native_group_norm": group_norm,
    "_native_batch_norm_legit": batch_statistics_norm, "avg_pool2d": avg_pool2d,
    **{kind: resize for kind in _RESIZE_SCALES},
}
