"""Flash attention for a vector-length-agnostic ISA (SVE): the head dimension on the lanes.

The fixed-width template (attention.forward) puts a tile of queries on the lanes, so its block sizes
are whole vectors, which a lane count read at run time cannot give. Here a vector runs along
the head dimension (D for Q.K, E for P.V) and every loop over it steps by the run-time lane
count under the predicate of the lanes still inside the row: any D, E and any vector length,
no scalar tails. Register tiles count vectors, not lanes:
    score tile   MQ queries x NJ keys: MQ * NJ accumulators over D, one horizontal sum each
    value tile   MQ queries x NE vectors of E: O = alpha O + P V, P broadcast from the scores
The online softmax walks one query's row of BK scores with vectors along the keys: the row
max by a vector max and one horizontal max, p = exp(s - m) by the platform's vector exp and
the row sum by one horizontal sum. Nothing of size S x T is stored. MQ, NJ and NE come from
the target's register count (an HFL fact). The backward (c_attention_bwd_sve) uses the same
two tile kinds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from uol_core.acg.config import lanes, target_isas
from uol_core.backends.base import KernelSource
from uol_core.backends.c.platforms import platform
from uol_core.backends.c.text.expr import PRELUDE, ExprContext, render
from uol_core.backends.c.text.frame import includes, open_entry
from uol_core.backends.c.text.names import index_id, size_id, tensor_id
from uol_core.backends.c.text.writer import CodeWriter
from uol_core.odl.check import stmt_extents
from uol_core.odl.ir import Op
from uol_core.odl.masks import causal_offset

GENERATOR = "uol-c-flash-vla-1"
MQ = 4  # query rows per register tile: each vector of keys or values is reused MQ times
AL = "__attribute__((aligned(64)))"


def vla_isa(target) -> str | None:
    """The target's length-agnostic ISA when its record has one (SVE), else None."""
    if target is None:
        return None
    return next((i for i in target_isas(target, vla=True) if platform(i).vla), None)


@dataclass(frozen=True)
class VlaTiles:
    """Register tiles in vectors of run-time length: MQ rows x NJ dot products, MQ x NE vectors."""

    isa: str
    mq: int
    nj: int  # keys (or values) per score tile: NJ loads + MQ * NJ accumulators + 1
    ne: int  # vectors of a row per accumulate tile
    target_lanes: int  # the lanes the target's cores have (stated in comments, never used)

    def prelude(self) -> str:
        """The ISA's include, its predicated vocabulary and its vector exp."""
        plat = platform(self.isa)
        return plat.include + "\n" + plat.vla_prelude + plat.vector_math(self.target_lanes)

    def note(self) -> str:
        return (f"{self.mq}x{self.nj} dot and {self.mq}x{self.ne}-vector tiles of "
                f"{platform(self.isa).vla_step} lanes ({self.isa}, {self.target_lanes} on the target)")


