"""C convolution template: implicit GEMM with a register-blocked micro-kernel.

Recognised statement (any index and tensor names; NCHW order; any stride, no dilation):
    Y[b, m, y, x] = epi(sum[c, r, s](X[b, c, sy * y + r + o1, sx * x + s + o2] * F[.. m, c, r, s ..]),
                        reads)
where X may be read through pad(.., v) and `epi` is any map of the sum and tensors indexed by the
free indices (bias + relu). Per image it is the GEMM Y[m, pixel] = F[m, (c,r,s)] x B[(c,r,s), pixel]:
F is packed once into MR-row panels. Direct path (c/conv/tiles.py), when output rows fill at least
half of their vectors: each thread takes (image, block of output rows) work items, copies the
input rows they read into a padded row buffer and reads B from it as shifted vectors, no im2col.
A strided window reads its buffered rows split into stride phases (c/conv/depthwise.py), so an
output vector's tap is again one shifted load: depthwise ones always, dense ones where im2col's
packing would cost half of its FMAs (few output channels: the stems). Narrow outputs and the
other strided windows take im2col (c/conv/im2col.py): each thread takes blocks of pixels of the whole batch, packs
the im2col panel B (KC x NCB, in NR-column micro-panels, pad values filled in while packing) and
runs the c_gemm micro-kernel, accumulating in a private M x NCB buffer. Both apply the epilogue while the tile
is stored. A padded X must stay inside its batch and channel axes at the bound sizes (only the
spatial axes are tested). On a target with a length-agnostic ISA (SVE) the direct path's
c_conv_sve form runs at every width, its vectors of the length the core reads at run time
(unit stride only). A depthwise plane whose rows fill under half a vector runs its rows end
to end (strided: whole vectors at least a quarter busy). Anything else (dilated windows,
narrower depthwise rows, several statements) returns None and takes the generic path.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from uol_core.acg.config import TileConfig, lanes, resolve_target, target_isas, threads_for_work
from uol_core.backends.base import KernelSource
from uol_core.backends.c.attention import forward_sve as c_attention_sve
from uol_core.backends.c.conv import sve as c_conv_sve
from uol_core.backends.c.conv.depthwise import depthwise_config, depthwise_plan
from uol_core.backends.c.conv.gemv import emit_gemv, gemv_fits
from uol_core.backends.c.conv.im2col import im2col_driver, pack_im2col, pixel_block
from uol_core.backends.c.conv.pointwise import reads_in_place
from uol_core.backends.c.conv.tiles import row_driver, row_helpers, row_tiles
from uol_core.backends.c.gemm.emitter import emit_platform_header, micro_kernel
from uol_core.backends.c.platforms import platform
from uol_core.backends.c.text.expr import PRELUDE, render_epilogue
from uol_core.backends.c.text.frame import includes, open_entry
from uol_core.backends.c.text.names import index_id, size_id, tensor_id
from uol_core.backends.c.text.writer import CodeWriter, render_affine, render_const
from uol_core.odl.check import stmt_extents
from uol_core.odl.inline import inline_maps
from uol_core.odl.ir import (
    Access,
    Expr,
    Op,
    Reduce,
    Var,
    children,
    walk,
)
from uol_core.odl.pad_reach import padded_escapes
from uol_core.plans.conv import ConvPlan, conv_plan

GENERATOR = "uol-c-conv-2"
KC_MAX = 384  # deepest packed panel; longer reductions are split into even blocks
STRIDED_DIRECT_LANES = 4  # a dense strided conv to at most this many vectors of channels: direct
FOLD_SLACK = 64  # nodes a folded epilogue may repeat (a local read twice) beyond the written ops


def _folds_small(op: Op) -> bool:
    """Whether folding the op's statements into its last (`inline_maps`) keeps the expression
    within FOLD_SLACK nodes of the statements as written. Folding copies each intermediate into
    every read of it, so a chain whose statements each read the one before twice doubles at
    every statement: 16 statements made 65536 copies, which every later walk visited (seconds
    per emit, for every map op, since this route is tried for all). Counted here without
    building anything: a statement's size with each read of an earlier one replaced by that
    one's size, linear in the op."""
    folded: dict[str, int] = {}
    written = 0
    for stmt in op.stmts:
        nodes = list(walk(stmt.expr))
        written += len(nodes)
        folded[stmt.target] = sum(folded.get(n.tensor, 1) if isinstance(n, Access) else 1
                                  for n in nodes)
        if folded[stmt.target] > written + FOLD_SLACK:
            return False
    return True


