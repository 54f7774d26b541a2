"""Depthwise convolutions on the conv template's direct path (entry points `depthwise_plan`,
`depthwise_config`, `emit_strided_fill`).

    Y[b, m, y, x] = epi(sum[r, s](X[b, m, sy * y + r + o1, sx * x + s + o2] * F[m, 0, r, s]), reads)

Each channel is a convolution of one input plane with one filter: the direct path of
c/conv/tiles.py with one channel reduced (CDIM = 1) and one filter row per tile (MR = 1), work
items (image, channel, block of output rows). Its micro-kernel keeps NV vectors of output pixels
(the platform file's `conv_depthwise` tile) in registers over the R x S window. The generic loop
nests accumulated each output row in memory instead: a load and a store per vector and tap, and
a chain of R x S dependent updates through the store buffer.

A strided window (MobileNet's stride-2 3x3) keeps this path: the row buffer holds each input
row deinterleaved into SX phases (`emit_strided_fill`), so the SX-apart input columns an output
vector reads at tap s are consecutive floats of phase s % SX, one shifted vector load as at
unit stride, and output row y reads buffer rows SY * y + r. im2col would run it as a GEMM of
one filter row per channel (MR - 1 of MR rows idle); the generic loop nests took 90x torch's
time. The sliding micro-kernel shares input rows between output rows one row apart, so a
strided plan keeps the row-vector kernel.
"""

from __future__ import annotations

from collections.abc import Mapping

from uol_core.backends.c.platforms import platform
from uol_core.backends.c.text.names import index_id
from uol_core.backends.c.text.writer import CodeWriter
from uol_core.odl.ir import Op
from uol_core.plans.conv import ConvPlan, window, window_product

DEPTHWISE_CHANNEL = "dw_c"  # the plan's reduced channel: extent 1, not an index of the source


def depthwise_plan(op: Op) -> ConvPlan | None:
    """The plan of an NCHW depthwise convolution, any stride (one statement: a window sum of
    X's own channel times that channel's filter, any epilogue), or None."""
    product = window_product(op)
    if product is None:
        return None
    stmt, red, body = product
    windowed = [a for a in (body.lhs, body.rhs) if any(len(i.terms) > 1 for i in a.indices)]
    if len(windowed) != 1 or len(set(stmt.indices)) != 4 or DEPTHWISE_CHANNEL in op.dims:
        return None
    x = windowed[0]
    f = body.rhs if x is body.lhs else body.lhs
    b, m, y, xw = stmt.indices
    if len(x.indices) != 4 or x.tensor == f.tensor or f.pad is not None:
        return None
    if x.indices[0].pure_symbol != b or x.indices[1].pure_symbol != m:
        return None  # X's channel is the output's: nothing is summed across channels
    win = window(x.indices[2], x.indices[3], y, xw)
    if win is None:
        return None
    (r, off_y, sy), (s, off_x, sx) = win
    if set(red.indices) != {r, s} or r == s:
        return None
    # F[m, 0, r, s]: each of m, r, s once, every other index the constant 0
    names = [i.pure_symbol for i in f.indices if i.terms]
    if sorted(names) != sorted([m, r, s]) or any(not i.terms and i.const != 0 for i in f.indices):
        return None
    return ConvPlan(x, f, stmt.target, b, m, y, xw, DEPTHWISE_CHANNEL, r, s, off_y, off_x, red,
                    depthwise=True, stride_y=sy, stride_x=sx)


