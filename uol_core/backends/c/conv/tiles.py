"""Direct path of the C convolution template: row tiles read straight from a padded row buffer.

Per work item (image, block of RB output rows) a thread copies the input rows the block needs,
of every channel, into a private buffer of CDIM planes of BR x WP floats with the pad value
around them (buffer column j holds input column j + OFFX). With unit stride the GEMM operand
B[(c, r, s), pixel] is then buf[c][row + r][x + s]: for fixed (c, r, s), LANES consecutive
pixels of one output row are one unaligned vector load, so no im2col panel is packed. The
micro-kernel keeps MR output channels x NV such vectors (which may lie on different output rows)
in registers over the whole reduction and the epilogue runs while the tile is stored. Widths
that would leave most vector lanes idle keep the im2col path (see c/conv/emitter.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from uol_core.backends.c.conv.depthwise import emit_sliding_kernel, emit_strided_fill
from uol_core.backends.c.conv.pointwise import emit_items, emit_tail_fill
from uol_core.backends.c.conv.store import CONTIGUOUS, ROW_SEGMENTS, WHOLE_VECTORS, store_tile
from uol_core.backends.c.gemm.emitter import emit_rank1, emit_tile_store
from uol_core.backends.c.platforms import platform
from uol_core.backends.c.text.names import index_id, tensor_id
from uol_core.backends.c.text.writer import CodeWriter
from uol_core.plans.conv import ConvPlan, makespan


@dataclass(frozen=True)
class RowTiles:
    """Geometry of the direct path (all in floats)."""

    lanes: int
    mr: int
    nv: int
    vpr: int  # vectors per output row
    wp: int  # buffer row length: VPR * LANES + S - 1 rounded up to whole vectors (flat: OW + S - 1)
    rb: int  # output rows per work item
    br: int  # buffer rows per work item: RB + R - 1
    nrb: int  # work items per image
    # flat: vectors run over the buffer's rows end to end (WP = OW + S - 1), so an output row
    # costs WP lanes, not VPR whole vectors: 28-pixel rows of a 3-wide window fill 28 of 30
    # lanes, not 28 of 32. Taken where WP < VPR * LANES. `tail`: floats read past a plane's rows.
    flat: bool = False
    tail: int = 0
    # slide: the tile is `slide` whole output rows and the depthwise micro-kernel slides its
    # window down them (depthwise.emit_sliding_kernel); a block's last tile may run past
    # its rows, so the buffer holds whole tiles of rows (those past the input take the pad value)
    slide: int = 0
    # a strided (depthwise) window: output row y reads buffer rows SY * y + r; each buffer row
    # holds SX phases of WPH floats, phase p's column j being input column SX * j + p + OFFX,
    # so tap s of an output vector is the shifted load at phase s % SX, column x + s / SX
    # (depthwise.emit_strided_fill)
    sy: int = 1
    sx: int = 1
    wph: int = 0
    # ms: panel groups per block (not depthwise). Where an image has fewer row blocks than
    # threads can share evenly, a block's MR-row panels are split into MS work items, each
    # filling its own row buffer: a 14x14 plane in one block of 13 vectors and two groups of
    # panels computes 5 tiles per panel, in two blocks of 7 rows 3 + 3 (6) per panel.
    ms: int = 1
    # xplane: the input's plane stride where a pointwise conv reads it in place (c/conv/
    # pointwise.py): PLANE is that stride and `buf` holds only the image's last tile
    xplane: int = 0
    # why this register tile: the platform's tiles it was the least modelled time of
    choice: str = ""

    @property
    def strided(self) -> bool:
        return self.sy != 1 or self.sx != 1

    @property
    def plane(self) -> int:
        return self.xplane or self.br * self.wp + self.tail

    @property
    def buffer_floats(self) -> int:
        return self.nv * self.lanes if self.xplane else self.plane

    def defines(self) -> str:
        return (f"#define LANES {self.lanes}\n#define NV {self.nv}\n#define VPR {self.vpr}\n"
                f"#define WP {self.wp}\n#define RB {self.rb}\n#define BR {self.br}\n"
                f"#define PLANE {self.plane}\n#define NRB {self.nrb}"
                + (f"\n#define SLIDE {self.slide}" if self.slide else "")
                + (f"\n#define SY {self.sy}\n#define SX {self.sx}\n#define WPH {self.wph}"
                   if self.strided else "")
                + (f"\n#define MS {self.ms}" if self.ms > 1 or self.xplane else ""))


def direct_tiles(isa: str) -> list[tuple[tuple[int, int], float]]:
    """The direct path's register tiles on `isa`, each with its throughput relative to the
    first where both fill their lanes alike: the platform's `conv_direct`, then the triples
    (MR, NV, percent) of its `conv_direct_others` where it has them."""
    tiles = platform(isa).tiles
    others = tiles.get("conv_direct_others", ())
    return [(tuple(tiles["conv_direct"]), 1.0)] + [
        ((others[i], others[i + 1]), others[i + 2] / 100) for i in range(0, len(others), 3)]


def row_tiles(isa: str, lanes: int, target, cfg: Mapping, dims: Mapping[str, int]
              ) -> RowTiles | None:
    """The direct path's geometry, or None when under half the lanes of a row's vectors would
    hold output pixels. `dims`: cdim, oh, ow, rdim, sdim, and for the row-block
    choice mdim, nb (images) and threads. Rows per item: the config's `chunk` when
    set, else the count of the least modelled time (`_makespan`; the fewer rows on a tie), at
    least R - 1 (a buffer row is copied for at most two output rows), keeping the buffer within
    a quarter of the L2.
    `mr` and `nv` in the config override the ISA's register tile. Vectors run over the rows end
    to end (`flat`) where that idles fewer lanes than whole vectors per row. Strides `sy`, `sx`
    in `dims` (depthwise only, whole vectors per row): each buffer row holds SX phases of
    WPH floats, a block RB output rows reads SY * (RB - 1) + R input rows."""
    cdim, oh, ow, rdim, sdim = (dims[k] for k in ("cdim", "oh", "ow", "rdim", "sdim"))
    sy, sx = int(dims.get("sy", 1)), int(dims.get("sx", 1))
    vpr = math.ceil(ow / lanes)
    strided = sy != 1 or sx != 1
    in_place = bool(dims.get("in_place"))  # a pointwise conv reading its input in place
    flat = in_place or (ow + sdim - 1 < vpr * lanes and str(cfg.get("flat", 1)) != "0"  # flat=0: to compare
                        and not strided)
    # rows under half a vector: only a depthwise plane (its other path is the generic loop
    # nests, 5-10x slower), end to end where its vectors are at least half busy; a strided one
    # (no end to end layout) in whole vectors a quarter busy (MobileNetV2's 7-wide rows)
    # (read in place, a plane's pixels run end to end whatever its rows: only the last vector idles)
    narrow_plane_ok = 2 * oh * ow >= -(-oh * ow // lanes) * lanes if in_place else dims.get("depthwise") and (
        2 * oh * ow >= -(-((oh - 1) * (ow + sdim - 1) + ow) // lanes) * lanes if flat
        else strided and 4 * ow >= vpr * lanes)
    if 2 * ow < vpr * lanes and not narrow_plane_ok:
        return None
    wph = math.ceil((vpr * lanes + (sdim - 1) // sx) / lanes) * lanes if strided else 0
    wp = ow + sdim - 1 if flat else sx * wph if strided else \
        math.ceil((vpr * lanes + sdim - 1) / lanes) * lanes

    def vectors(rows: int) -> int:  # output vectors of a block of `rows` rows
        return -(-((rows - 1) * wp + ow) // lanes) if flat else rows * vpr

    def blocking(tile: tuple[int, int]) -> tuple[float, int, int]:
        """The modelled time, rows per block and panel groups of the least time with `tile`."""
        panels = math.ceil(int(dims.get("mdim", tile[0])) / tile[0])
        # panel groups: the depthwise driver's items are channels already; a config's `ms` is kept
        groups = [1] if dims.get("depthwise") or strided else \
            [int(cfg["ms"])] if cfg.get("ms") else range(1, min(panels, int(dims.get("threads", 1))) + 1)
        if cfg.get("chunk"):
            blocks = [min(oh, int(cfg["chunk"]))]
        else:
            row_bytes = 4 * cdim * wp
            limit = oh if in_place else \
                max(1, min(oh, int(target.l2_bytes or 1 << 20) // 4 // row_bytes - (rdim - 1)))
            blocks = range(min(limit, max(1, rdim - 1)), limit + 1)
        return min(((_makespan(r, vectors, tile, wp, lanes, dims, g), r, g) for r in blocks for g in groups),
                   key=lambda c: (c[0], c[2], c[1]))

    # the platform file's register tiles: MR output channels x NV input vectors (MR * NV
    # accumulators, NV inputs and one broadcast fit the architectural registers). The first
    # unless another's modelled time is lower by more than its measured throughput falls
    # short of the first's (the platform's `conv_direct_others` percentages): a plane of 49
    # pixels is 4 vectors of 16, two tiles of NV=3 compute 6 of them, one tile of NV=4 or two
    # of NV=2 compute 4.
    # `mr` and `nv` in the config override them.
    tiles = direct_tiles(isa)
    if cfg.get("mr") or cfg.get("nv"):
        tiles = [((int(cfg.get("mr") or tiles[0][0][0]), int(cfg.get("nv") or tiles[0][0][1])), 1.0)]
    (_, rb, ms), (mr, nv), _ = min(((blocking(tile), tile, speed) for tile, speed in tiles),
                                   key=lambda c: c[0][0] / c[2])
    choice = "" if len(tiles) == 1 else "the least modelled time of " + ", ".join(
        f"{t[0]}x{t[1]}" + (f" ({speed:.0%})" if speed != 1 else "") for t, speed in tiles)
    slide = 0 if strided else int(cfg.get("slide") or 0)
    covered = math.ceil(rb / slide) * slide if slide else rb  # output rows a block's tiles compute
    # a flat block's last vector reads up to LANES - 1 + S - 1 floats past its rows' ends
    return RowTiles(lanes, mr, nv, vpr, wp, rb, sy * (covered - 1) + rdim, math.ceil(oh / rb),
                    flat, lanes + sdim if flat and not in_place else 0, slide, sy, sx, wph, ms,
                    dims["ih"] * dims["iw"] if in_place else 0, choice)


def _makespan(rb: int, vectors, tile: tuple[int, int], wp: int, lanes: int,
              dims: Mapping[str, int], groups: int = 1) -> float:
    """Modelled time of the direct path with blocks of `rb` output rows and their panels in
    `groups` work items, in vector operations of the busiest thread: work items (image, block,
    panel group) go to the first free thread, as the driver's dynamic schedule hands them out.
    An item costs its tiles' FMAs (whole tiles: a short last tile computes a full one) and the
    copy of its buffer rows (a load and a store per vector; every panel group copies them).
    The fewest rows that fill whole tiles used to win: a 28x28 plane in blocks of
    3 rows computes 912 lanes for its 784 pixels, in blocks of 14 or 28 rows 864."""
    (mr, nv), oh, rdim, cdim = tile, dims["oh"], dims["rdim"], dims["cdim"]
    panels = math.ceil(dims.get("mdim", mr) / mr)
    per_group = [len(range(g, panels, groups)) for g in range(groups)]
    fmas = mr * nv * cdim * rdim * dims["sdim"]  # one tile of one panel

    def cost(rows: int, share: int) -> float:
        copied = 0 if dims.get("in_place") else dims.get("sy", 1) * (rows - 1) + rdim  # buffer rows
        return -(-vectors(rows) // nv) * fmas * share + 2 * cdim * copied * wp / lanes

    items = [cost(min(rb, oh - y0), share) for y0 in range(0, oh, rb) for share in per_group]
    return makespan(items * max(1, int(dims.get("nb", 1))), int(dims.get("threads", 1)))


def row_helpers(w: CodeWriter, plan: ConvPlan, t: RowTiles, isa: str, xs: list[int], padv: str,
                dims: Mapping[str, int], line: int) -> None:
    """The row buffer fill and the micro-kernel (dims: rdim, sdim, iw)."""
    if t.strided:
        emit_strided_fill(w, plan, t, xs, padv, dims["iw"], line)
    elif t.xplane:
        emit_tail_fill(w, plan, line)
    else:
        _fill_rows(w, plan, t, xs, padv, dims, line)
    if t.slide:
        emit_sliding_kernel(w, isa, t.slide, t.vpr, dims["rdim"], line)
    else:
        _micro_rows(w, t, isa, dims, line)


def row_driver(w: CodeWriter, plan: ConvPlan, t: RowTiles, xs: list[int], ys: list[int],
               value: str, uses_x: bool, cdim: int, line: int, pack_filter: bool = True,
               per_channel: bool = False, contiguous: bool = False) -> None:
    """The entry's parallel region (after its head has allocated the packed filter Ap, which
    it packs and frees with `pack_filter`, else reads as given).
    `value`: the rendered statement with the sum as `acc`; `uses_x`: it reads the column index;
    `per_channel`: it reads no index but the output channel's (a bias, an activation);
    `contiguous`: a flat block's pixels are consecutive in the output too (buffer rows as long
    as output rows, and the epilogue reads pixels only through row-major [.., y, x] tensors)."""
    b = index_id(plan.b)
    buf_len = math.ceil(cdim * t.buffer_floats / 16) * 16
    w.emit("#pragma omp parallel num_threads(THREADS)\n    {", line)
    w.emit(f"    float *buf = aligned_alloc(64, (sizeof(float) * {buf_len} + 63) / 64 * 64);\n"
           "    float tile[MR * NV * LANES] __attribute__((aligned(64)));\n"
           "    int64_t o[NV];", line)
    if t.flat and not t.xplane:  # planes' tails are read by idle lanes only: zeros, never garbage that is subnormal
        w.emit(f"    memset(buf, 0, sizeof(float) * {buf_len});", line)
    if pack_filter:
        w.emit("#pragma omp for schedule(static)\n"
               "    for (int64_t panel = 0; panel < MPAD / MR; ++panel)\n"
               f"        uol_pack_filter({tensor_id(plan.f.tensor)}, Ap + panel * MR * KDIM, panel);",
               line)
    nvec = "((rows - 1) * WP + OW + LANES - 1) / LANES" if t.flat else "rows * VPR"
    fill = ("(rows + SLIDE - 1) / SLIDE * SLIDE + RS - 1" if t.slide else
            "SY * (rows - 1) + RS" if t.strided else "rows + RS - 1")
    if t.xplane:
        emit_items(w, plan, xs, line)
    elif plan.depthwise:  # one input plane per channel, read by that channel's filter alone
        w.emit(f"    /* work items: (image {plan.b}, channel {plan.m}, block of RB output rows "
               f"{plan.y}) */\n"
               "#pragma omp for schedule(dynamic, 1)\n"
               "    for (int64_t item = 0; item < BATCH * MDIM * NRB; ++item) {\n"
               f"        const int64_t {b} = item / (MDIM * NRB), channel = item / NRB % MDIM, "
               "y0 = item % NRB * RB;\n"
               f"        const int64_t rows = OH - y0 < RB ? OH - y0 : RB, nvec = {nvec};\n"
               f"        uol_fill_rows({tensor_id(plan.x.tensor)} + {b} * {xs[0]} + channel * "
               f"{xs[1]}, y0, {fill}, buf);\n"
               "        for (int64_t panel = channel; panel <= channel; ++panel)\n"
               "        for (int64_t v0 = 0; v0 < nvec; v0 += NV) {", line)
    elif t.ms > 1:  # (image, block of rows, group of panels); a thread refills only a new block
        w.emit(f"    /* work items: (image {plan.b}, block of RB output rows {plan.y}, every MS-th "
               "filter panel from the item's group) */\n"
               "    int64_t filled = -1;\n"
               "#pragma omp for schedule(dynamic, 1)\n"
               "    for (int64_t item = 0; item < BATCH * NRB * MS; ++item) {\n"
               f"        const int64_t block = item / MS, {b} = block / NRB, y0 = block % NRB * RB;\n"
               f"        const int64_t rows = OH - y0 < RB ? OH - y0 : RB, nvec = {nvec};\n"
               "        if (block != filled) {\n"
               f"            uol_fill_rows({tensor_id(plan.x.tensor)} + {b} * {xs[0]}, y0, "
               f"{fill}, buf);\n"
               "            filled = block;\n"
               "        }\n"
               "        for (int64_t panel = item % MS; panel < MPAD / MR; panel += MS)\n"
               "        for (int64_t v0 = 0; v0 < nvec; v0 += NV) {", line)
    else:
        w.emit(f"    /* work items: (image {plan.b}, block of RB output rows {plan.y}) */\n"
               "#pragma omp for schedule(dynamic, 1)\n"
               "    for (int64_t item = 0; item < BATCH * NRB; ++item) {\n"
               f"        const int64_t {b} = item / NRB, y0 = item % NRB * RB;\n"
               f"        const int64_t rows = OH - y0 < RB ? OH - y0 : RB, nvec = {nvec};\n"
               f"        uol_fill_rows({tensor_id(plan.x.tensor)} + {b} * {xs[0]}, y0, "
               f"{fill}, buf);\n"
               "        for (int64_t panel = 0; panel < MPAD / MR; ++panel)\n"
               "        for (int64_t v0 = 0; v0 < nvec; v0 += NV) {", line)
    if not t.xplane:  # (pointwise.emit_items calls the micro-kernel on the input in place)
        w.emit("            const int64_t nv = nvec - v0 < NV ? nvec - v0 : NV;\n"
               "            for (int64_t v = 0; v < NV; ++v) {  /* a short last tile repeats its "
               "first vector */\n"
               "                const int64_t u = v0 + (v < nv ? v : 0);\n"
               f"                o[v] = {_vector_at(t)};\n"
               "            }\n"
               "            uol_micro_rows(Ap + panel * MR * KDIM, buf, o, tile);", line)
    walk = CONTIGUOUS if contiguous and t.flat else ROW_SEGMENTS if t.flat else WHOLE_VECTORS
    store_tile(w, plan, ys, value, uses_x, walk, line, pack_filter, per_channel)


def _vector_at(t: RowTiles) -> str:
    """Where output vector u of a block starts in its buffer."""
    if t.flat:
        return "u * LANES"
    return f"u / VPR * {'(SY * WP)' if t.strided else 'WP'} + u % VPR * LANES"


def _fill_rows(w: CodeWriter, plan: ConvPlan, t: RowTiles, xs: list[int], padv: str,
               dims: Mapping[str, int], line: int) -> None:
    jlo = min(t.wp, max(0, -plan.off_x))
    jhi = max(jlo, min(t.wp, dims["iw"] - plan.off_x))
    w.emit(f"""\