def _epilogue_ok(op: Op, plan: ConvPlan) -> bool:
    """Reads outside the sum must be unpadded and indexed by the statement's free indices only."""
    free = set(op.stmts[0].indices) | set(op.dims)
    for node in _outside(op.stmts[0].expr):
        if isinstance(node, Access) and (node.pad is not None or any(
                not set(i.symbols) <= free for i in node.indices)):
            return False
    return True


def _pads_honoured(op: Op, plan: ConvPlan, sizes: Mapping[str, int]) -> bool:
    """The template tests bounds on X's two spatial axes only: batch and channel are read
    directly (`b * stride + c * stride`), so a padded X whose batch or channel axis is shorter
    than the loop over it (X: f32[N - 1, ...] read by every image n < N) goes to the generic path."""
    return all(escape.access == plan.x and escape.axis in (2, 3)
               for escape in padded_escapes(op, sizes))


def _outside(expr: Expr):
    if isinstance(expr, Reduce):
        return
    yield expr
    for child in children(expr):
        yield from _outside(child)


def _strides(shape: list[int]) -> list[int]:
    out, acc = [], 1
    for extent in reversed(shape):
        out.append(acc)
        acc *= extent
    return list(reversed(out))


def emit(op: Op, sizes: Mapping[str, int], target=None, config: Mapping | None = None,
         prepacked_filter: bool = False) -> KernelSource | None:
    """The convolution kernel of `op`, or None when the op is not a convolution this template takes.
    A convolution followed by maps of its result (a fused bias, relu, residual add) is first
    folded into one statement whose epilogue they are (`inline_maps`), when that stays small.
    With `prepacked_filter` the filter argument holds the MR-row panels already
    (c/conv/prepacked.py packs them once), and the kernel reads them in place."""
    if len(op.stmts) > 1:
        if not _folds_small(op):
            return None
        op = inline_maps(op)
    plan = conv_plan(op)
    if plan is None:
        plan = depthwise_plan(op)
    if plan is None or not _epilogue_ok(op, plan):
        return None
    if target is None:
        target = resolve_target("host")
    cfg = dict(config or {})
    stmt = op.stmts[0]
    line = stmt.line
    ext = stmt_extents(op, 0)
    free = {n: f.evaluate(dict(sizes)) for n, f in ext.free.items()}
    red = {n: f.evaluate(dict(sizes)) for n, f in ext.reductions[plan.reduce].items()}
    shapes = {d.name: [f.evaluate(dict(sizes)) for f in d.shape] for d in op.inputs + op.outputs}
    strides = {t: _strides(s) for t, s in shapes.items()}
    nb, mdim, oh, ow = (free[i] for i in (plan.b, plan.m, plan.y, plan.xw))
    cdim, rdim, sdim = red.get(plan.c, 1), red[plan.r], red[plan.s]  # depthwise: one channel
    ih, iw = shapes[plan.x.tensor][2], shapes[plan.x.tensor][3]
    if min(nb, mdim, oh, ow, cdim, rdim, sdim) <= 0 or shapes[plan.out] != [nb, mdim, oh, ow]:
        return None
    if not _pads_honoured(op, plan, sizes):
        return None
    # every core unless a core's share is shorter than a fork and join (a squeeze-and-excite
    # block's 1x1 convolutions of one pixel)
    threads = int(cfg.get("threads") or threads_for_work(
        nb * mdim * oh * ow * cdim * rdim * sdim, target, target_isas(target)[0]))

    vla = c_attention_sve.vla_isa(target)
    if vla is not None:  # a length-agnostic ISA (SVE): pixels on lanes of a run-time count
        unit = not (plan.depthwise or plan.strided)  # the SVE form takes unit strides only
        return c_conv_sve.emit(op, plan, sizes, target, cfg, vla, threads) if unit else None
    isa = target_isas(target)[0]
    lane = lanes(isa, target)
    kdim, pix = cdim * rdim * sdim, oh * ow
    # a depthwise plan's geometry knobs are derived here, not the user's config (which the
    # kernel records as given: the Studio checks it against the space's legal values)
    # (a strided one keeps the row-vector micro-kernel: see c/conv/depthwise.py)
    dw_cfg = {**cfg, "slide": 0} if plan.strided else cfg
    # depthwise rows under half a vector run end to end over the plane (7x7 planes: 49 pixels
    # in 4-5 vectors, not 7 vectors of 7); strided ones keep whole vectors (row_tiles)
    narrow = 2 * ow < math.ceil(ow / lane) * lane and not plan.strided
    flat_vectors = math.ceil(((oh - 1) * (ow + sdim - 1) + ow) / lane) if narrow else None
    tiles_cfg = depthwise_config(isa, dw_cfg, target, oh, math.ceil(ow / lane), flat_vectors) \
        if plan.depthwise else cfg
    # A strided window reads its rows deinterleaved into phases (depthwise.emit_strided_fill).
    # A dense one takes that path only where im2col's packing would cost at least half of its
    # FMAs: it gathers K floats per pixel (a load and a store each) for M * K / LANES vector
    # FMAs, so at M <= 4 * LANES. Measured (AVX-512, 2 threads): the 3-channel stems,
    # MobileNetV2's 3x3 s2 to 32 channels 3.2x and ResNet-50's 7x7 s2 to 64 1.5x faster on
    # the direct path; ResNet-50's stride-2 convolutions to 128-512 channels 0.80-0.89x.
    dense_strided = plan.strided and not plan.depthwise
    rows = None if dense_strided and mdim > STRIDED_DIRECT_LANES * lane else row_tiles(isa, lane, target, tiles_cfg, {
        "cdim": cdim, "oh": oh, "ow": ow, "rdim": rdim, "sdim": sdim, "mdim": mdim, "nb": nb,
        "threads": threads, "depthwise": plan.depthwise, "ih": ih, "iw": iw,
        "in_place": reads_in_place(plan, {"rdim": rdim, "sdim": sdim, "oh": oh, "ow": ow,
                                          "ih": ih, "iw": iw}),
        **({"sy": plan.stride_y, "sx": plan.stride_x} if plan.strided else {})})
    if plan.depthwise and rows is None:
        return None  # rows under half a vector: the generic loop nests
    # im2col: the platform file's register tile (MR rows x NV vectors) and NR micro-panels per
    # pixel block
    mr, nv, panels = platform(isa).tiles["conv_im2col"]
    nr = nv * lane
    if rows is not None:
        mr, nr = rows.mr, rows.nv * lane
    kc = math.ceil(kdim / math.ceil(kdim / KC_MAX))
    ncb = pixel_block(nb * pix, nr, panels, threads)
    m_pad = math.ceil(mdim / mr) * mr
    fst = {name: strides[plan.f.tensor][d] for d, name in
           enumerate(i.pure_symbol for i in plan.f.indices)}
    fst.setdefault(plan.c, 0)  # a depthwise plan's channel: one value, no axis of F
    xs = strides[plan.x.tensor]
    ys = strides[plan.out]
    padv = render_const(plan.x.pad if plan.x.pad is not None else 0.0)
    value, uses = _epilogue(op, strides)
    if gemv_fits(plan, oh, ow, rdim, sdim):  # one pixel: no panel would be a quarter full
        return emit_gemv(op, plan, target, sizes, cfg, {
            "batch": nb, "mdim": mdim, "cdim": cdim, "ih": ih, "iw": iw, "threads": threads},
            {"fst": fst, "xs": xs, "ys": ys}, (value, uses))

    w = CodeWriter(default_line=op.line)
    entry = f"uol_{op.name}"
    args = [d.name for d in op.inputs] + [d.name for d in op.outputs]
    dims = ", ".join(f"{k}={v}" for k, v in sizes.items())
    how = (("X read in place" if rows.xplane else "X windows read from a padded row buffer")
           + f" (RB={rows.rb} rows per item"
           f"{', rows end to end' if rows.flat else ''}"
           f"{f', window sliding down {rows.slide} rows' if rows.slide else ''}); MR={mr} x "
           f"NV={rows.nv} vectors of {lane}{f' ({rows.choice})' if rows.choice else ''}"
           if rows is not None else
           f"im2col(X{_stride_note(plan)}); MR={mr} NR={nr} KC={kc} NCB={ncb}")
    gemm = (f"per image and channel {plan.m} (depthwise): [{plan.y}*{plan.xw}] = "
            f"F[{plan.m}, ({plan.r},{plan.s})] x" if plan.depthwise else
            f"per image: [{plan.m}] x [{plan.y}*{plan.xw}] = F[{plan.m}, ({plan.c},{plan.r},{plan.s})] x"
            if rows is not None else
            f"over the batch: [{plan.m}] x [{plan.b}*{plan.y}*{plan.xw}] = "
            f"F[{plan.m}, ({plan.c},{plan.r},{plan.s})] x")
    w.emit(f"/* {op.name}: convolution as implicit GEMM generated by UOL ({GENERATOR}) for target "
           f"{target.name}.\n   sizes: {dims}\n   {gemm} {how} ({isa}) */")
    w.emit(includes("stdint.h", "stdlib.h", "string.h", "math.h", "omp.h"))
    emit_platform_header(w, platform(isa), lane)
    w.emit("")
    for name in op.dims:
        w.emit(f"#define {size_id(name)} {int(sizes[name])}")
    w.emit(f"#define MR {mr}\n#define MDIM {mdim}\n#define MPAD {m_pad}\n#define KDIM {kdim}\n"
           f"#define CDIM {cdim}\n#define OH {oh}\n#define OW {ow}\n#define IH {ih}\n"
           f"#define IW {iw}\n#define RS {rdim}\n#define SS {sdim}\n#define BATCH {nb}\n"
           f"#define THREADS {threads}")
    if rows is not None:
        w.emit(rows.defines() + "\n")
    else:
        w.emit(f"#define NR {nr}\n#define KC {kc}\n#define NCB {ncb}\n#define PIX {pix}\n"
               f"#define NBLK {math.ceil(nb * pix / ncb)}\n")
    w.emit(PRELUDE + "\n")
    packed_from = _filter_source(w, plan, fst, line, prepacked_filter)
    if rows is not None:
        row_helpers(w, plan, rows, isa, xs, padv, {"rdim": rdim, "sdim": sdim, "iw": iw}, line)
        _entry_head(w, op, entry, args, line, packed_from)
        contiguous = rows.wp == ow and ys[2] == ow and ys[3] == 1 and _pixels_row_major(op, plan, shapes)
        row_driver(w, plan, rows, xs, ys, value, plan.xw in uses, cdim, line, packed_from is None,
                   per_channel=uses <= {plan.m}, contiguous=contiguous)
        flat = (f", vectors over its rows end to end ({ow} of every {rows.wp} lanes, not {ow} of "
                f"{rows.vpr * lane})" if rows.flat else "")
        kernel = (f"a micro-kernel sliding its {rdim}-row window down {rows.slide} output rows of "
                  f"{rows.vpr} vectors (each input vector loaded once per filter column)"
                  if rows.slide else f"an {mr}x{rows.nv}-vector micro-kernel")
        source = "input read in place" if rows.xplane else "padded row buffer"
        fusion = (f"conv template, direct{', depthwise' if plan.depthwise else ''}: {source} "
                  f"({rows.rb} output rows per item{flat}) read by {kernel}; epilogue fused "
                  "into the store" + _path_reason(plan, True, ow, lane))
    else:
        tile = TileConfig(isa=isa, mr=mr, nr=nr, kc=kc, mc=m_pad, nc=ncb, ku=4, pf=0,
                          par="batch", threads=threads)
        micro_kernel(w, tile, target, line)
        pack_im2col(w, plan, xs, padv, line)
        _entry_head(w, op, entry, args, line, packed_from)
        im2col_driver(w, plan, ys, value, uses, line, packed_from is None)
        fusion = (f"conv template: im2col panels (KC={kc} x NCB={ncb} pixels of the batch) into "
                  f"an {mr}x{nr} micro-kernel; epilogue fused into the store"
                  + _path_reason(plan, False, ow, lane))
    panels = _filter_panels(plan, mr, m_pad, kdim, packed_from is not None)
    fusion += "; filter packed once, ahead of the call" if panels["prepacked"] else ""
    meta = {"isa": isa, "args": args, "outputs": [d.name for d in op.outputs],
            "threads": threads, "filter_panels": panels,
            "generator": GENERATOR, "reduction_length": kdim,
            "flops": 2 * nb * mdim * pix * kdim, "fusion": fusion}
    return w.source(entry, op.name, {**cfg, "threads": threads}, meta)


