"""Mapping rules the language models need: GEMMs with an input term (GPT-2's Conv1D is `addmm`,
`baddbmm`), table lookups by integer ids (`embedding`, `index_select`, `gather`), concatenation
of a first step's empty key/value cache, `stack`, `repeat`, and 1-D convolution (Whisper's front
end) as a 2-D one of height 1.

A lookup reads rows picked by ids known only at run time; ODL indexes tensors by affine forms
of its loop indices, so the lookup itself is a torch node, labelled LOOKUP: it moves data and
computes nothing, like a view, and it is not an op the import failed to map. Its integer ids
are a graph input of dtype i64.
"""

from __future__ import annotations

import torch
from torch import fx

from uol_core.graph import aten_map as A
from uol_core.graph.aten_common import constant, number_text
from uol_core.graph.aten_map import Unmapped
from uol_core.graph.export_import import ExportImporter, _arg, packet
from uol_core.graph.format import Node, TensorSpec
from uol_core.odl import parse
from uol_core.ops import op_text

LOOKUP = "lookup: rows picked by integer ids at run time (data movement, runs in torch)"

# the argument position of each lookup's integer ids and of the table it reads (`index`, the
# form of `table[ids]`, takes a list: one entry per axis, None where the axis is taken whole)
LOOKUPS = {"embedding": (1, 0), "index_select": (2, 0), "gather": (2, 0), "index": (1, 0)}
ID_DTYPES = (torch.int64, torch.int32)


def _gemm_text(name: str, a: tuple[int, ...], b: tuple[int, ...], out: tuple[int, ...],
               bias: tuple[int, ...] | None, alpha: float, beta: float) -> str:
    """Y[.., m, n] = alpha * sum[k](P[.., m, k] * Q[.., k, n]) + beta * C[..] (C broadcast)."""
    idx = A.indices(len(out))
    lead, m, n = idx[:-2], idx[-2], idx[-1]
    p = ", ".join([*lead, m, "k"])
    q = ", ".join([*lead, "k", n])
    expr = f"sum[k](P[{p}] * Q[{q}])"
    if alpha != 1:
        expr = f"{number_text(alpha)} * {expr}"
    sig = f"P: {A.shape_text(a)}, Q: {A.shape_text(b)}"
    if bias is not None:
        read = A.broadcast_read("C", bias, out)
        expr += f" + {read}" if beta == 1 else f" + {number_text(beta)} * {read}"
        sig += f", C: {A.shape_text(bias)}"
    return f"op {name}({sig}) -> Y: {A.shape_text(out)}:\n    Y[{', '.join(idx)}] = {expr}\n"


def addmm(imp: ExportImporter, n: fx.Node) -> None:
    """beta * input + alpha * (m1 @ m2): a constant [K, N] weight with a constant bias is the
    library's linear_bias (its best GEMM with the bias fused); any other form one inline GEMM."""
    bias, m1, m2 = n.args[:3]
    beta, alpha = n.kwargs.get("beta", 1), n.kwargs.get("alpha", 1)
    if any(not isinstance(t, fx.Node) for t in (bias, m1, m2)):
        raise Unmapped("an operand is not a tensor")
    if (beta == 1 and alpha == 1 and m2.name in imp.consts and bias.name in imp.consts
            and imp.shape(bias) == imp.shape(n)[-1:]):
        ins = {"X": imp.tensor(m1, "flat"), "W": imp.param(m2.name, constant(imp, m2, "weight")),
               "b": imp.param(bias.name, constant(imp, bias, "bias"))}
        imp.odl(n, op_text("linear_bias"), ins, "flat", "linear_bias")
        return
    _inline_gemm(imp, n, "addmm", m1, m2, bias, alpha, beta)


def baddbmm(imp: ExportImporter, n: fx.Node) -> None:
    """beta * input + alpha * (b1 @ b2) over a batch axis, one inline batched GEMM."""
    bias, b1, b2 = n.args[:3]
    _inline_gemm(imp, n, "baddbmm", b1, b2, bias, _arg(n, 4, "alpha", 1), _arg(n, 3, "beta", 1))