/* Row buffer of one work item: input rows y0 + {plan.r} + ({plan.off_y}) of \
{"one channel" if plan.depthwise else f"every channel {plan.c}"} of one image of {plan.x.tensor},
   as CDIM planes of nrows x WP; column j holds input column j + ({plan.off_x}); outside the \
input: {padv}.
   (memcpy for the inside: gcc 12.2 -O3 miscompiles the same copy written as a loop here.) */
static void uol_fill_rows(const float *restrict Xb, int64_t y0, int64_t nrows, float *restrict buf)
{{
    for (int64_t c = 0; c < CDIM; ++c)
    for (int64_t br = 0; br < nrows; ++br) {{
        float *restrict o = buf + c * PLANE + br * WP;
        const int64_t iy = y0 + br + ({plan.off_y});
        if (iy < 0 || iy >= IH) {{
            for (int64_t j = 0; j < WP; ++j) o[j] = {padv};
            continue;
        }}
        const float *restrict row = Xb + c * {xs[1]} + iy * {xs[2]};
        for (int64_t j = 0; j < {jlo}; ++j) o[j] = {padv};
        memcpy(o + {jlo}, row + {jlo} + ({plan.off_x}), sizeof(float) * {jhi - jlo});
        for (int64_t j = {jhi}; j < WP; ++j) o[j] = {padv};
    }}
}}
""", line)


def _micro_rows(w: CodeWriter, t: RowTiles, isa: str, dims: Mapping[str, int], line: int) -> None:
    ops = platform(isa)
    vec = ops.vec
    acc = [[f"c{i}_{v}" for v in range(t.nv)] for i in range(t.mr)]
    window = dims["rdim"] * dims["sdim"]
    plane = "plane" if t.xplane else "PLANE"  # in place: the input's plane or the tail's
    w.emit(f"/* Micro-kernel: tile[MR x NV*LANES] = filter panel (KDIM x MR) x NV input vectors at "
           f"buf + o[v] + c*{plane} + r*WP + s;\n   {t.mr * t.nv} accumulators of {t.lanes} lanes "
           f"stay in registers over the whole reduction ({isa}). */", line)
    w.emit("static inline void uol_micro_rows(const float *restrict a, const float *restrict buf,\n"
           + ("                                  int64_t plane,\n" if t.xplane else "")
           + "                                  const int64_t *restrict o, float *restrict tile)\n{",
           line)
    w.emit("    const float *" + ", *".join(f"b{v} = buf + o[{v}]" for v in range(t.nv)) + ";",
           line)
    for row in acc:
        w.emit(f"    {vec} " + ", ".join(f"{c} = {ops.zero}" for c in row) + ";", line)
    unroll_c = f"#pragma GCC unroll {4 // window}\n" if window < 4 else ""
    w.emit(f"{unroll_c}    for (int64_t c = 0; c < CDIM; ++c)\n"
           f"#pragma GCC unroll {min(dims['rdim'], 8)}\n"
           "    for (int64_t r = 0; r < RS; ++r)\n"
           f"#pragma GCC unroll {min(dims['sdim'], 8)}\n"
           "    for (int64_t s = 0; s < SS; ++s) {\n"
           f"        const int64_t q = c * {plane} + r * WP + "
           f"{'s % SX * WPH + s / SX' if t.strided else 's'};", line)
    w.emit(f"        {vec} " + ", ".join(f"x{v} = " + ops.loadu.format(f"b{v} + q")
                                        for v in range(t.nv)) + ";", line)
    # pin the loaded vectors in registers: gcc otherwise folds the load into every FMA that
    # uses it (MR loads per vector instead of one)
    if ops.pin:
        w.emit('        __asm__("" : ' + ", ".join(f'"+{ops.pin}"(x{v})' for v in range(t.nv))
               + ");  /* keep the inputs in registers */", line)
    emit_rank1(w, ops, acc, [f"x{v}" for v in range(t.nv)], line)
    w.emit("        a += MR;\n    }", line)
    emit_tile_store(w, ops, acc, lambda i, v: (i * t.nv + v) * t.lanes, line)
    w.emit("}\n", line)