def _filter_source(w: CodeWriter, plan: ConvPlan, fst: dict[str, int], line: int,
                   prepacked: bool) -> str | None:
    """The C name of the argument holding the packed filter when it comes packed; else None,
    after writing the function that packs it on every call."""
    if prepacked:
        return tensor_id(plan.f.tensor)
    _pack_filter(w, plan, fst, line)
    return None


def _filter_panels(plan: ConvPlan, mr: int, m_pad: int, kdim: int, prepacked: bool) -> dict:
    """What c/conv/prepacked.py needs to pack the filter ahead of the call: F's axes by role
    (m, c, r, s; None for a constant index), the panel height and the padded rows."""
    roles = {plan.m: "m", plan.c: "c", plan.r: "r", plan.s: "s"}
    axes = [roles.get(i.pure_symbol) if i.pure_symbol is not None else None
            for i in plan.f.indices]
    return {"filter": plan.f.tensor, "mr": mr, "mpad": m_pad, "kdim": kdim, "axes": axes,
            "prepacked": prepacked}


def _pixels_row_major(op: Op, plan: ConvPlan, shapes: dict[str, list[int]]) -> bool:
    """Whether the epilogue reads the output pixel (y, x) only as the last two indices of
    tensors shaped [.., OH, OW] (a residual): then pixel y * OW + x is one row-major offset and
    a store may run x past OW into the next rows (store.CONTIGUOUS). Not where it uses y or x
    in arithmetic or reads them anywhere else."""
    spatial, out = {plan.y, plan.xw}, shapes[plan.out][-2:]
    for node in _outside(op.stmts[0].expr):
        if isinstance(node, Var) and node.name in spatial:
            return False
        if not isinstance(node, Access) or not any(spatial & set(i.symbols) for i in node.indices):
            continue
        if len(node.indices) < 2 or node.tensor not in shapes:
            return False
        *head, iy, ix = node.indices
        if (iy.pure_symbol, ix.pure_symbol) != (plan.y, plan.xw) or any(
                spatial & set(i.symbols) for i in head) or shapes[node.tensor][-2:] != out:
            return False
    return True