def _inline_gemm(imp: ExportImporter, n: fx.Node, name: str, a: fx.Node, b: fx.Node,
                 bias: fx.Node | None, alpha, beta) -> None:
    sa, sb, out = imp.shape(a), imp.shape(b), imp.shape(n)
    if len(sa) != len(sb) or sa[:-2] != sb[:-2] or sa[-1] != sb[-2]:
        raise Unmapped(f"operands {list(sa)} @ {list(sb)}")
    keep_bias = bias is not None and beta != 0  # torch ignores the input when beta is 0
    ins = {"P": imp.tensor(a), "Q": imp.tensor(b)}
    if keep_bias:
        ins["C"] = imp.tensor(bias)
    text = _gemm_text(name, sa, sb, out, imp.shape(bias) if keep_bias else None,
                      float(alpha), float(beta))
    imp.odl(n, text, ins, "nd")


def lookup(imp: ExportImporter, n: fx.Node) -> None:
    """A row lookup by run-time integer ids from an f32 table: a torch node (see LOOKUP)."""
    ids_at, table_at = LOOKUPS[_kind(n)]
    ids, table = n.args[ids_at], n.args[table_at]
    ids = [i for i in ids if i is not None] if isinstance(ids, (list, tuple)) else [ids]
    if not ids or any(not isinstance(i, fx.Node) or i.meta["val"].dtype not in ID_DTYPES for i in ids):
        raise Unmapped("the ids are not int64 or int32 tensors (a bool mask selects a run-time count)")
    if table.meta["val"].dtype != torch.float32:
        raise Unmapped(f"a {str(table.meta['val'].dtype).replace('torch.', '')} table")
    if _kind(n) == "gather" and _arg(n, 3, "sparse_grad", False):
        raise Unmapped("sparse_grad=True")
    imp.torch_node(n, LOOKUP)


def _kind(n: fx.Node) -> str:
    return packet(n.target)


def cat(imp: ExportImporter, n: fx.Node) -> None:
    """Concatenation at any rank. Parts without elements are dropped, as torch drops them (a
    1-D empty tensor is the key/value cache a first decoding step starts from); one part left
    is that part itself."""
    parts, dim = list(n.args[0]), _arg(n, 1, "dim", 0)
    rank = len(imp.shape(n))
    kept = [p for p in parts if imp.shape(p) != (0,) and 0 not in imp.shape(p)]
    if not kept:
        raise Unmapped("every part is empty")
    if any(len(imp.shape(p)) != rank for p in kept):
        raise Unmapped("parts of different ranks")
    if len(kept) == 1:
        imp.forms[n.name] = {"nd": imp.tensor(kept[0])}
        return
    text, _ = A.cat([imp.shape(p) for p in kept], dim % rank)
    imp.odl(n, text, {f"A{k}": imp.tensor(p) for k, p in enumerate(kept)}, "nd")


def stack(imp: ExportImporter, n: fx.Node) -> None:
    """stack(parts, dim): the output's new axis `e` picks part e (nested where on e)."""
    parts, dim = list(n.args[0]), _arg(n, 1, "dim", 0)
    out = imp.shape(n)
    dim %= len(out)
    shape = imp.shape(parts[0])
    if any(imp.shape(p) != shape for p in parts):
        raise Unmapped("parts of different shapes")
    idx = A.indices(len(out))
    read = ", ".join(i for a, i in enumerate(idx) if a != dim)
    expr = f"A{len(parts) - 1}[{read}]"
    for k in range(len(parts) - 2, -1, -1):
        expr = f"where({idx[dim]} == {k}, A{k}[{read}], {expr})"
    sig = ", ".join(f"A{k}: {A.shape_text(shape)}" for k in range(len(parts)))
    text = f"op stack{len(parts)}_d{dim}({sig}) -> Y: {A.shape_text(out)}:\n    Y[{', '.join(idx)}] = {expr}\n"
    imp.odl(n, text, {f"A{k}": imp.tensor(p) for k, p in enumerate(parts)}, "nd")


def repeat(imp: ExportImporter, n: fx.Node) -> None:
    """x.repeat(r0, r1, ..): each axis of size s repeated r times is an [r, s] pair of axes
    whose contiguous layout is the [r * s] result, read at the s index alone (a broadcast)."""
    x, reps = n.args[0], [int(r) for r in n.args[1]]
    shape = (1,) * (len(reps) - len(imp.shape(x))) + imp.shape(x)
    pairs = tuple(d for r, s in zip(reps, shape) for d in (r, s))
    reads = [f"s{a}" for a in range(len(shape))][len(shape) - len(imp.shape(x)):]
    outer = ", ".join(f"r{a}, s{a}" for a in range(len(shape)))
    text = (f"op repeat_{len(shape)}d(X: {A.shape_text(imp.shape(x))}) -> Y: {A.shape_text(pairs)}:\n"
            f"    Y[{outer}] = X[{', '.join(reads)}]\n")
    imp.odl(n, text, {"X": imp.tensor(x)}, "nd", reshape_to=imp.shape(n))


