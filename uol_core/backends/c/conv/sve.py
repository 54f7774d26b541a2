"""Convolution for a vector-length-agnostic ISA (SVE): output pixels on the lanes, any width.

The direct path of c_conv_tiles with vectors of a run-time length. Per work item (image, block
of RB output rows) a thread copies the input rows the block reads into a padded row buffer
(uol_fill_rows, shared with the fixed-width path); an output row's pixels are then, for each
(c, r, s) of the reduction, one vector load from that buffer. The register tile is MR output
channels x NV output rows, one vector of pixels each: MR * NV accumulators, NV loads and the
filter value broadcast per FMA. Along a row the tile steps by the run-time lane count under the
predicate of the pixels still inside it, and the rows of a tile past the block take the empty
predicate, so every width, height and vector length is covered without scalar tails and
without the im2col fallback the fixed-width path needs for narrow outputs. A plain sum is
stored straight from the registers under the same predicates; another epilogue (bias, relu)
runs on a per-thread tile of MR x NV vectors while it is stored. MR and NV follow from the
target's register count (an HFL fact) unless the config sets them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from uol_core.acg.config import lanes
from uol_core.backends.base import KernelSource
from uol_core.backends.c.conv.tiles import _fill_rows
from uol_core.backends.c.platforms import platform
from uol_core.backends.c.text.expr import PRELUDE
from uol_core.backends.c.text.frame import includes
from uol_core.backends.c.text.names import index_id, size_id, tensor_id
from uol_core.backends.c.text.writer import CodeWriter, render_const
from uol_core.odl.check import stmt_extents
from uol_core.odl.ir import Op

GENERATOR = "uol-c-conv-vla-1"
NV = 4  # output rows per register tile


@dataclass(frozen=True)
class VlaRows:
    """Geometry of the length-agnostic direct path (in floats, no lane count in it)."""

    mr: int  # output channels per tile
    nv: int  # output rows per tile
    wp: int  # buffer row: OW + S - 1 (a predicated load reads no lane past the row)
    rb: int  # output rows per work item
    br: int  # buffer rows per work item: RB + R - 1
    nrb: int  # work items per image

    @property
    def plane(self) -> int:
        return self.br * self.wp


def vla_rows(target, cfg: Mapping, dims: Mapping[str, int]) -> VlaRows:
    """MR x NV from the registers (MR * NV accumulators, NV loads, one broadcast); RB: the
    config's `chunk`, else the fewest rows (at least R - 1) that are whole tiles, keeping the
    buffer within a quarter of the L2."""
    regs = int(getattr(target, "vector_registers", 0) or 16)
    nv = int(cfg.get("nv") or NV)
    mr = int(cfg.get("mr") or max(1, (regs - nv - 1) // nv))
    cdim, oh, ow, rdim, sdim = (dims[k] for k in ("cdim", "oh", "ow", "rdim", "sdim"))
    wp = ow + sdim - 1
    if cfg.get("chunk"):
        rb = min(oh, int(cfg["chunk"]))
    else:
        limit = max(1, min(oh, int(target.l2_bytes or 1 << 20) // 4 // (4 * cdim * wp) - (rdim - 1)))
        lo = min(limit, max(1, rdim - 1))
        rb = next((r for r in range(lo, limit + 1) if r % nv == 0), lo)
    return VlaRows(mr, nv, wp, rb, rb + rdim - 1, math.ceil(oh / rb))


def emit(op: Op, plan, sizes: Mapping[str, int], target, cfg: Mapping, isa: str,
         threads: int) -> KernelSource:
    """The length-agnostic convolution kernel of a recognised plan (plans/conv.py, conv_plan)."""
    # a circle: emitter.py imports this module at its top, so this import waits for the call
    from uol_core.backends.c.conv.emitter import _entry_head, _epilogue, _pack_filter, _strides

    line = op.stmts[0].line
    ext = stmt_extents(op, 0)
    free = {n: f.evaluate(dict(sizes)) for n, f in ext.free.items()}
    red = {n: f.evaluate(dict(sizes)) for n, f in ext.reductions[plan.reduce].items()}
    shapes = {d.name: [f.evaluate(dict(sizes)) for f in d.shape] for d in op.inputs + op.outputs}
    strides = {x: _strides(s) for x, s in shapes.items()}
    nb, mdim, oh, ow = (free[i] for i in (plan.b, plan.m, plan.y, plan.xw))
    cdim, rdim, sdim = red[plan.c], red[plan.r], red[plan.s]
    ih, iw = shapes[plan.x.tensor][2], shapes[plan.x.tensor][3]
    dims = {"cdim": cdim, "oh": oh, "ow": ow, "rdim": rdim, "sdim": sdim, "iw": iw}
    t = vla_rows(target, cfg, dims)
    kdim = cdim * rdim * sdim
    fst = {name: strides[plan.f.tensor][d] for d, name in
           enumerate(i.pure_symbol for i in plan.f.indices)}
    xs, ys = strides[plan.x.tensor], strides[plan.out]
    padv = render_const(plan.x.pad if plan.x.pad is not None else 0.0)
    value, uses = _epilogue(op, strides)
    direct = value.strip("() ") == "acc"  # a plain sum: stored straight from the registers
    plat = platform(isa)
    w = CodeWriter(default_line=op.line)
    entry = f"uol_{op.name}"
    args = [d.name for d in op.inputs] + [d.name for d in op.outputs]
    w.emit(f"/* {op.name}: convolution as implicit GEMM generated by UOL ({GENERATOR}) for target "
           f"{target.name}.\n   sizes: {', '.join(f'{k}={v}' for k, v in sizes.items())}\n"
           f"   per image: [{plan.m}] x [{plan.y}*{plan.xw}] = F[{plan.m}, ({plan.c},{plan.r},"
           f"{plan.s})] x X windows read from a padded row buffer (RB={t.rb} rows per item); "
           f"MR={t.mr} channels x NV={t.nv} rows of {plat.vla_step} pixels ({isa}, "
           f"{lanes(isa, target)} on the target) */")
    w.emit(includes("stdint.h", "stdlib.h", "string.h", "math.h", "omp.h"))
    w.emit(plat.include + "\n" + plat.vla_prelude)
    for name in op.dims:
        w.emit(f"#define {size_id(name)} {int(sizes[name])}")
    w.emit(f"#define MR {t.mr}\n#define NV {t.nv}\n#define MDIM {mdim}\n"
           f"#define MPAD {math.ceil(mdim / t.mr) * t.mr}\n#define KDIM {kdim}\n"
           f"#define CDIM {cdim}\n#define OH {oh}\n#define OW {ow}\n#define IH {ih}\n"
           f"#define IW {iw}\n#define RS {rdim}\n#define SS {sdim}\n#define BATCH {nb}\n"
           f"#define THREADS {threads}\n#define WP {t.wp}\n#define RB {t.rb}\n#define BR {t.br}\n"
           f"#define PLANE {t.plane}\n#define NRB {t.nrb}\n")
    w.emit(PRELUDE + "\n")
    _pack_filter(w, plan, fst, line)
    _fill_rows(w, plan, t, xs, padv, dims, line)
    _micro(w, t, rdim, sdim, line)
    _entry_head(w, op, entry, args, line)
    _driver(w, plan, t, xs, ys, value, plan.xw in uses, direct, cdim, line)
    fusion = (f"conv template, direct, length-agnostic: padded row buffer ({t.rb} output rows "
              f"per item) read by an {t.mr}-channel x {t.nv}-row vector tile; "
              + ("stored from the registers" if direct else "epilogue fused into the store"))
    meta = {"isa": isa, "args": args, "outputs": [d.name for d in op.outputs],
            "threads": threads, "generator": GENERATOR, "reduction_length": kdim,
            "flops": 2 * nb * mdim * oh * ow * kdim, "fusion": fusion}
    return w.source(entry, op.name, {**cfg, "threads": threads}, meta)


def _micro(w: CodeWriter, t: VlaRows, rdim: int, sdim: int, line: int) -> None:
    acc = [[f"c{i}_{v}" for v in range(t.nv)] for i in range(t.mr)]
    w.emit(f"""/* Micro-kernel: MR channels x NV output rows (nrows of them inside the block) x one vector of
   pixels [x0, x0 + ncols) each, over the whole reduction: {t.mr * t.nv} accumulators. The filter
   panel a is KDIM x MR; row v of the tile reads buf + v * WP + c * PLANE + r * WP + s. The tile
   is stored under the same predicates at c + i * ldi + v * ldv, channels i < mrows. */
