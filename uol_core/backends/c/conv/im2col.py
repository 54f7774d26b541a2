"""im2col path of the C convolution template (output rows too narrow for the direct path).

The GEMM Y[m, pixel] = F[m, (c,r,s)] x B[(c,r,s), pixel] runs over the pixels of the whole
batch at once: pixel P is image P / PIX, position P % PIX. Work items are blocks of NCB pixels
(NR-column micro-panels); a block may span images, so a 7x7 output (49 pixels) does not pad
each image to whole micro-panels: 8 images are 392 pixels in 13 panels of 32 (94% of the
lanes busy), not 8 x 64 (77%). Each thread packs its block's im2col panel (KC x NCB, pad
values filled in while packing) and runs the c_gemm micro-kernel, accumulating in a private
MPAD x NCB buffer; the epilogue runs while the block is stored, image segment by segment.
A strided window (pixel (y, x) reads input row SY * y + r + o1, column SX * x + s + o2) is
packed the same way, each segment's input columns SX apart: the panel the micro-kernel reads
is the same for every stride, and a 1x1 stride-2 window's subsampling is its packing (no
separate subsampled copy of X).
"""

from __future__ import annotations

import math

from uol_core.backends.c.text.names import index_id, tensor_id
from uol_core.backends.c.text.writer import CodeWriter
from uol_core.plans.conv import ConvPlan, makespan


def pixel_block(pixels: int, nr: int, most_panels: int, threads: int) -> int:
    """Pixels per work item: a whole number of NR-pixel micro-panels, at most `most_panels`
    (the platform file's bound: the packed block stays in the L2), chosen for the least
    modelled makespan (blocks handed to the first free thread, each costing its panels), then
    the most panels (fewer passes over the packed filter)."""
    total = math.ceil(pixels / nr)

    def blocks(per_block: int) -> list[int]:  # panels per work item
        return [min(per_block, total - start) for start in range(0, total, per_block)]

    best = min(range(1, max(1, min(most_panels, total)) + 1),
               key=lambda p: (makespan(blocks(p), threads), -p))
    return best * nr


def pack_im2col(w: CodeWriter, plan: ConvPlan, xs: list[int], padv: str, line: int) -> None:
    """`uol_pack_im2col`: one micro-panel of the batch's im2col matrix. Unit-stride windows
    keep the text they always had (their kernels are unchanged)."""
    y, x, c, r, s = (index_id(i) for i in (plan.y, plan.xw, plan.c, plan.r, plan.s))
    sy = f"{plan.stride_y} * " if plan.stride_y != 1 else ""
    sx = f"{plan.stride_x} * " if plan.stride_x != 1 else ""
    # the last pixel's column, and pixel t's offset in the row, SX input columns apart
    last, at = (f"ix0 + (len - 1) * {plan.stride_x} < IW", f"t * {plan.stride_x}") if sx else \
        ("ix0 + len <= IW", "t")
    strided = (f" (stride {plan.stride_y}x{plan.stride_x}: pixel ({y}, {x}) reads row "
               f"{sy}{y} + {r} + ({plan.off_y}), column {sx}{x} + {s} + ({plan.off_x}))"
               if plan.strided else "")
    w.emit(f"""\
/* im2col micro-panel: reduction rows [q0, q0 + kc) x pixels [p0, p0 + np) of the batch of \
{plan.x.tensor}{strided} (pixel P: image P / PIX, position P % PIX), as kc x NR;
   pixels split into output-row segments; reads outside the input take {padv}, columns past np 0. */
static void uol_pack_im2col(const float *restrict X, int64_t q0, int64_t kc, int64_t p0,
                            int64_t np, float *restrict out)
{{
    int64_t seg_j[NR + 1], seg_b[NR], seg_y[NR], seg_x[NR], nseg = 0;
    for (int64_t j = 0; j < np; ) {{
        const int64_t pixel = p0 + j, {y} = pixel % PIX / OW, {x} = pixel % OW;
        const int64_t len = OW - {x} < np - j ? OW - {x} : np - j;
        seg_j[nseg] = j; seg_b[nseg] = pixel / PIX; seg_y[nseg] = {y}; seg_x[nseg] = {x}; ++nseg;
        j += len;
    }}
    seg_j[nseg] = np;
    int64_t {c} = q0 / (RS * SS), {r} = q0 / SS % RS, {s} = q0 % SS;
    for (int64_t p = 0; p < kc; ++p) {{
        float *restrict o = out + p * NR;
        for (int64_t g = 0; g < nseg; ++g) {{
            const float *restrict xc = X + seg_b[g] * {xs[0]} + {c} * {xs[1]};
            const int64_t j0 = seg_j[g], len = seg_j[g + 1] - j0;
            const int64_t iy = {sy}seg_y[g] + {r} + ({plan.off_y});
            const int64_t ix0 = {sx}seg_x[g] + {s} + ({plan.off_x});
            if (iy < 0 || iy >= IH) {{
                for (int64_t t = 0; t < len; ++t) o[j0 + t] = {padv};
            }} else if (ix0 >= 0 && {last}) {{
                const float *restrict row = xc + iy * {xs[2]} + ix0;
                for (int64_t t = 0; t < len; ++t) o[j0 + t] = row[{at}];
            }} else {{
                const float *restrict row = xc + iy * {xs[2]};
                for (int64_t t = 0; t < len; ++t) {{
                    const int64_t ix = ix0 + {at};
                    o[j0 + t] = ix >= 0 && ix < IW ? row[ix] : {padv};
                }}
            }}
        }}
        for (int64_t j = np; j < NR; ++j) o[j] = 0.0f;
        if (++{s} == SS) {{ {s} = 0; if (++{r} == RS) {{ {r} = 0; ++{c}; }} }}
    }}
}}
""", line)