def conv1d(imp: ExportImporter, n: fx.Node) -> None:
    """conv1d [N, C, L] as conv2d of height 1: one more axis of extent 1 on the input, the
    filter and the output (views), and the 2-D op with stride, padding, dilation along W."""
    x, weight = n.args[:2]
    bias = _arg(n, 2, "bias", None)
    if len(imp.shape(x)) != 3:
        raise Unmapped("an unbatched (2-D) input")
    stride, padding, dilation = (_one(_arg(n, k, name, d), name) for k, name, d in
                                 ((3, "stride", 1), (4, "padding", 0), (5, "dilation", 1)))
    shift = constant(imp, bias, "bias")
    filt = constant(imp, weight, "weight").unsqueeze(2)
    (batch, channels, length), out = imp.shape(x), imp.shape(n)
    text, _ = A.conv2d((batch, channels, 1, length), tuple(filt.shape), shift is not None,
                       (1, stride), (0, padding), (1, dilation), _arg(n, 6, "groups", 1))
    ins = {"X": _reshape(imp, imp.tensor(x), (batch, channels, 1, length)),
           "F": imp.param(f"{weight.name}_2d", filt)}
    if shift is not None:
        ins["b"] = imp.param(bias.name, shift)
    imp.odl(n, text, ins, "nd", reshape_to=out)


def repeat_heads(imp: ExportImporter, src: str, shape: tuple[int, ...], repeats: int) -> str:
    """Graph tensor `src` [B, G, T, D] with each head repeated `repeats` times in place, as
    [B, G * repeats, T, D] (GQA's key/value heads, each serving a group of query heads)."""
    text, _ = A.repeat_interleave_heads(shape, repeats)
    raw = imp.fresh(f"{src}_heads")
    imp.nodes.append(Node(imp.fresh(f"{src}_heads_op"), "odl", op=parse(text), source="inline",
                          inputs={"X": src}, outputs={"Y": raw}))
    return _reshape(imp, raw, (shape[0], shape[1] * repeats, shape[2], shape[3]))


def zero_unseen_rows(imp: ExportImporter, n: fx.Node, q: tuple[int, ...], mask: str,
                     mask_shape: tuple[int, ...]) -> None:
    """After attention with a bool mask: a query that the mask lets see no key gets zeros, as
    torch gives (the attention op's softmax would average every key: all scores equal). S,
    the mask with its key axis reduced to 1 (1 where a key is seen), broadcasts to the output."""
    rank = len(mask_shape)
    idx = A.indices(rank)
    seen = (*mask_shape[:-1], 1)
    text = (f"op sdpa_rows_seen(M: {A.shape_text(mask_shape).replace('f32', 'bool')}) -> "
            f"S: {A.shape_text(seen)}:\n"
            f"    S[{', '.join(idx)}] = max[j](where(M[{', '.join([*idx[:-1], 'j'])}], 1.0, 0.0))\n")
    attended = imp.forms[n.name]["nd"]
    imp.odl(n, text, {"M": mask}, "nd")
    product = A.elementwise("sdpa_zero_unseen", "{O} * {S}", q, {"O": q, "S": seen})
    imp.odl(n, product, {"O": attended, "S": imp.forms[n.name]["nd"]}, "nd")


def _one(value, name: str) -> int:
    """A 1-D conv's stride, padding or dilation as one int."""
    if isinstance(value, str):
        raise Unmapped(f"{name}='{value}' (string padding) has no ODL mapping yet")
    values = [value] if isinstance(value, int) else list(value)
    if len(values) != 1:
        raise Unmapped(f"{name}={values} for a 1-D convolution")
    return int(values[0])


def _reshape(imp: ExportImporter, src: str, shape: tuple[int, ...]) -> str:
    """A torch view node: `src` reshaped (zero-copy: `src` is contiguous)."""
    out = imp.fresh(f"{src}_r")
    imp.nodes.append(Node(out, "torch", source="method:reshape", outputs={"out": out},
                          args=[{"tensor": src}, list(shape)], fn=torch.Tensor.reshape, label="view"))
    imp.shapes[out] = TensorSpec(tuple(shape), "f32")
    return out


TEXT_RULES = {
    "addmm": addmm, "baddbmm": baddbmm, **{k: lookup for k in LOOKUPS}, "cat": cat,
    "stack": stack, "repeat": repeat, "conv1d": conv1d,
}