static inline void uol_micro_rows(const float *restrict a, const float *restrict b, int64_t nrows,
                                  int64_t ncols, float *restrict c, int64_t ldi, int64_t ldv,
                                  int64_t mrows)
{{
    const uol_p all = uol_pwhile(0, ncols);""", line)
    w.emit("    const uol_p " + ", ".join(f"p{v} = {v} < nrows ? all : uol_pnone()" if v else "p0 = all"
                                          for v in range(t.nv)) + ";", line)
    for row in acc:
        w.emit("    uol_v " + ", ".join(f"{c} = uol_vzero()" for c in row) + ";", line)
    window = rdim * sdim
    unroll_c = f"#pragma GCC unroll {4 // window}\n" if window < 4 else ""
    w.emit(f"{unroll_c}    for (int64_t c = 0; c < CDIM; ++c)\n"
           f"#pragma GCC unroll {min(rdim, 8)}\n"
           "    for (int64_t r = 0; r < RS; ++r)\n"
           f"#pragma GCC unroll {min(sdim, 8)}\n"
           "    for (int64_t s = 0; s < SS; ++s) {\n"
           "        const float *restrict q = b + c * PLANE + r * WP + s;", line)
    w.emit("        const uol_v " + ", ".join(f"x{v} = uol_vld(p{v}, q + {v} * WP)"
                                              for v in range(t.nv)) + ";", line)
    for i, row in enumerate(acc):
        w.emit(f"        {{ const float f = a[{i}]; "
               + " ".join(f"{c} = uol_vfmas(p{v}, {c}, x{v}, f);" for v, c in enumerate(row))
               + " }", line)
    w.emit("        a += MR;\n    }", line)
    for i, row in enumerate(acc):
        stores = " ".join(f"uol_vst(p{v}, c + {i} * ldi + {v} * ldv, {cv});"
                          for v, cv in enumerate(row))
        w.emit(f"    {stores}" if i == 0 else f"    if ({i} < mrows) {{ {stores} }}", line)
    w.emit("}\n", line)


def _driver(w: CodeWriter, plan, t: VlaRows, xs: list[int], ys: list[int], value: str,
            uses_x: bool, direct: bool, cdim: int, line: int) -> None:
    """The entry's parallel region (after its head has allocated the packed filter Ap)."""
    b, m, y = index_id(plan.b), index_id(plan.m), index_id(plan.y)
    out = tensor_id(plan.out)
    buf_len = math.ceil(cdim * t.plane / 16) * 16
    w.emit("#pragma omp parallel num_threads(THREADS)\n    {", line)
    w.emit(f"    float *buf = aligned_alloc(64, (sizeof(float) * {buf_len} + 63) / 64 * 64);\n"
           "    const int64_t L = uol_lanes();", line)
    if not direct:
        w.emit("    /* MR x NV vectors of the run-time length, for the epilogue */\n"
               "    float *tile = aligned_alloc(64, (sizeof(float) * MR * NV * L + 63) / 64 * 64);",
               line)
    w.emit("#pragma omp for schedule(static)\n"
           "    for (int64_t panel = 0; panel < MPAD / MR; ++panel)\n"
           f"        uol_pack_filter({tensor_id(plan.f.tensor)}, Ap + panel * MR * KDIM, panel);",
           line)
    w.emit(f"    /* work items: (image {plan.b}, block of RB output rows {plan.y}) */\n"
           "#pragma omp for schedule(dynamic, 1)\n"
           "    for (int64_t item = 0; item < BATCH * NRB; ++item) {\n"
           f"        const int64_t {b} = item / NRB, y0 = item % NRB * RB;\n"
           "        const int64_t rows = OH - y0 < RB ? OH - y0 : RB;\n"
           f"        uol_fill_rows({tensor_id(plan.x.tensor)} + {b} * {xs[0]}, y0, rows + RS - 1,"
           " buf);\n"
           "        for (int64_t panel = 0; panel < MPAD / MR; ++panel) {\n"
           "            const int64_t mrows = MDIM - panel * MR < MR ? MDIM - panel * MR : MR;\n"
           "            for (int64_t yy = 0; yy < rows; yy += NV)\n"
           "            for (int64_t x0 = 0; x0 < OW; x0 += L) {", line)
    if direct:
        w.emit(f"                float *yt = {out} + {b} * {ys[0]} + panel * MR * {ys[1]} + "
               f"(y0 + yy) * {ys[2]} + x0;\n"
               "                uol_micro_rows(Ap + panel * MR * KDIM, buf + yy * WP + x0, rows - yy,"
               f" OW - x0, yt, {ys[1]}, {ys[2]}, mrows);\n"
               "            }\n        }\n    }", line)
        w.emit("    free(buf);\n    }\n    free(Ap);\n}", line)
        return
    w.emit("                uol_micro_rows(Ap + panel * MR * KDIM, buf + yy * WP + x0, rows - yy,"
           " OW - x0, tile, NV * L, L, mrows);\n"
           "                const int64_t len = OW - x0 < L ? OW - x0 : L;\n"
           f"                /* epilogue: {plan.out}[{plan.b}, {plan.m}, {plan.y}, {plan.xw}] from "
           "the tile */\n"
           "                for (int64_t i = 0; i < mrows; ++i)\n"
           "                for (int64_t v = 0; v < NV && yy + v < rows; ++v) {\n"
           f"                    const int64_t {m} = panel * MR + i, {y} = y0 + yy + v;\n"
           f"                    float *restrict yrow = {out} + {b} * {ys[0]} + {m} * {ys[1]} + "
           f"{y} * {ys[2]} + x0;\n"
           "#pragma omp simd\n"
           "                    for (int64_t j = 0; j < len; ++j) {\n"
           "                        const float acc = tile[(i * NV + v) * L + j];", line)
    if uses_x:
        w.emit(f"                        const int64_t {index_id(plan.xw)} = x0 + j;", line)
    w.emit(f"                        yrow[j] = {value};\n"
           "                    }\n                }\n            }\n        }\n    }", line)
    w.emit("    free(buf); free(tile);\n    }\n    free(Ap);\n}", line)