def choose_vla_tiles(isa: str, target) -> VlaTiles:
    """NJ = NE so that MQ * N accumulators, N loads and one more vector fit the registers."""
    regs = int(getattr(target, "vector_registers", 0) or 16)
    n = max(1, min(4, (regs - 1) // (MQ + 1)))
    return VlaTiles(isa, MQ, n, n, lanes(isa, target))


def dot_kernel(t: VlaTiles, name: str, depth: int, ldo: int, rows: int | None = None) -> str:
    """<name>: out[r * ldo + j] = a[r] . b[j] over `depth` floats, r < rows (MQ), j < NJ."""
    rows = rows or t.mq
    acc = [[f"c{r}_{j}" for j in range(t.nj)] for r in range(rows)]
    zero = "\n".join("    uol_v " + ", ".join(f"{c} = uol_vzero()" for c in row) + ";" for row in acc)
    fmas = "\n".join(f"        {{ const uol_v x = uol_vld(pg, a{r} + d); "
                     + " ".join(f"{c} = uol_vfma(pg, {c}, x, b{j}v);" for j, c in enumerate(row))
                     + " }" for r, row in enumerate(acc))
    sums = "\n".join("    " + " ".join(f"out[{r * ldo + j}] = uol_vsum({c});"
                                       for j, c in enumerate(row)) for r, row in enumerate(acc))
    ptrs = ", ".join([f"*a{r} = a[{r}]" for r in range(rows)] + [f"*b{j} = b[{j}]" for j in range(t.nj)])
    loads = ", ".join(f"b{j}v = uol_vld(pg, b{j} + d)" for j in range(t.nj))
    return f"""/* {rows} x {t.nj} dot products of {depth} floats, the vectors along them: {rows * t.nj}
   accumulators (inactive lanes stay 0), one horizontal sum each at the end. */
static inline void {name}(const float *const *restrict a, const float *const *restrict b,
                               float *restrict out)
{{
    const float {ptrs};
{zero}
    for (int64_t d = 0; d < {depth}; d += uol_lanes()) {{
        const uol_p pg = uol_pwhile(d, {depth});
        const uol_v {loads};
{fmas}
    }}
{sums}
}}
"""


def acc_kernel(t: VlaTiles, name: str, rows: int, width: int, a_row: int, a_k: int, ldb: int,
               ldc: int, scaled: bool = False) -> str:
    """<name>: C[r][0, width) = (beta[r]) C[r] + sum_k A(r, k) B[k], r < rows, k < nk, with
    A(r, k) = a[r * a_row + k * a_k] broadcast and the rows of B (stride ldb) and C (stride
    ldc) along the lanes, NE vectors per step, each under its own tail predicate."""
    acc = [[f"c{r}_{v}" for v in range(t.ne)] for r in range(rows)]
    off = ["" if v == 0 else f" + {v} * L" if v > 1 else " + L" for v in range(t.ne)]
    preds = ", ".join(f"p{v} = uol_pwhile(e0{off[v]}, {width})" for v in range(t.ne))

    def start(r: int, v: int) -> str:
        load = f"uol_vld(p{v}, c + {r * ldc} + e0{off[v]})"
        return f"uol_vmuls(p{v}, {load}, beta[{r}])" if scaled else load
    load = "\n".join("        uol_v " + ", ".join(f"{c} = {start(r, v)}" for v, c in enumerate(row))
                     + ";" for r, row in enumerate(acc))
    bs = ", ".join(f"b{v} = uol_vld(p{v}, bk{off[v]})" for v in range(t.ne))
    fmas = "\n".join(f"            {{ const float x = a[{r * a_row} + k * {a_k}]; "
                     + " ".join(f"{c} = uol_vfmas(p{v}, {c}, b{v}, x);" for v, c in enumerate(row))
                     + " }" for r, row in enumerate(acc))
    stores = "\n".join("        " + " ".join(f"uol_vst(p{v}, c + {r * ldc} + e0{off[v]}, {c});"
                                             for v, c in enumerate(row)) for r, row in enumerate(acc))
    beta = ", const float *restrict beta" if scaled else ""
    return f"""/* {rows} rows x {width} columns{', rescaled by beta,' if scaled else ''} += A B over nk: {rows} x {t.ne} vectors of
   accumulators per step of {t.ne} vectors along the row. */
static inline void {name}(int64_t nk, const float *restrict a, const float *restrict b,
                               float *restrict c{beta})
{{
    const int64_t L = uol_lanes();
    for (int64_t e0 = 0; e0 < {width}; e0 += {t.ne} * L) {{
        const uol_p {preds};
{load}
        for (int64_t k = 0; k < nk; ++k) {{
            const float *restrict bk = b + k * {ldb} + e0;
            const uol_v {bs};
{fmas}
        }}
{stores}
    }}
}}
"""


def emit(op: Op, plan, sizes: Mapping[str, int], target, config: Mapping | None,
         isa: str) -> KernelSource:
    """The length-agnostic flash kernel of a recognised attention (c_attention.flash_plan)."""
    # a circle: forward.py imports this module at its top, so this import waits for the call
    from uol_core.backends.c.attention.forward import (
        FORWARD_BLOCKS,
        _addr,
        _base,
        attention_extents,
        open_query_blocks,
        whole_tiles,
    )

    t = choose_vla_tiles(isa, target)
    cfg = {**FORWARD_BLOCKS, "threads": int(getattr(target, "cores", 0) or 1), **(config or {})}
    free = {n: f.evaluate(dict(sizes)) for n, f in stmt_extents(op, 0).free.items()}
    S, T, D, E, _ = attention_extents(op, plan, sizes)
    bq, bk = whole_tiles(cfg["bq"], t.mq, S), whole_tiles(cfg["bk"], t.nj, T)
    shapes = {x: [f.evaluate(dict(sizes)) for f in op.tensor(x).shape]
              for x in (plan.q.tensor, plan.k.tensor, plan.v.tensor, plan.out,
                        *filter(None, plan.saves))}
    base = {x: _base(plan.prefix, shapes[x]) for x in shapes}
    w = CodeWriter(default_line=op.line)
    entry = f"uol_{op.name}"
    args = [d.name for d in op.inputs] + [d.name for d in op.outputs]
    w.emit(f"/* {op.name}: flash attention generated by UOL ({GENERATOR}); S={S} T={T} D={D} "
           f"E={E}, BQ={bq} BK={bk}, {t.note()}.\n"
           "   The head dimension lies along the vectors, every loop over it predicated: one "
           "binary for every vector length.\n"
           "   Scores, mx, p, l stay in per-thread tiles: the S x T matrix is never stored."
           + (" The row statistics " + ", ".join(filter(None, plan.saves)) + " are written too,"
              " for the flash backward." if any(plan.saves) else "") + " */")
    w.emit(includes("stdint.h", "string.h", "math.h", "omp.h") + PRELUDE)
    w.emit(t.prelude())
    for name in op.dims:
        w.emit(f"#define {size_id(name)} {int(sizes[name])}")
    w.emit("")
    w.emit(dot_kernel(t, "uol_qk_tile", D, bk), op.stmts[0].line)
    w.emit(acc_kernel(t, "uol_pv_tile", t.mq, E, bk, 1, E, E, scaled=True), op.stmts[4].line)
    line = op.stmts[0].line
    open_entry(w, entry, args, len(op.inputs))
    open_query_blocks(w, plan.prefix, free, -(-S // bq), int(cfg["threads"]), line)
    _body(w, op, plan, dict(S=S, T=T, D=D, E=E, bq=bq, bk=bk), base, _addr(op, sizes), t)
    meta = {"isa": isa, "args": args, "outputs": [d.name for d in op.outputs],
            "threads": cfg["threads"], "generator": GENERATOR, "groups": 1,
            "reduction_length": max(T, D),
            "fusion": "flash: s, mx, p, l fused into O with an online softmax (never stored)"}
    return w.source(entry, op.name, dict(cfg), meta)


def _body(w: CodeWriter, op: Op, plan, n: dict, base: dict, address, t: VlaTiles) -> None:
    """One task: BQ query rows of one slice, the key blocks, O = O / l and the saves."""
    S, T, D, E, bq, bk = (n[k] for k in ("S", "T", "D", "E", "bq", "bk"))
    Q, K, V, OUT = (tensor_id(x) for x in (plan.q.tensor, plan.k.tensor, plan.v.tensor, plan.out))
    ctx = ExprContext("float", {x: op.tensor(x).dtype for x in op.tensors}, address,
                      lambda a: "1", {}, set(op.dims))
    ctx.cache[id(plan.reduce)] = "srow[jj]"
    score = render(op.stmts[0].expr, ctx)
    pad = "        "
    idef = f"const int64_t {index_id(plan.i)} = q0 + ii;\n{pad}        " \
        if index_id(plan.i) in score else ""
    jdef = f"const int64_t {index_id(plan.j)} = k0 + jj;\n{pad}            " \
        if index_id(plan.j) in score else ""
    c = causal_offset(op.stmts[0].expr, plan.i, plan.j)
    k_hi = str(T) if c is None else f"({T} < q0 + nq + {c} ? {T} : q0 + nq + {c})"

    def loop(why: str) -> str:
        return (f"for (int64_t jj = 0; jj < nk; jj += uol_lanes()) {{  /* {why} */\n"
                f"{pad}            const uol_p pg = uol_pwhile(jj, nk);")
    w.emit(f"""{pad}const int64_t q0 = o{len(plan.prefix)} * {bq};
{pad}const int64_t nq = {S} - q0 < {bq} ? {S} - q0 : {bq};
{pad}float sc[{bq}][{bk}] {AL}, o[{bq}][{E}] {AL}, m[{bq}], l[{bq}], alpha[{bq}];
{pad}const float *qr[{bq}], *kr[{bk}];
{pad}for (int64_t ii = 0; ii < {bq}; ++ii) {{  /* rows past nq repeat the last query: never stored */
{pad}    qr[ii] = {Q} + {base[plan.q.tensor]}(q0 + (ii < nq ? ii : nq - 1)) * {D};
{pad}    m[ii] = -INFINITY; l[ii] = 0.0f;
{pad}}}
{pad}memset(o, 0, sizeof o);
{pad}for (int64_t k0 = 0; k0 < {k_hi}; k0 += {bk}) {{
{pad}    const int64_t nk = {T} - k0 < {bk} ? {T} - k0 : {bk};
{pad}    for (int64_t jj = 0; jj < {bk}; ++jj)  /* keys past T repeat the last one: their scores go unused */
{pad}        kr[jj] = {K} + {base[plan.k.tensor]}(k0 + jj < {T} ? k0 + jj : {T - 1}) * {D};
{pad}    for (int64_t i0 = 0; i0 < {bq}; i0 += {t.mq})  /* S = Q K^T in {t.mq} x {t.nj} tiles */
{pad}        for (int64_t j0 = 0; j0 < nk; j0 += {t.nj}) uol_qk_tile(&qr[i0], &kr[j0], &sc[i0][j0]);
{pad}    for (int64_t ii = 0; ii < {bq}; ++ii) {{
{pad}        {idef}float *restrict srow = sc[ii];
{pad}        #pragma omp simd
{pad}        for (int64_t jj = 0; jj < nk; ++jj) {{  /* the score expression */
{pad}            {jdef}srow[jj] = {score};
{pad}        }}""", op.stmts[0].line)
    w.emit(f"""{pad}        uol_v mv = uol_vset(m[ii]);
{pad}        {loop("the running row max")}
{pad}            mv = uol_vmax(pg, mv, uol_vld(pg, srow + jj));
{pad}        }}
{pad}        const float mnew = uol_vhmax(mv);
{pad}        const float mref = mnew == -INFINITY ? 0.0f : mnew;  /* all -inf so far: no -inf - (-inf) = NaN */""",
           op.stmts[1].line)
    w.emit(f"""{pad}        uol_v sum = uol_vzero();
{pad}        {loop("p = exp(s - m) and its sum")}
{pad}            const uol_v p = uol_vexp(uol_vsubs(pg, uol_vld(pg, srow + jj), mref));
{pad}            uol_vst(pg, srow + jj, p);
{pad}            sum = uol_vadd(pg, sum, p);
{pad}        }}""", op.stmts[2].line)
    w.emit(f"""{pad}        alpha[ii] = uol_expf(m[ii] - mref);  /* rescales the old l and O */
{pad}        l[ii] = alpha[ii] * l[ii] + uol_vsum(sum);
{pad}        m[ii] = mnew;
{pad}    }}""", op.stmts[3].line)
    w.emit(f"""{pad}    const float *vb = {V} + {base[plan.v.tensor]}k0 * {E};
{pad}    for (int64_t i0 = 0; i0 < {bq}; i0 += {t.mq})  /* O = alpha O + P V */
{pad}        uol_pv_tile(nk, &sc[i0][0], vb, &o[i0][0], &alpha[i0]);
{pad}}}
{pad}for (int64_t ii = 0; ii < nq; ++ii) {{  /* O = O / l */
{pad}    const float inv = 1.0f / l[ii];
{pad}    float *restrict orow = {OUT} + {base[plan.out]}(q0 + ii) * {E};
{pad}    for (int64_t e = 0; e < {E}; e += uol_lanes()) {{
{pad}        const uol_p pg = uol_pwhile(e, {E});
{pad}        uol_vst(pg, orow + e, uol_vmuls(pg, uol_vld(pg, &o[ii][e]), inv));
{pad}    }}
{_saves(plan, base, E, pad)}{pad}}}
    }}
}}""", op.stmts[4].line)


def _saves(plan, base: dict, E: int, pad: str) -> str:
    """C lines writing the row statistics the op returns (mx, l) and z = O before / l."""
    mx, lsum, z = plan.saves
    lines = [f"{pad}    {tensor_id(x)}[{base[x]}q0 + ii] = {v}[ii];"
             for x, v in ((mx, "m"), (lsum, "l")) if x]
    if z:
        lines.append(f"{pad}    memcpy({tensor_id(z)} + {base[z]}(q0 + ii) * {E}, o[ii], "
                     f"sizeof(float) * {E});")
    return "".join(line + "\n" for line in lines)