def _stride_note(plan: ConvPlan) -> str:
    """The header's note of a strided window (nothing at unit stride: those kernels' text is
    unchanged)."""
    return f", stride {plan.stride_y}x{plan.stride_x}" if plan.strided else ""


def _path_reason(plan: ConvPlan, direct: bool, ow: int, lane: int) -> str:
    """Why the direct path or im2col, for the explanation: the direct path reads an output
    vector as one shifted vector load of a buffered input row, so it needs unit stride and
    rows that fill at least half of their vectors (`row_tiles`)."""
    vectors = f"{ow}-pixel output rows in {-(-ow // lane)} vector(s) of {lane} lanes"
    if direct and plan.strided:  # depthwise
        return (f"; direct path, stride {plan.stride_y}x{plan.stride_x}: each buffered input "
                f"row split into {plan.stride_x} phases, so tap {plan.s} of an output vector is "
                f"one shifted load of phase {plan.s} % {plan.stride_x}; {vectors}")
    if direct:
        return f"; direct path: unit stride, {vectors} (at least half the lanes busy)"
    if plan.strided:
        return (f"; im2col, not the direct path: a stride-{plan.stride_y}x{plan.stride_x} "
                f"window reads input columns {plan.stride_x} apart, so an output vector is "
                f"no shifted load of an input row; im2col packs any stride (pixel ({plan.y}, "
                f"{plan.xw}) reads row {plan.stride_y}*{plan.y} + {plan.r} + ({plan.off_y}), "
                f"column {plan.stride_x}*{plan.xw} + {plan.s} + ({plan.off_x}))")
    return f"; im2col, not the direct path: {vectors} would leave over half the lanes idle"


