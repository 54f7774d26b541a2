"""Flash-style C attention: recognise naive attention in ODL and never materialise the score matrix.

Recognised statements (any index names, any leading batch indices P, any score expression
around the Q.K sum: scaling, a where-mask over index values):
    s[P, i, j] = f(sum[d](Q[P, i, d] * K[P, j, d]))      mx[P, i] = max[j](s[P, i, j])
    p[P, i, j] = exp(s[P, i, j] - mx[P, i])              l[P, i] = sum[j](p[P, i, j])
    O[P, i, e] = sum[j](p[P, i, j] * V[P, j, e]) / l[P, i]
A task is one batch slice and BQ query rows (OpenMP spreads the tasks over the cores). Its
queries lie along the vector lanes: Q^T is packed once, then each block of BK keys gives a
BK x BQ score tile S^T = K Q^T, the online softmax (running max m, sum l, rescale alpha), and
O^T = alpha O^T + V^T P^T, both products in register micro-tiles (c_attention_tiles) that
broadcast K and V straight from memory. Nothing of size S x T is ever stored.
The forward that training runs (grad's forward_with_saves) splits O into z = sum[j](p * V) and
O = z / l and returns mx, l and z too: the same kernel then also writes those row statistics
(m and l are final after the last key block) and z = O^T before the division, for the flash
backward (c_attention_bwd) to recompute p = exp(s - mx) from.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from uol_core.backends.base import KernelSource
from uol_core.backends.c import CodeWriter
from uol_core.backends.c_attention_tiles import Tiles, choose_tiles, score_kernel, value_kernel
from uol_core.backends.c_expr import PRELUDE, ExprContext, render
from uol_core.backends.c_names import index_id, size_id, tensor_id
from uol_core.odl.check import stmt_extents
from uol_core.odl.ir import Access, Binary, Call, DType, Op, Reduce, walk
from uol_core.odl.masks import causal_offset

GENERATOR = "uol-c-flash-1"
MAX_HEAD = 512  # largest D or E kept in per-thread stack tiles


@dataclass(frozen=True)
class FlashPlan:
    """Tensors and index names of a recognised attention."""

    q: str
    k: str
    v: str
    out: str
    prefix: tuple[str, ...]  # batch indices of the score statement
    i: str
    j: str
    reduce: Reduce  # the Q.K sum inside the score expression
    saves: tuple[str | None, str | None, str | None] = (None, None, None)  # mx, l, z as outputs


def _pure(access, names) -> bool:
    return isinstance(access, Access) and tuple(f.pure_symbol for f in access.indices) == tuple(names)


def flash_plan(op: Op) -> FlashPlan | None:
    """The plan when `op` is naive attention as above (f32, s and p not outputs), else None.

    Also takes the split form O = z / l with z = sum[j](p * V) (the forward with saves), where
    mx, l and z may be outputs: the kernel then writes them as well.
    """
    if len(op.stmts) not in (5, 6) or {d.dtype for d in op.inputs + op.outputs + op.locals} != {DType.f32}:
        return None
    s, mx, p, lsum = op.stmts[:4]
    outputs = {d.name for d in op.outputs}
    if {s.target, p.target} & outputs or (len(op.stmts) == 5 and {mx.target, lsum.target} & outputs):
        return None
    if len(s.indices) < 2:  # scores are indexed by at least a query and a key
        return None
    *prefix, i, j = s.indices
    reds = [n for n in walk(s.expr) if isinstance(n, Reduce)]
    if len(reds) != 1 or reds[0].op != "sum" or len(reds[0].indices) != 1:
        return None
    red, d = reds[0], reds[0].indices[0]
    body = red.body
    if not (isinstance(body, Binary) and body.op == "mul"):
        return None
    a, b = body.lhs, body.rhs
    if not (_pure(a, (*prefix, i, d)) and _pure(b, (*prefix, j, d))):
        return None
    if not _row_stats(op, prefix) or not _output(op, len(prefix)):
        return None
    value = op.stmts[4].expr if len(op.stmts) == 6 else op.stmts[4].expr.lhs
    saves = tuple(t if t in outputs else None for t in (mx.target, lsum.target, op.stmts[4].target)) \
        if len(op.stmts) == 6 else (None, None, None)
    return FlashPlan(a.tensor, b.tensor, value.body.rhs.tensor, op.stmts[-1].target,
                     tuple(prefix), i, j, red, saves)


def _row_stats(op: Op, prefix: list[str]) -> bool:
    """mx = max_j s, p = exp(s - mx), l = sum_j p, each at matching positions."""
    s, mx, p, lsum = op.stmts[:4]
    n = len(prefix)
    e = mx.expr
    if not (isinstance(e, Reduce) and e.op == "max" and len(e.indices) == 1
            and _pure(e.body, (*mx.indices, e.indices[0])) and e.body.tensor == s.target
            and len(mx.indices) == n + 1):
        return False
    e = p.expr
    if not (isinstance(e, Call) and e.fn == "exp" and isinstance(e.args[0], Binary)
            and e.args[0].op == "sub" and _pure(e.args[0].lhs, p.indices)
            and e.args[0].lhs.tensor == s.target and _pure(e.args[0].rhs, p.indices[:-1])
            and e.args[0].rhs.tensor == mx.target):
        return False
    e = lsum.expr
    return (isinstance(e, Reduce) and e.op == "sum" and len(e.indices) == 1
            and _pure(e.body, (*lsum.indices, e.indices[0])) and e.body.tensor == p.target)


def _output(op: Op, n: int) -> bool:
    """O[P, i, e] = sum[j](p[P, i, j] * V[P, j, e]) / l[P, i], or that split into z and z / l."""
    p, lsum = op.stmts[2], op.stmts[3]
    o = op.stmts[-1]
    e = o.expr
    if not (isinstance(e, Binary) and e.op == "div" and len(o.indices) == n + 2):
        return False
    *pre, i, ee = o.indices
    if not (_pure(e.rhs, (*pre, i)) and e.rhs.tensor == lsum.target):
        return False
    value, idx = e.lhs, o.indices
    if len(op.stmts) == 6:  # O = z / l, z[P, i, e] = sum[j](p * V) at the same positions
        z = op.stmts[4]
        if not (_pure(value, o.indices) and value.tensor == z.target and len(z.indices) == n + 2):
            return False
        value, idx = z.expr, z.indices
    if not (isinstance(value, Reduce) and value.op == "sum" and len(value.indices) == 1):
        return False
    jj, body = value.indices[0], value.body
    *pre, i, ee = idx
    return (isinstance(body, Binary) and body.op == "mul" and _pure(body.lhs, (*pre, i, jj))
            and body.lhs.tensor == p.target and _pure(body.rhs, (*pre, jj, ee)))


def emit(op: Op, plan: FlashPlan, sizes: Mapping[str, int], target=None,
         config: Mapping | None = None) -> KernelSource | None:
    """The flash kernel, or None when head sizes exceed the stack tiles (the generic path runs)."""
    cfg = {"bq": 64, "bk": 96, "threads": int(getattr(target, "cores", 0) or 1), **(config or {})}
    ext = stmt_extents(op, 0)
    free = {n: f.evaluate(dict(sizes)) for n, f in ext.free.items()}
    S, T = free[plan.i], free[plan.j]
    D = ext.reductions[plan.reduce][plan.reduce.indices[0]].evaluate(dict(sizes))
    E = stmt_extents(op, 4).free[op.stmts[4].indices[-1]].evaluate(dict(sizes))
    if D > MAX_HEAD or E > MAX_HEAD:
        return None
    tiles = choose_tiles(target)
    # A query block is whole micro-tiles of queries, a key block whole micro-tiles of keys,
    # never larger than the (rounded-up) sequence lengths, so short ones keep small stack tiles.
    bq = min(max(tiles.qt, int(cfg["bq"]) // tiles.qt * tiles.qt), -(-S // tiles.qt) * tiles.qt)
    bk = min(max(tiles.mr, int(cfg["bk"]) // tiles.mr * tiles.mr), -(-T // tiles.mr) * tiles.mr)
    shapes = {t: [f.evaluate(dict(sizes)) for f in op.tensor(t).shape]
              for t in (plan.q, plan.k, plan.v, plan.out, *filter(None, plan.saves))}
    w = CodeWriter(default_line=op.line)
    entry = f"uol_{op.name}"
    args = [d.name for d in op.inputs] + [d.name for d in op.outputs]
    w.emit(f"/* {op.name}: flash attention generated by UOL ({GENERATOR}); S={S} T={T} D={D} "
           f"E={E}, BQ={bq} BK={bk}, {tiles.mr}x{tiles.qt} register tiles ({tiles.isa}).\n"
           "   Scores, mx, p, l stay in per-thread tiles: the S x T matrix is never stored."
           + (" The row statistics " + ", ".join(filter(None, plan.saves)) + " are written too,"
              " for the flash backward." if any(plan.saves) else "") + " */")
    w.emit("#include <stdint.h>\n#include <math.h>\n#include <omp.h>" + PRELUDE)
    w.emit(tiles.prelude())
    for name in op.dims:
        w.emit(f"#define {size_id(name)} {int(sizes[name])}")
    w.emit("")
    w.emit(score_kernel(tiles, D, bq), op.stmts[0].line)
    for rows in sorted({min(E, tiles.mr), E % tiles.mr} - {0}, reverse=True):
        w.emit(value_kernel(tiles, rows, bq, E), op.stmts[4].line)
    line = op.stmts[0].line
    w.emit(f"void {entry}(void **args, const int64_t *strides)\n{{\n    (void)strides;")
    for n, name in enumerate(args):
        qual = "const " if n < len(op.inputs) else ""
        w.emit(f"    {qual}float *restrict {tensor_id(name)} = ({qual}float *)args[{n}];")
    batch = [free[x] for x in plan.prefix]
    loops = [*batch, -(-S // bq)]
    w.emit(f"    #pragma omp parallel for collapse({len(loops)}) schedule(dynamic) "
           f"num_threads({int(cfg['threads'])})", line)
    for n, extent in enumerate(loops):
        w.emit(f"    {'    ' * n}for (int64_t o{n} = 0; o{n} < {extent}; ++o{n})", line)
    w.emit("    {", line)
    for n, name in enumerate(plan.prefix):
        w.emit(f"        const int64_t {index_id(name)} = o{n};", line)
    base = {t: _base(plan.prefix, shapes[t]) for t in shapes}
    _body(w, op, plan, dict(S=S, T=T, D=D, E=E, bq=bq, bk=bk), base, sizes, tiles)
    meta = {"isa": tiles.isa, "args": args, "outputs": [d.name for d in op.outputs],
            "threads": cfg["threads"],
            "generator": GENERATOR, "groups": 1, "reduction_length": max(T, D),
            "fusion": "flash: s, mx, p, l fused into O with an online softmax (never stored)"}
    return w.source(entry, op.name, dict(cfg), meta)


def _base(prefix: tuple[str, ...], shape: list[int]) -> str:
    """Offset of the batch slice: sum over prefix axes of index * stride, as C text (+ trailing)."""
    terms, stride = [], math.prod(shape[len(prefix):])
    for p in range(len(prefix) - 1, -1, -1):
        terms.append(f"{index_id(prefix[p])} * {stride} + ")
        stride *= shape[p]
    return "".join(reversed(terms))


def _addr(op: Op, sizes: Mapping[str, int]):
    """Addresses of reads outside the Q.K sum (e.g. a bias in the score expression)."""
    from uol_core.backends.c_expr import render_affine_c

    def address(a: Access) -> str:
        shape = [f.evaluate(dict(sizes)) for f in op.tensor(a.tensor).shape]
        terms, stride = [], 1
        for p in range(len(shape) - 1, -1, -1):
            terms.append(f"{render_affine_c(a.indices[p], set(op.dims))} * {stride}")
            stride *= shape[p]
        return f"{tensor_id(a.tensor)}[{' + '.join(reversed(terms)) or '0'}]"
    return address


def _body(w: CodeWriter, op: Op, plan: FlashPlan, n: dict, base: dict, sizes,
          tiles: Tiles) -> None:
    """One query block: Q^T packed, then per key block scores, online softmax and P.V in tiles."""
    S, T, D, E, bq, bk = (n[k] for k in ("S", "T", "D", "E", "bq", "bk"))
    mr, qt, L, pad = tiles.mr, tiles.qt, tiles.lanes, "        "
    me = min(mr, E)  # output columns per P.V tile; the last E % me columns use a narrower tile
    full = E // me * me
    tail = "" if full == E else (f"{pad}        uol_pv_tile{E - full}(nk, &st[0][i0], vb + {full}, "
                                 f"&ot[{full}][i0], &alpha[i0]);\n")
    Q, K, V, OUT = (tensor_id(t) for t in (plan.q, plan.k, plan.v, plan.out))
    ctx = ExprContext("float", {x: op.tensor(x).dtype for x in op.tensors}, _addr(op, sizes),
                      lambda a: "1", {}, set(op.dims))
    ctx.cache[id(plan.reduce)] = "st[jj][ii]"
    score = render(op.stmts[0].expr, ctx)
    # The score expression's own view of the indices, declared only when it reads them.
    jdef, idef = (f"const int64_t {index_id(x)} = {o} + {r};\n{pad}{sp}"
                  if index_id(x) in score else "" for x, o, r, sp in
                  ((plan.j, "k0", "jj", "        "), (plan.i, "q0", "ii", "            ")))
    al = "__attribute__((aligned(64)))"
    # Causal (j <= i + c): keys past the block's last query + c are masked for every query in
    # it (p = 0, the row max unchanged), so those key blocks are skipped.
    c = causal_offset(op.stmts[0].expr, plan.i, plan.j)
    k_hi = str(T) if c is None else f"({T} < q0 + nq + {c} ? {T} : q0 + nq + {c})"
    w.emit(f"""{pad}const int64_t q0 = o{len(plan.prefix)} * {bq};
{pad}const int64_t nq = {S} - q0 < {bq} ? {S} - q0 : {bq};
{pad}const int64_t nqt = (nq + {qt - 1}) / {qt} * {qt};  /* queries the micro-tiles cover */
{pad}float qt[{D}][{bq}] {al}, st[{bk}][{bq}] {al}, ot[{E}][{bq}] {al};
{pad}float m[{bq}] {al}, mnew[{bq}] {al}, l[{bq}] {al}, alpha[{bq}] {al};
{pad}for (int64_t d = 0; d < {D}; ++d)  /* Q^T of the block; queries past nq are zero */
{pad}    for (int64_t ii = 0; ii < {bq}; ++ii)
{pad}        qt[d][ii] = ii < nq ? {Q}[{base[plan.q]}(q0 + ii) * {D} + d] : 0.0f;
{pad}for (int64_t ii = 0; ii < {bq}; ++ii) {{  /* padding lanes keep m = 0: finite, never stored */
{pad}    m[ii] = ii < nq ? -INFINITY : 0.0f; l[ii] = 0.0f;
{pad}    for (int64_t e = 0; e < {E}; ++e) ot[e][ii] = 0.0f;
{pad}}}
{pad}for (int64_t k0 = 0; k0 < {k_hi}; k0 += {bk}) {{
{pad}    const int64_t nk = {T} - k0 < {bk} ? {T} - k0 : {bk};
{pad}    for (int64_t j0 = 0; j0 < nk; j0 += {mr}) {{  /* S^T = K Q^T: {mr} keys x {qt} queries per tile */
{pad}        const float *kr[{mr}];
{pad}        for (int64_t r = 0; r < {mr}; ++r)
{pad}            kr[r] = {K} + {base[plan.k]}(k0 + j0 + r < {T} ? k0 + j0 + r : {T - 1}) * {D};
{pad}        for (int64_t i0 = 0; i0 < nqt; i0 += {qt}) uol_qk_tile(kr, &qt[0][i0], &st[j0][i0]);
{pad}    }}
{pad}    for (int64_t ii = 0; ii < nqt; ++ii) mnew[ii] = m[ii];
{pad}    for (int64_t jj = 0; jj < nk; ++jj) {{  /* score expression, then the running row max */
{pad}        {jdef}#pragma omp simd
{pad}        for (int64_t ii = 0; ii < nq; ++ii) {{
{pad}            {idef}const float s = {score};""", op.stmts[0].line)
    w.emit(f"""{pad}            st[jj][ii] = s;
{pad}            mnew[ii] = s > mnew[ii] ? s : mnew[ii];
{pad}        }}
{pad}    }}""", op.stmts[1].line)
    w.emit(f"""{pad}    for (int64_t i0 = 0; i0 < nqt; i0 += {L}) {{  /* p = exp(s - m), alpha = exp(m_old - m) */
{pad}        const uol_v mv = uol_vld(&mnew[i0]);
{pad}        uol_v sum = uol_vset(0.0f);
{pad}        for (int64_t jj = 0; jj < nk; ++jj) {{
{pad}            const uol_v p = uol_vexp(uol_vsub(uol_vld(&st[jj][i0]), mv));
{pad}            uol_vst(&st[jj][i0], p);
{pad}            sum = uol_vadd(sum, p);
{pad}        }}""", op.stmts[2].line)
    w.emit(f"""{pad}        const uol_v a = uol_vexp(uol_vsub(uol_vld(&m[i0]), mv));
{pad}        uol_vst(&alpha[i0], a);
{pad}        uol_vst(&l[i0], uol_vfma(uol_vld(&l[i0]), a, sum));
{pad}        uol_vst(&m[i0], mv);
{pad}    }}""", op.stmts[3].line)
    w.emit(f"""{pad}    const float *vb = {V} + {base[plan.v]}k0 * {E};
{pad}    for (int64_t i0 = 0; i0 < nqt; i0 += {qt}) {{  /* O^T = alpha O^T + V^T P^T */
{pad}        for (int64_t e0 = 0; e0 < {full}; e0 += {me})
{pad}            uol_pv_tile{me}(nk, &st[0][i0], vb + e0, &ot[e0][i0], &alpha[i0]);
{tail}{pad}    }}
{pad}}}
{pad}for (int64_t ii = 0; ii < nq; ++ii) {{  /* O = O^T / l */
{pad}    const float inv = 1.0f / l[ii];
{pad}    float *restrict orow = {OUT} + {base[plan.out]}(q0 + ii) * {E};
{pad}    for (int64_t e = 0; e < {E}; ++e) orow[e] = ot[e][ii] * inv;
{_saves(plan, base, E, pad)}{pad}}}
    }}
}}""", op.stmts[4].line)


def _saves(plan: FlashPlan, base: dict, E: int, pad: str) -> str:
    """C lines writing the row statistics the op returns (mx, l) and z = O^T before / l."""
    mx, lsum, z = plan.saves
    lines = [f"{pad}    {tensor_id(t)}[{base[t]}q0 + ii] = {v}[ii];"
             for t, v in ((mx, "m"), (lsum, "l")) if t]
    if z:
        lines.append(f"{pad}    for (int64_t e = 0; e < {E}; ++e) "
                     f"{tensor_id(z)}[{base[z]}(q0 + ii) * {E} + e] = ot[e][ii];")
    return "".join(line + "\n" for line in lines)
