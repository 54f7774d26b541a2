"""Flash-style C attention: recognise naive attention in ODL and never materialise the score matrix.

Recognised statements (any index names, any leading batch indices P, any score expression
around the Q.K sum: scaling, a where-mask over index values):
    s[P, i, j] = f(sum[d](Q[P, i, d] * K[P, j, d]))      mx[P, i] = max[j](s[P, i, j])
    p[P, i, j] = exp(s[P, i, j] - mx[P, i])              l[P, i] = sum[j](p[P, i, j])
    O[P, i, e] = sum[j](p[P, i, j] * V[P, j, e]) / l[P, i]
Each thread owns BQ query rows; key blocks of BK rows stream through L1 (K transposed once per
block so scores vectorise over keys); softmax is online (running max m, sum l, rescaled acc).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from uol_core.backends.base import KernelSource
from uol_core.backends.c import CodeWriter, index_id, size_id, tensor_id
from uol_core.backends.c_expr import PRELUDE, ExprContext, render
from uol_core.odl.check import stmt_extents
from uol_core.odl.ir import Access, Binary, Call, DType, Op, Reduce, walk

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


def _pure(access, names) -> bool:
    return isinstance(access, Access) and tuple(f.pure_symbol for f in access.indices) == tuple(names)


def flash_plan(op: Op) -> FlashPlan | None:
    """The plan when `op` is naive attention as above (f32, intermediates not outputs), else None."""
    if len(op.stmts) != 5 or {d.dtype for d in op.inputs + op.outputs + op.locals} != {DType.f32}:
        return None
    s, mx, p, lsum, o = op.stmts
    if {s.target, mx.target, p.target, lsum.target} & {d.name for d in op.outputs}:
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
    v = o.expr.lhs.body.rhs.tensor
    return FlashPlan(a.tensor, b.tensor, v, o.target, tuple(prefix), i, j, red)


def _row_stats(op: Op, prefix: list[str]) -> bool:
    """mx = max_j s, p = exp(s - mx), l = sum_j p, each at matching positions."""
    s, mx, p, lsum, _ = op.stmts
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
    """O[P, i, e] = sum[j](p[P, i, j] * V[P, j, e]) / l[P, i]."""
    _, _, p, lsum, o = op.stmts
    e = o.expr
    if not (isinstance(e, Binary) and e.op == "div" and isinstance(e.lhs, Reduce)
            and e.lhs.op == "sum" and len(e.lhs.indices) == 1 and len(o.indices) == n + 2):
        return False
    jj = e.lhs.indices[0]
    body = e.lhs.body
    *pre, i, ee = o.indices
    return (isinstance(body, Binary) and body.op == "mul" and _pure(body.lhs, (*pre, i, jj))
            and body.lhs.tensor == p.target and _pure(body.rhs, (*pre, jj, ee))
            and _pure(e.rhs, (*pre, i)) and e.rhs.tensor == lsum.target)


def emit(op: Op, plan: FlashPlan, sizes: Mapping[str, int], target=None,
         config: Mapping | None = None) -> KernelSource | None:
    """The flash kernel, or None when head sizes exceed the stack tiles (the generic path runs)."""
    cfg = {"bq": 16, "bk": 64, "threads": int(getattr(target, "cores", 0) or 1), **(config or {})}
    ext = stmt_extents(op, 0)
    free = {n: f.evaluate(dict(sizes)) for n, f in ext.free.items()}
    S, T = free[plan.i], free[plan.j]
    D = ext.reductions[plan.reduce][plan.reduce.indices[0]].evaluate(dict(sizes))
    E = stmt_extents(op, 4).free[op.stmts[4].indices[-1]].evaluate(dict(sizes))
    if D > MAX_HEAD or E > MAX_HEAD:
        return None
    # The register tiles need BQ a multiple of RB rows and BK a multiple of JT keys.
    bq = max(RB, int(cfg["bq"]) // RB * RB)
    bk = max(JT, int(cfg["bk"]) // JT * JT)
    line = op.stmts[0].line
    shapes = {t: [f.evaluate(dict(sizes)) for f in op.tensor(t).shape]
              for t in (plan.q, plan.k, plan.v, plan.out)}
    w = CodeWriter(default_line=op.line)
    entry = f"uol_{op.name}"
    args = [d.name for d in op.inputs] + [d.name for d in op.outputs]
    w.emit(f"/* {op.name}: flash attention generated by UOL ({GENERATOR}); S={S} T={T} D={D} "
           f"E={E}, BQ={bq} BK={bk}.\n   Scores, mx, p, l stay in per-thread tiles: the S x T "
           "matrix is never stored. */")
    w.emit("#include <stdint.h>\n#include <math.h>\n#include <omp.h>" + PRELUDE)
    for name in op.dims:
        w.emit(f"#define {size_id(name)} {int(sizes[name])}")
    w.emit(f"\nvoid {entry}(void **args, const int64_t *strides)\n{{\n    (void)strides;")
    for n, name in enumerate(args):
        qual = "const " if n < len(op.inputs) else ""
        w.emit(f"    {qual}float *restrict {tensor_id(name)} = ({qual}float *)args[{n}];")
    batch = [free[x] for x in plan.prefix]
    nqb = -(-S // bq)
    loops = [*batch, nqb]
    w.emit(f"    #pragma omp parallel for collapse({len(loops)}) schedule(static) "
           f"num_threads({int(cfg['threads'])})", line)
    for n, extent in enumerate(loops):
        w.emit(f"    {'    ' * n}for (int64_t o{n} = 0; o{n} < {extent}; ++o{n})", line)
    w.emit("    {", line)
    pad = "        "
    for n, name in enumerate(plan.prefix):
        w.emit(f"{pad}const int64_t {index_id(name)} = o{n};", line)
    base = {t: _base(plan.prefix, shapes[t]) for t in shapes}
    _body(w, op, plan, dict(S=S, T=T, D=D, E=E, bq=bq, bk=bk), base, sizes, pad, line)
    meta = {"args": args, "outputs": [d.name for d in op.outputs], "threads": cfg["threads"],
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


RB, JT = 4, 16  # register tile: query rows x (keys or output columns), 8 ymm accumulators


def _body(w: CodeWriter, op: Op, plan: FlashPlan, n: dict, base: dict, sizes, pad: str,
          line: int) -> None:
    """Per query block: K and V blocks staged in L1, register-tiled Q.K and P.V, online softmax."""
    S, T, D, E, bq, bk = n["S"], n["T"], n["D"], n["E"], n["bq"], n["bk"]
    E16 = -(-E // JT) * JT
    Q, K, V, OUT = (tensor_id(t) for t in (plan.q, plan.k, plan.v, plan.out))
    ctx = ExprContext("float", {x: op.tensor(x).dtype for x in op.tensors}, _addr(op, sizes),
                      lambda a: "1", {}, set(op.dims))
    ctx.cache[id(plan.reduce)] = "sc[qi][jj]"
    score = render(op.stmts[0].expr, ctx)
    w.emit(f"""{pad}const int64_t q0 = o{len(plan.prefix)} * {bq};
{pad}const int64_t nq = {S} - q0 < {bq} ? {S} - q0 : {bq};
{pad}float m[{bq}], l[{bq}], acc[{bq}][{E16}], kt[{D}][{bk}], vt[{bk}][{E16}], sc[{bq}][{bk}];
{pad}for (int64_t qi = 0; qi < {bq}; ++qi) {{
{pad}    m[qi] = -INFINITY; l[qi] = 0.0f;
{pad}    for (int64_t e = 0; e < {E16}; ++e) acc[qi][e] = 0.0f;
{pad}}}
{pad}for (int64_t d = 0; d < {D}; ++d) for (int64_t jj = 0; jj < {bk}; ++jj) kt[d][jj] = 0.0f;
{pad}for (int64_t jj = 0; jj < {bk}; ++jj) for (int64_t e = 0; e < {E16}; ++e) vt[jj][e] = 0.0f;
{pad}for (int64_t k0 = 0; k0 < {T}; k0 += {bk}) {{
{pad}    const int64_t nk = {T} - k0 < {bk} ? {T} - k0 : {bk};
{pad}    for (int64_t jj = 0; jj < nk; ++jj) {{
{pad}        for (int64_t d = 0; d < {D}; ++d) kt[d][jj] = {K}[{base[plan.k]}(k0 + jj) * {D} + d];
{pad}        for (int64_t e = 0; e < {E}; ++e) vt[jj][e] = {V}[{base[plan.v]}(k0 + jj) * {E} + e];
{pad}    }}
{pad}    for (int64_t qi0 = 0; qi0 < {bq}; qi0 += {RB}) {{  /* scores: {RB} rows x {JT} keys in registers */
{pad}        const float *qr[{RB}];
{pad}        for (int64_t r = 0; r < {RB}; ++r) {{
{pad}            const int64_t qrow = q0 + qi0 + r < {S} ? q0 + qi0 + r : {S - 1};
{pad}            qr[r] = {Q} + {base[plan.q]}qrow * {D};
{pad}        }}
{pad}        for (int64_t j0 = 0; j0 < {bk}; j0 += {JT}) {{
{pad}            float s[{RB}][{JT}] = {{{{0}}}};
{pad}            for (int64_t d = 0; d < {D}; ++d) {{
{pad}                const float *kr = &kt[d][j0];
{pad}                #pragma GCC unroll {RB}
{pad}                for (int64_t r = 0; r < {RB}; ++r) {{
{pad}                    const float qv = qr[r][d];
{pad}                    #pragma omp simd
{pad}                    for (int64_t jj = 0; jj < {JT}; ++jj) s[r][jj] += qv * kr[jj];
{pad}                }}
{pad}            }}
{pad}            for (int64_t r = 0; r < {RB}; ++r)
{pad}                for (int64_t jj = 0; jj < {JT}; ++jj) sc[qi0 + r][j0 + jj] = s[r][jj];
{pad}        }}
{pad}    }}""", line)
    w.emit(f"""{pad}    for (int64_t qi = 0; qi < nq; ++qi) {{  /* score expression, online softmax */
{pad}        const int64_t {index_id(plan.i)} = q0 + qi;
{pad}        float mnew = m[qi];
{pad}        for (int64_t jj = 0; jj < nk; ++jj) {{
{pad}            const int64_t {index_id(plan.j)} = k0 + jj;
{pad}            sc[qi][jj] = {score};
{pad}            mnew = sc[qi][jj] > mnew ? sc[qi][jj] : mnew;
{pad}        }}
{pad}        const float alpha = uol_expf(m[qi] - mnew);
{pad}        float sum = 0.0f;
{pad}        #pragma omp simd reduction(+:sum)
{pad}        for (int64_t jj = 0; jj < nk; ++jj) {{ sc[qi][jj] = uol_expf(sc[qi][jj] - mnew); sum += sc[qi][jj]; }}
{pad}        l[qi] = l[qi] * alpha + sum; m[qi] = mnew;
{pad}        #pragma omp simd
{pad}        for (int64_t e = 0; e < {E16}; ++e) acc[qi][e] *= alpha;
{pad}    }}""", op.stmts[2].line)
    w.emit(f"""{pad}    for (int64_t qi0 = 0; qi0 < nq; qi0 += {RB}) {{  /* P.V: {RB} rows x {JT} columns in registers */
{pad}        for (int64_t e0 = 0; e0 < {E16}; e0 += {JT}) {{
{pad}            float a[{RB}][{JT}];
{pad}            for (int64_t r = 0; r < {RB}; ++r)
{pad}                for (int64_t e = 0; e < {JT}; ++e) a[r][e] = acc[qi0 + r][e0 + e];
{pad}            for (int64_t jj = 0; jj < nk; ++jj) {{
{pad}                const float *vr = &vt[jj][e0];
{pad}                #pragma GCC unroll {RB}
{pad}                for (int64_t r = 0; r < {RB}; ++r) {{
{pad}                    const float pv = sc[qi0 + r][jj];
{pad}                    #pragma omp simd
{pad}                    for (int64_t e = 0; e < {JT}; ++e) a[r][e] += pv * vr[e];
{pad}                }}
{pad}            }}
{pad}            for (int64_t r = 0; r < {RB}; ++r)
{pad}                for (int64_t e = 0; e < {JT}; ++e) acc[qi0 + r][e0 + e] = a[r][e];
{pad}        }}
{pad}    }}
{pad}}}
{pad}for (int64_t qi = 0; qi < nq; ++qi) {{
{pad}    const float inv = 1.0f / l[qi];
{pad}    float *restrict orow = {OUT} + {base[plan.out]}(q0 + qi) * {E};
{pad}    #pragma omp simd
{pad}    for (int64_t e = 0; e < {E}; ++e) orow[e] = acc[qi][e] * inv;
{pad}}}
    }}
}}""", op.stmts[4].line)