def depthwise_config(isa: str, cfg: Mapping, target, oh: int, vpr: int,
                     flat_vectors: int | None = None) -> dict:
    """The direct path's knobs for a depthwise plan (`oh` output rows of `vpr` vectors each),
    where the config leaves them open: one filter row (mr 1) and a whole plane per work item
    (chunk = oh: a channel's plane is a few KiB, and a block of RB rows copies R - 1 extra
    rows, twice the block at RB = 6 for a 7x7 window). The register tile is `slide` whole
    output rows (see `emit_sliding_kernel`) where two rows' vectors fit the platform file's
    `conv_depthwise` bound: the row count that computes the fewest rows past the plane, then
    the one whose accumulators hide the FMA latency (the HFL's fma_latency_cycles x
    fma_units), then the most (the config's `slide` sets it). Rows too wide for that, and a config
    with `slide=0` or an `nv` of its own, keep `nv` vectors in a row, between the
    chains that hide the latency and the bound, as the count that leaves the fewest idle
    vectors in a plane's last tile (56 vectors: 8, not 12, which would compute 4 of its last
    12 twice).
    `flat_vectors`: rows so narrow that whole vectors per row would idle over half their lanes
    (7 of 16) run end to end over the plane (tiles.row_tiles' flat layout), this many vectors
    a plane: no sliding tile (it needs whole rows), and a plane's vectors in one tile where
    they fit the bound (5 vectors of a 7x7 plane: 5, not 8 with 3 computed for nothing)."""
    _, most = platform(isa).tiles["conv_depthwise"]
    chains = int(target.fma_latency_cycles or 1) * int(target.fma_units or 1)
    rows = min(oh, int(cfg.get("chunk") or oh))
    derived = {**cfg, "mr": 1, "chunk": rows}
    # slide=0, or an nv of the config's own, keeps the row-vector kernel (to compare)
    wanted = str(cfg.get("slide", "")) != "0" and (cfg.get("slide") or not cfg.get("nv"))

    def fewest_idle(nvec: int) -> int:  # the tile width, chains to bound, with the fewest idle
        return min(range(min(chains, most), most + 1), key=lambda n: (-(-nvec // n) * n, -n))

    if flat_vectors is not None:  # the plane's vectors are counted whole: one item per plane
        nv = flat_vectors if flat_vectors <= most else fewest_idle(flat_vectors)
        return {**derived, "chunk": oh, "slide": 0, "nv": int(cfg.get("nv") or nv)}
    if wanted and 2 * vpr <= most:
        slide = int(cfg.get("slide") or 0) or min(
            range(2, most // vpr + 1), key=lambda t: (-(-rows // t) * t, t * vpr < chains, -t))
        return {**derived, "slide": slide, "nv": slide * vpr, "flat": 0}
    # whole vectors per row, not end to end (flat): a depthwise output is 9 FMAs a pixel, and
    # a flat vector spanning two rows is stored in two masked passes; 28x28 planes on AVX2,
    # 192 channels: 115 us flat (6 vectors a tile), 76 us in rows of 4 vectors
    return {**derived, "slide": 0, "nv": int(cfg.get("nv") or fewest_idle(rows * vpr)),
            "flat": cfg.get("flat", 0)}


def emit_sliding_kernel(w: CodeWriter, isa: str, rows: int, vpr: int, rdim: int, line: int
                        ) -> None:
    """The depthwise micro-kernel `uol_micro_rows` over `rows` whole output rows of `vpr`
    vectors: for each filter column s, each input vector the tile reads is loaded once and
    feeds every output row whose window holds its row (up to R of them, with the R filter taps
    of column s held in registers). The row-vector kernel loaded a vector per tap: one load per
    FMA, so the load ports bound it; here (rows + R - 1) x vpr loads feed rows x R x vpr FMAs.
    Tile layout as the driver stores it: row t's vector v at (t * vpr + v) * LANES."""
    ops = platform(isa)
    acc = [[f"c{t}_{v}" for v in range(vpr)] for t in range(rows)]
    w.emit(f"/* Micro-kernel: {rows} output rows x {vpr} vectors of one channel, the {rdim}-row "
           f"window sliding down the buffer: each input vector is loaded once per filter column "
           f"and multiplied by every tap that reads it ({isa}). */", line)
    w.emit("static inline void uol_micro_rows(const float *restrict a, const float *restrict buf,\n"
           "                                  const int64_t *restrict o, float *restrict tile)\n{\n"
           "    const float *restrict b = buf + o[0];", line)
    for row in acc:
        w.emit(f"    {ops.vec} " + ", ".join(f"{c} = {ops.zero}" for c in row) + ";", line)
    w.emit("    for (int64_t s = 0; s < SS; ++s) {", line)
    w.emit(f"        const {ops.vec} " + ", ".join(
        f"f{r} = " + ops.bcast.format(f"a[{r} * SS + s]") for r in range(rdim)) + ";", line)
    for rho in range(rows + rdim - 1):
        for v in range(vpr):
            taps = [r for r in range(rdim) if 0 <= rho - r < rows]
            fmas = " ".join(f"{acc[rho - r][v]} = " + ops.fma.format(f"f{r}", "x", acc[rho - r][v])
                            + ";" for r in taps)
            pin = f' __asm__("" : "+{ops.pin}"(x));' if ops.pin and len(taps) > 1 else ""
            w.emit(f"        {{ {ops.vec} x = " + ops.loadu.format(f"b + {rho} * WP + {v} * LANES + s")
                   + f";{pin} {fmas} }}", line)
    w.emit("    }", line)
    for t, row in enumerate(acc):
        w.emit("    " + " ".join(ops.store.format(f"tile + {(t * vpr + v)} * LANES", c) + ";"
                                 for v, c in enumerate(row)), line)
    w.emit("}\n", line)


def emit_strided_fill(w: CodeWriter, plan: ConvPlan, t, xs: list[int], padv: str, iw: int,
                      line: int) -> None:
    """`uol_fill_rows` of a strided plan (`t`: its RowTiles): input rows SY * y0 + br + OFFY,
    each deinterleaved into SX phases of WPH floats (phase p's column j: input column
    SX * j + p + OFFX), the pad value outside the input. Each phase's columns inside the
    input are a constant range, so its copy is a loop of constant stride without a test per
    float (a test per float cost as much as the convolution's FMAs)."""
    phases = []
    for p in range(t.sx):
        # columns j with 0 <= SX * j + p + OFFX < IW
        lo = min(t.wph, max(0, -(-(-p - plan.off_x) // t.sx)))
        hi = max(lo, min(t.wph, -(-(iw - p - plan.off_x) // t.sx)))
        phases.append(
            f"        o = buf + c * PLANE + br * WP + {p * t.wph};\n"
            f"        for (int64_t j = 0; j < {lo}; ++j) o[j] = {padv};\n"
            f"        for (int64_t j = {lo}; j < {hi}; ++j) o[j] = row[SX * j + ({p + plan.off_x})];\n"
            f"        for (int64_t j = {hi}; j < WPH; ++j) o[j] = {padv};")
    body = "\n".join(phases)
    channels = "one channel" if plan.depthwise else f"every channel {plan.c}"
    w.emit(f"""\
/* Row buffer of one work item: input rows SY * y0 + br + ({plan.off_y}) of {channels} of one \
image of {plan.x.tensor} (stride {plan.stride_y}x{plan.stride_x}), as CDIM planes of nrows x WP;
   each row as SX phases of WPH floats, phase p's column j holding input column SX * j + p + \
({plan.off_x}), so pixel {index_id(plan.xw)}'s tap {plan.s} is phase {plan.s} % SX, column \
{index_id(plan.xw)} + {plan.s} / SX; outside the input: {padv}. */
static void uol_fill_rows(const float *restrict Xb, int64_t y0, int64_t nrows, float *restrict buf)
{{
    for (int64_t c = 0; c < CDIM; ++c)
    for (int64_t br = 0; br < nrows; ++br) {{
        float *restrict o = buf + c * PLANE + br * WP;
        const int64_t iy = SY * y0 + br + ({plan.off_y});
        if (iy < 0 || iy >= IH) {{
            for (int64_t j = 0; j < WP; ++j) o[j] = {padv};
            continue;
        }}
        const float *restrict row = Xb + c * {xs[1]} + iy * {xs[2]};
{body}
    }}
}}
""", line)
