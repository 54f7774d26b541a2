"""ODL text for ATen ops at the concrete shapes an exported graph carries.

torch.export fixes every shape, so each generated op spells its extents as numbers: broadcasting
becomes index 0 on a size-1 axis, a stride becomes `2*h + r`, padding becomes `pad(X[...], 0)`.
Every function returns ODL text (parsed by the caller) or raises Unmapped with the reason the op
stays in torch.
"""

from __future__ import annotations

import math

MAX_POOL_WINDOW = 16  # a max-pool window is unrolled (ODL reductions take extents from tensors)


class Unmapped(Exception):
    """An ATen node that has no ODL form; the message is the reason shown to the user."""


def shape_text(shape: tuple[int, ...]) -> str:
    return f"f32[{', '.join(str(s) for s in shape)}]"


def indices(rank: int) -> list[str]:
    return [f"i{k}" for k in range(rank)]


def broadcast_read(name: str, shape: tuple[int, ...], out_shape: tuple[int, ...]) -> str:
    """`name[...]` read at the output's indices under torch broadcasting (right-aligned axes,
    index 0 on a size-1 axis)."""
    if len(shape) > len(out_shape):
        raise Unmapped(f"operand of shape {list(shape)} does not broadcast to {list(out_shape)}")
    idx = indices(len(out_shape))[len(out_shape) - len(shape):]
    parts = []
    for size, want, i in zip(shape, out_shape[len(out_shape) - len(shape):], idx):
        if size not in (want, 1):
            raise Unmapped(f"operand of shape {list(shape)} does not broadcast to {list(out_shape)}")
        parts.append(i if size == want else "0")
    return f"{name}[{', '.join(parts)}]"


def elementwise(name: str, expr: str, out_shape: tuple[int, ...],
                operands: dict[str, tuple[int, ...]]) -> str:
    """One statement over the output's indices; `expr` names operands as {A}, {B}, ..."""
    if not out_shape:
        raise Unmapped("a 0-d result (scalar tensor) stays in torch")
    sig = ", ".join(f"{k}: {shape_text(s)}" for k, s in operands.items())
    reads = {k: broadcast_read(k, s, out_shape) for k, s in operands.items()}
    return (f"op {name}({sig}) -> Y: {shape_text(out_shape)}:\n"
            f"    Y[{', '.join(indices(len(out_shape)))}] = {expr.format(**reads)}\n")


def reduce(kind: str, shape: tuple[int, ...], dims: list[int], keepdim: bool) -> tuple[str, tuple]:
    """sum/mean/max/min over `dims`; returns (text, output shape)."""
    rank = len(shape)
    dims = sorted({d % rank for d in dims}) if dims else list(range(rank))
    idx = indices(rank)
    red = [idx[d].replace("i", "r") for d in dims]
    read = ", ".join(red[dims.index(k)] if k in dims else idx[k] for k in range(rank))
    if keepdim:
        out_shape = tuple(1 if k in dims else s for k, s in enumerate(shape))
        out_idx = [idx[k] for k in range(rank)]
    else:
        out_shape = tuple(s for k, s in enumerate(shape) if k not in dims)
        out_idx = [idx[k] for k in range(rank) if k not in dims]
    if not out_shape:
        raise Unmapped("a reduction to a 0-d tensor (scalar) stays in torch")
    text = (f"op {kind}_reduce(X: {shape_text(shape)}) -> Y: {shape_text(out_shape)}:\n"
            f"    Y[{', '.join(out_idx)}] = {kind}[{', '.join(red)}](X[{read}])\n")
    return text, out_shape


def pair(value, name: str) -> tuple[int, int]:
    if isinstance(value, int):
        return value, value
    if isinstance(value, str):
        raise Unmapped(f"{name}='{value}' (string padding) has no ODL mapping yet")
    values = list(value)
    return (values[0], values[0]) if len(values) == 1 else (values[0], values[1])