def im2col_driver(w: CodeWriter, plan: ConvPlan, ys: list[int], value: str, used: set[str],
                  line: int, pack_filter: bool = True) -> None:
    """The entry's parallel region (after its head has allocated the packed filter Ap, which
    it packs and frees with `pack_filter`, else reads as given)."""
    b, m = index_id(plan.b), index_id(plan.m)
    w.emit("#pragma omp parallel num_threads(THREADS)\n    {", line)
    w.emit("    float *Bp = aligned_alloc(64, (sizeof(float) * KC * NCB + 63) / 64 * 64);\n"
           "    float *Cb = aligned_alloc(64, (sizeof(float) * MPAD * NCB + 63) / 64 * 64);\n"
           "    float tile[MR * NR] __attribute__((aligned(64)));", line)
    if pack_filter:
        w.emit("#pragma omp for schedule(static)\n"
               "    for (int64_t panel = 0; panel < MPAD / MR; ++panel)\n"
               f"        uol_pack_filter({tensor_id(plan.f.tensor)}, Ap + panel * MR * KDIM, panel);",
               line)
    w.emit("    /* work items: blocks of NCB pixels of the whole batch */\n"
           "#pragma omp for schedule(dynamic, 1)\n"
           "    for (int64_t item = 0; item < NBLK; ++item) {", line)
    w.emit("        const int64_t p0 = item * NCB;\n"
           "        const int64_t np = BATCH * PIX - p0 < NCB ? BATCH * PIX - p0 : NCB;\n"
           "        for (int64_t pc = 0; pc < KDIM; pc += KC) {\n"
           "            const int64_t kc = KDIM - pc < KC ? KDIM - pc : KC;\n"
           "            for (int64_t jr = 0; jr < np; jr += NR)\n"
           f"                uol_pack_im2col({tensor_id(plan.x.tensor)}, pc, kc, p0 + jr, "
           "np - jr < NR ? np - jr : NR, Bp + jr * kc);\n"
           "            for (int64_t ir = 0; ir < MPAD; ir += MR)\n"
           "            for (int64_t jr = 0; jr < np; jr += NR) {\n"
           "                uol_micro(kc, Ap + ir * KDIM + pc * MR, Bp + jr * kc, tile);\n"
           "                float *restrict cb = Cb + ir * NCB + jr;\n"
           "                if (pc == 0) {\n"
           "                    for (int64_t i = 0; i < MR; ++i)\n"
           "#pragma omp simd\n"
           "                        for (int64_t j = 0; j < NR; ++j) cb[i * NCB + j] = tile[i * NR + j];\n"
           "                } else {\n"
           "                    for (int64_t i = 0; i < MR; ++i)\n"
           "#pragma omp simd\n"
           "                        for (int64_t j = 0; j < NR; ++j) cb[i * NCB + j] += tile[i * NR + j];\n"
           "                }\n"
           "            }\n"
           "        }", line)
    w.emit(f"        /* epilogue: {plan.out}[{plan.b}, {plan.m}, pixels] from the accumulated "
           "block, image segment by image segment */", line)
    w.emit("        for (int64_t j0 = 0; j0 < np; ) {\n"
           f"            const int64_t {b} = (p0 + j0) / PIX, q0 = (p0 + j0) % PIX;\n"
           "            const int64_t len = PIX - q0 < np - j0 ? PIX - q0 : np - j0;\n"
           f"            for (int64_t {m} = 0; {m} < MDIM; ++{m}) {{\n"
           f"                float *restrict yrow = {tensor_id(plan.out)} + {b} * {ys[0]} + "
           f"{m} * {ys[1]} + q0;\n"
           "#pragma omp simd\n"
           "                for (int64_t j = 0; j < len; ++j) {\n"
           f"                    const float acc = Cb[{m} * NCB + j0 + j];", line)
    if plan.y in used or plan.xw in used:
        w.emit(f"                    const int64_t {index_id(plan.y)} = (q0 + j) / OW, "
               f"{index_id(plan.xw)} = (q0 + j) % OW;", line)
    w.emit(f"                    yrow[j] = {value};\n                }}\n            }}\n"
           "            j0 += len;\n        }\n    }", line)
    w.emit("    free(Bp); free(Cb);\n    }\n" + ("    free(Ap);\n}" if pack_filter else "}"), line)
