"""Pointwise convolutions read their input in place: the direct path without the row buffer.

A 1x1 convolution with unit stride and no padding reads input pixel p of channel c for output
pixel p: the window of output vector u over a block's rows is X[c, y0 * OW + u * LANES ..], one
unaligned load from the input's own plane, exactly what the row buffer would hold. So the
micro-kernel reads the input where it lies (plane stride IH * IW) and no row is copied.

Why: the copy moved every input float through a store and a load, once per block and panel
group. On a 2-core AVX2 host (Zen 3) a 384 -> 64 projection at 14x14 (MobileNetV2) took
134 us with the buffer and 100 us reading in place (kernel alone, median of 200 calls), the
copy being a fifth of the call; its cost term leaves the row-block choice (tiles._makespan).

The one read the buffer made safe: a block's last vector runs up to LANES - 1 floats past its
rows, which past the image's last row is past the end of the last channel's plane (the tensor).
So the image's last tile, when it would run past the plane, reads a zero-padded copy of its NV
vectors of every channel (`uol_fill_tail`, CDIM x NV x LANES floats), as the buffer's idle
lanes did: zeros, never memory outside the tensor.
"""

from __future__ import annotations

from collections.abc import Mapping

from uol_core.backends.c.text.names import index_id, tensor_id
from uol_core.backends.c.text.writer import CodeWriter
from uol_core.plans.conv import ConvPlan


def reads_in_place(plan: ConvPlan, dims: Mapping[str, int]) -> bool:
    """Whether the conv `plan` may read its input in place: a dense 1x1 window at unit stride,
    no padding, output planes the input's size (dims: rdim, sdim, oh, ow, ih, iw)."""
    return (not plan.depthwise and not plan.strided and dims["rdim"] == 1 and dims["sdim"] == 1
            and plan.off_x == 0 and plan.off_y == 0
            and (dims["oh"], dims["ow"]) == (dims["ih"], dims["iw"]))


def emit_tail_fill(w: CodeWriter, plan: ConvPlan, line: int) -> None:
    """The zero-padded copy the image's last tile reads (module docstring)."""
    w.emit(f"""\
/* The image's last tile of {plan.x.tensor}: `count` pixels from `from` of every channel, then zeros,
   as CDIM planes of NV * LANES floats (read in place, the tile would run past the tensor). */
static void uol_fill_tail(const float *restrict from, int64_t count, float *restrict tail)
{{
    for (int64_t c = 0; c < CDIM; ++c)
    for (int64_t j = 0; j < NV * LANES; ++j) tail[c * NV * LANES + j] = j < count ? from[c * PLANE + j] : 0.0f;
}}
""", line)


def emit_items(w: CodeWriter, plan: ConvPlan, xs: list[int], line: int) -> None:
    """The driver's work items (image, block of RB output rows, every MS-th panel) reading the
    input in place; the block's tiles from the image's last that would run past its plane read
    `buf`, filled once per item. Ends inside the tile loop, where the micro-kernel is called."""
    b = index_id(plan.b)
    x = tensor_id(plan.x.tensor)
    w.emit(f"    /* work items: (image {plan.b}, block of RB output rows {plan.y}, every MS-th "
           "filter panel from the item's group); pixels read in place */\n"
           "#pragma omp for schedule(dynamic, 1)\n"
           "    for (int64_t item = 0; item < BATCH * NRB * MS; ++item) {\n"
           f"        const int64_t block = item / MS, {b} = block / NRB, y0 = block % NRB * RB;\n"
           "        const int64_t rows = OH - y0 < RB ? OH - y0 : RB, nvec = (rows * OW + LANES - 1) / LANES;\n"
           f"        const float *restrict xin = {x} + {b} * {xs[0]} + y0 * OW;\n"
           "        /* tiles from `tail` on read the zero-padded copy: past the plane's end otherwise */\n"
           "        const int64_t tail = y0 * OW + nvec * LANES > OH * OW ? (nvec - 1) / NV * NV : nvec;\n"
           "        if (tail < nvec) uol_fill_tail(xin + tail * LANES, rows * OW - tail * LANES, buf);\n"
           "        for (int64_t panel = item % MS; panel < MPAD / MR; panel += MS)\n"
           "        for (int64_t v0 = 0; v0 < nvec; v0 += NV) {\n"
           "            const int64_t nv = nvec - v0 < NV ? nvec - v0 : NV, copied = v0 >= tail;\n"
           "            for (int64_t v = 0; v < NV; ++v) {  /* a short last tile repeats its "
           "first vector */\n"
           "                const int64_t u = v0 + (v < nv ? v : 0);\n"
           "                o[v] = (u - (copied ? tail : 0)) * LANES;\n"
           "            }\n"
           "            uol_micro_rows(Ap + panel * MR * KDIM, copied ? buf : xin, "
           "copied ? NV * LANES : PLANE, o, tile);", line)