def conv2d(x: tuple, w: tuple, bias: bool, stride, padding, dilation, groups: int) -> tuple[str, tuple]:
    """Conv2d (NCHW) with stride, zero padding, dilation; groups 1 or depthwise. `padding` is
    torch's (one or two sides) or (top, bottom, left, right): a zero pad folded into the conv
    (TF "SAME" padding of a stride-2 conv puts the extra row and column at the end)."""
    n, c, h, wd = x
    k, cg, r, s = w
    (sh, sw), (dh, dw) = pair(stride, "stride"), pair(dilation, "dilation")
    if isinstance(padding, (list, tuple)) and len(padding) == 4:
        ph, pb, pw, pr = padding
    else:
        (ph, pw) = pair(padding, "padding")
        pb, pr = ph, pw
    ho, wo = (h + ph + pb - dh * (r - 1) - 1) // sh + 1, (wd + pw + pr - dw * (s - 1) - 1) // sw + 1
    depthwise = groups == c == k and cg == 1
    hi, wi = _affine(sh, "h", dh, "r", -ph), _affine(sw, "w", dw, "s", -pw)
    if groups != 1 and not depthwise:
        return _grouped_conv2d(x, w, bias, groups, (hi, wi, ph or pw or pb or pr), (ho, wo), (sh, ph))
    chan = "k" if depthwise else "c"
    read = f"X[n, {chan}, {hi}, {wi}]"
    if ph or pw or pb or pr:
        read = f"pad({read}, 0)"
    weight = "F[k, 0, r, s]" if depthwise else "F[k, c, r, s]"
    over = "r, s" if depthwise else "c, r, s"
    out = (n, k, ho, wo)
    b_in, b_add = (f", b: f32[{k}]", " + b[k]") if bias else ("", "")
    text = (f"op conv2d_k{r}x{s}_s{sh}_p{ph}{'_dw' if depthwise else ''}(X: {shape_text(x)}, "
            f"F: {shape_text(w)}{b_in}) -> Y: {shape_text(out)}:\n"
            f"    Y[n, k, h, w] = sum[{over}]({read} * {weight}){b_add}\n")
    return text, out