def _epilogue(op: Op, strides: dict[str, list[int]]) -> tuple[str, set[str]]:
    """The statement rendered as C with the sum as `acc`, and the index names it reads."""
    stmt = op.stmts[0]
    dims = set(op.dims)
    outside = list(_outside(stmt.expr))
    used = {s for n in outside if isinstance(n, Access) for i in n.indices for s in i.symbols}
    used |= {n.name for n in outside if isinstance(n, Var)}

    def access(a: Access) -> str:
        terms = [f"({render_affine(i, dims)}) * {strides[a.tensor][d]}"
                 for d, i in enumerate(a.indices)]
        return f"{tensor_id(a.tensor)}[{' + '.join(terms) or '0'}]"

    dtypes = {d.name: d.dtype for d in (*op.inputs, *op.outputs, *op.locals)}
    return render_epilogue(stmt.expr, access, dtypes, dims), used


def _entry_head(w: CodeWriter, op: Op, entry: str, args: list[str], line: int,
                packed_from: str | None = None) -> None:
    """The entry's signature and the packed filter Ap: allocated here and packed by the driver,
    or, with `packed_from` (the filter's C name), that argument read as the panels."""
    note = f" {packed_from} holds the filter's MR-row panels, packed ahead." if packed_from else ""
    w.emit(f"/* {op.name}: the whole operator. args: {', '.join(args)} (contiguous data pointers).{note} */")
    open_entry(w, entry, args, len(op.inputs))
    if packed_from:
        w.emit(f"    const float *restrict Ap = {packed_from};", line)
        return
    w.emit("    float *Ap = aligned_alloc(64, (sizeof(float) * MPAD * KDIM + 63) / 64 * 64);", line)


def _pack_filter(w: CodeWriter, plan: ConvPlan, fst: dict[str, int], line: int) -> None:
    w.emit(f"""\
/* Pack filter {plan.f.tensor} as MPAD/MR panels of KDIM x MR (reduction order {plan.c}, {plan.r}, \
{plan.s}); rows past MDIM are zero. */
static void uol_pack_filter(const float *restrict F, float *restrict out, int64_t panel)
{{
    for (int64_t q = 0; q < KDIM; ++q) {{
        const int64_t {index_id(plan.c)} = q / (RS * SS), {index_id(plan.r)} = q / SS % RS, \
{index_id(plan.s)} = q % SS;
        for (int64_t i = 0; i < MR; ++i) {{
            const int64_t {index_id(plan.m)} = panel * MR + i;
            out[q * MR + i] = {index_id(plan.m)} < MDIM ? F[{index_id(plan.m)} * {fst[plan.m]} + \
{index_id(plan.c)} * {fst[plan.c]} + {index_id(plan.r)} * {fst[plan.r]} + \
{index_id(plan.s)} * {fst[plan.s]}] : 0.0f;
        }}
    }}
}}
""", line)