def _grouped_conv2d(x: tuple, w: tuple, bias: bool, groups: int, reads: tuple, size: tuple,
                    tag: tuple) -> tuple[str, tuple]:
    """A grouped conv (ResNeXt, RegNet) over the group-split views X [N, G, C/G, H, W] and
    F [G, K/G, C/G, R, S]: the input channel of group g is a plain index, where c + g * C/G
    on the 4-D tensors would need k // (K/G). The result [N, G, K/G, HO, WO] is the 4-D output
    in its contiguous layout (the caller reshapes the operands and the result)."""
    n, _, h, wd = x
    k, cg, r, s = w
    hi, wi, padded = reads
    read = f"X[n, g, c, {hi}, {wi}]"
    if padded:
        read = f"pad({read}, 0)"
    xs, ws = (n, groups, cg, h, wd), (groups, k // groups, cg, r, s)
    out = (n, groups, k // groups, *size)
    b_in, b_add = (f", b: f32[{groups}, {k // groups}]", " + b[g, k]") if bias else ("", "")
    text = (f"op conv2d_k{r}x{s}_s{tag[0]}_p{tag[1]}_g{groups}(X: {shape_text(xs)}, "
            f"F: {shape_text(ws)}{b_in}) -> Y: {shape_text(out)}:\n"
            f"    Y[n, g, k, h, w] = sum[c, r, s]({read} * F[g, k, c, r, s]){b_add}\n")
    return text, out


def _affine(stride: int, i: str, dilation: int, r: str, const: int) -> str:
    text = f"{stride}*{i}" if stride != 1 else i
    text += f" + {dilation}*{r}" if dilation != 1 else f" + {r}"
    return text + (f" - {-const}" if const < 0 else f" + {const}" if const else "")


def conv_transpose2d_patches(x: tuple, w: tuple, bias: bool) -> tuple[str, tuple]:
    """ConvTranspose2d with stride == kernel and no padding: each input pixel writes its own
    kernel-sized patch. Written as a 6-D op [N, K, H, R, W, S] whose contiguous layout is the
    [N, K, H*R, W*S] output (the caller adds the reshape)."""
    n, _, h, wd = x
    _, k, r, s = w
    out = (n, k, h, r, wd, s)
    b_in, b_add = (f", b: f32[{k}]", " + b[k]") if bias else ("", "")
    text = (f"op conv_transpose2d_patch(X: {shape_text(x)}, F: {shape_text(w)}{b_in}) -> "
            f"Y: {shape_text(out)}:\n"
            f"    Y[n, k, h, a, w, e] = sum[c](X[n, c, h, w] * F[c, k, a, e]){b_add}\n")
    return text, out


def max_pool2d(x: tuple, kernel, stride, padding, dilation, ceil_mode: bool) -> tuple[str, tuple]:
    """Max pooling, the window unrolled into nested max() (padding reads -inf)."""
    (kh, kw) = pair(kernel, "kernel_size")
    (sh, sw) = pair(stride or kernel, "stride")
    (ph, pw), (dh, dw) = pair(padding, "padding"), pair(dilation, "dilation")
    if ceil_mode:
        raise Unmapped("max_pool2d with ceil_mode=True (partial windows) has no ODL mapping")
    if kh * kw > MAX_POOL_WINDOW:
        raise Unmapped(f"max_pool2d window {kh}x{kw} is over {MAX_POOL_WINDOW} elements "
                       "(windows are unrolled)")
    n, c, h, wd = x
    ho, wo = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    terms = []
    for a in range(kh):
        for b in range(kw):
            hi = (f"{sh}*h" if sh != 1 else "h") + (f" + {dh * a - ph}" if dh * a - ph > 0 else
                                                     f" - {ph - dh * a}" if dh * a - ph < 0 else "")
            wi = (f"{sw}*w" if sw != 1 else "w") + (f" + {dw * b - pw}" if dw * b - pw > 0 else
                                                     f" - {pw - dw * b}" if dw * b - pw < 0 else "")
            read = f"X[n, c, {hi}, {wi}]"
            terms.append(f"pad({read}, -1e30)" if ph or pw else read)
    expr = terms[0]
    for term in terms[1:]:
        expr = f"max({expr}, {term})"
    out = (n, c, ho, wo)
    return (f"op max_pool2d_k{kh}x{kw}(X: {shape_text(x)}) -> Y: {shape_text(out)}:\n"
            f"    Y[n, c, h, w] = {expr}\n"), out


def cat(shapes: list[tuple[int, ...]], dim: int) -> tuple[str, tuple]:
    """Concatenation as a sum of zero-padded reads, each operand shifted to its offset."""
    rank = len(shapes[0])
    dim %= rank
    out = list(shapes[0])
    out[dim] = sum(s[dim] for s in shapes)
    idx = indices(rank)
    terms, offset = [], 0
    for k, _ in enumerate(shapes):
        at = [i if a != dim else (f"{i} - {offset}" if offset else i) for a, i in enumerate(idx)]
        terms.append(f"pad(A{k}[{', '.join(at)}], 0)")
        offset += shapes[k][dim]
    sig = ", ".join(f"A{k}: {shape_text(s)}" for k, s in enumerate(shapes))
    return (f"op cat{len(shapes)}_d{dim}({sig}) -> Y: {shape_text(tuple(out))}:\n"
            f"    Y[{', '.join(idx)}] = {' + '.join(terms)}\n"), tuple(out)


def repeat_interleave_heads(shape: tuple[int, ...], repeats: int) -> tuple[str, tuple]:
    """repeat_interleave along axis 1 of [B, G, T, D] as a 5-D broadcast [B, G, R, T, D] (its
    contiguous layout is the [B, G*R, T, D] result; the caller adds the reshape)."""
    b, g, t, d = shape
    out = (b, g, repeats, t, d)
    return (f"op repeat_heads(X: {shape_text(shape)}) -> Y: {shape_text(out)}:\n"
            f"    Y[b, g, e, t, d] = X[b, g, t, d]\n"), out


def attention(q: tuple, k: tuple, scale: float | None, causal: bool,
              mask: tuple[int, ...] | None = None, bool_mask: bool = False) -> str:
    """Scaled dot-product attention on [B, H, S, D] (causal: query i sees keys j <= i); `mask`,
    the shape of an additive float mask M that broadcasts to [B, H, S, T], adds M to the scores;
    with `bool_mask`, M is bool and a key where M is false is left out, as torch does."""
    scale = 1.0 / math.sqrt(q[-1]) if scale is None else scale
    score = f"sum[d](Q[b, h, i, d] * K[b, h, j, d]) * {scale!r}"
    mask_in = ""
    if mask is not None:
        full = (q[0], q[1], q[2], k[2])
        if len(mask) > 4:
            raise Unmapped(f"a mask of rank {len(mask)} (up to 4 broadcasts to the scores)")
        padded = (1,) * (4 - len(mask)) + tuple(mask)
        if any(m not in (1, f) for m, f in zip(padded, full)):
            raise Unmapped(f"a mask of shape {list(mask)} does not broadcast to the scores {list(full)}")
        reads = [i if m == f and f != 1 else "0" for m, f, i in zip(padded, full, "bhij")][4 - len(mask):]
        read = f"M[{', '.join(reads)}]"
        score = f"where({read}, {score}, -1e30)" if bool_mask else f"{score} + {read}"
        mask_in = f", M: {shape_text(mask).replace('f32', 'bool') if bool_mask else shape_text(mask)}"
    if causal:
        score = f"where(j <= i, {score}, -1e30)"
    name = "sdpa" + ("_causal" if causal else "") + ("_masked" if mask is not None else "")
    return (f"op {name}(Q: {shape_text(q)}, K: {shape_text(k)}, "
            f"V: {shape_text(k)}{mask_in}) -> O: {shape_text(q)}:\n"
            f"    s[b, h, i, j] = {score}\n"
            "    mx[b, h, i] = max[j](s[b, h, i, j])\n"
            "    p[b, h, i, j] = exp(s[b, h, i, j] - mx[b, h, i])\n"
            "    l[b, h, i] = sum[j](p[b, h, i, j])\n"
            "    O[b, h, i, d] = sum[j](p[b, h, i, j] * V[b, h, j, d]) / l[b, h, i]\n")
