"""C GEMM emitter, direct path: small and skinny shapes (M or N <= 128, K deep; batched small
products) where packing costs more than it saves.

A is never packed: the micro-kernel broadcasts from MR rows of A in place (rows past the edge
read the last row again; their results are never stored). B is packed only where that pays or
is needed: a kc x NR panel reused by several MR-row strips (M > MR) is copied once into an
L1-resident buffer, unless B's rows are exactly NR wide (then B is that layout already); with
M <= MR each B element is used once, so the panel streams from memory with software prefetch.
An edge panel (nr < NR) or a B without unit stride along n is always packed (zero-padded),
because the micro-kernel loads whole vectors.

Loop nest: batch -> pc (KC depth) -> jr (NR panels) -> ir (MR strips). The OpenMP split is
over batch slices (par=batch), NR panels (par=jr, contiguous shares), MR-row strips (par=ir:
each thread packs the B panels it reads, all of them: what a single panel, N <= NR, leaves) or
the depth (par=k: each thread sums its share of K into a private M x N buffer, then the threads
add the buffers row strip by row strip and run the epilogue). One thread emits no parallel
region at all.
"""

from __future__ import annotations

from uol_core.acg.config import TileConfig, lanes
from uol_core.backends.base import KernelSource
from uol_core.backends.c.gemm.emitter import (
    _header,
    _operand_strides,
    _packing,
    _store,
    batch_extent,
    emit_prepacked_note,
)
from uol_core.backends.c.platforms import platform
from uol_core.backends.c.text.frame import open_entry
from uol_core.backends.c.text.names import index_id, tensor_id
from uol_core.backends.c.text.writer import GENERATOR_VERSION, MICRO_KERNEL, CodeWriter
from uol_core.odl.ir import Access, Affine
from uol_core.plans.gemm import GemmPlan, epilogue_reads


def emit_gemm_direct(plan: GemmPlan, cfg: TileConfig, target, prepacked_b: bool = False
                     ) -> KernelSource:
    """The complete C source of one GEMM-family kernel on the direct path (`prepacked_b`: B's
    argument is its panels packed beforehand, see emitter.emit_gemm)."""

    w = CodeWriter(default_line=plan.op.line)
    tensors = [d.name for d in plan.op.inputs] + list(plan.stores)
    entry = f"uol_{plan.op.name}"
    _header(w, plan, cfg, target, tensors)
    line = plan.stmts[0].line
    if prepacked_b:
        w.emit("/* direct path: A read in place; B panels read as packed before the call */", line)
        emit_prepacked_note(w, plan, cfg, line)
    else:
        w.emit(f"/* direct path: A read in place; B panels {_b_policy(plan, cfg)} */", line)
        w.emit(f"#define B_REUSED {int(b_panel_reused(plan, cfg))}\n", line)
    _micro_kernel(w, cfg, target, line, plain_store(plan))
    _packing(w, line, "" if prepacked_b else "b")
    _driver(w, plan, cfg, tensors, entry, prepacked_b)
    meta = {"args": tensors, "ranks": [len(plan.tensor_shape(t)) for t in tensors],
            "outputs": list(plan.stores), "threads": cfg.threads, "flops": plan.flops,
            "reduction_length": plan.K, "generator": GENERATOR_VERSION}
    return w.source(entry, plan.op.name, cfg.to_dict(), meta)


def plain_store(plan: GemmPlan) -> bool:
    """Whether the kernel stores the bare sum (no epilogue, no other reads): then full tiles
    go from the accumulators straight to C, without the tile buffer."""

    return (len(plan.stmts) == 1 and not epilogue_reads(plan)
            and plan.stmts[0].expr == plan.reduce)


def b_panel_reused(plan: GemmPlan, cfg: TileConfig) -> bool:
    """Whether a B panel serves more than one MR-row strip (then packing it pays)."""
    return cfg.mr < plan.M


def _b_policy(plan: GemmPlan, cfg: TileConfig) -> str:
    if b_panel_reused(plan, cfg):
        return (f"packed once per (pc, jr) and reused by {-(-plan.M // cfg.mr)} row strips "
                "(M > MR)")
    return "streamed from memory with prefetch (M <= MR: each B element is used once); edge " \
           "or strided panels packed"


def _micro_kernel(w: CodeWriter, cfg: TileConfig, target, line: int, plain: bool) -> None:
    ops, lane = platform(cfg.isa), lanes(cfg.isa, target)
    nv = cfg.nr // lane
    w.emit(f"/* Micro-kernel: tile[MR x NR] = A rows (MR x kc, row stride ars, k stride acs) * "
           f"B panel (kc x NR, row stride brs); {cfg.mr * nv} accumulators of {lane} lanes "
           f"({cfg.isa}). Rows at or past mr re-read row mr-1: in bounds, never stored. "
           "mode 0: store to tile; 1: C = tile; 2: C += tile (C: rows ldc apart, unit stride, "
           "NR columns). */", line)
    w.emit(f"{MICRO_KERNEL} uol_micro_direct(int64_t kc, int64_t mr, const float *restrict a,"
           "\n    int64_t ars, int64_t acs, const float *restrict b, int64_t brs, "
           "float *restrict tile,\n    float *restrict c, int64_t ldc, int mode)\n{", line)
    for i in range(cfg.mr):
        w.emit(f"    const float *restrict a{i} = a + ({i} < mr ? {i} : mr - 1) * ars;", line)
    acc = [[f"c{i}_{v}" for v in range(nv)] for i in range(cfg.mr)]
    for row in acc:
        w.emit("    " + ops.vec + " " + ", ".join(f"{c} = {ops.zero}" for c in row) + ";", line)
    w.emit(f"#pragma GCC unroll {cfg.ku}\n    for (int64_t p = 0; p < kc; ++p) {{", line)
    w.emit("        const int64_t ak = p * acs;", line)
    if cfg.pf:  # one prefetch per cache line of the B row PF steps ahead
        step = max(1, 64 // (lane * 4))
        for v in range(0, nv, step):
            w.emit("        " + ops.prefetch.format(f"b + PF * brs + {v * lane}") + ";", line)
    for v in range(nv):
        w.emit(f"        const {ops.vec} b{v} = " + ops.loadu.format(f"b + {v * lane}") + ";",
               line)
    for i, row in enumerate(acc):
        w.emit(f"        {{ const {ops.vec} ai = " + ops.bcast.format(f"a{i}[ak]") + "; "
               + " ".join(f"{c} = " + ops.fma.format("ai", f"b{v}", c) + ";"
                          for v, c in enumerate(row)) + " }", line)
    w.emit("        b += brs;\n    }", line)
    if plain:
        w.emit("    if (mode == 0) {", line)
    for i, row in enumerate(acc):
        w.emit("    " + " ".join(ops.store.format(f"tile + {i * cfg.nr + v * lane}", c) + ";"
                                 for v, c in enumerate(row)), line)
    if plain:
        w.emit("    return;\n    }", line)
        _store_to_c(w, ops, acc, lane, line)
    w.emit("}\n", line)


def _store_to_c(w: CodeWriter, ops, acc: list[list[str]], lane: int, line: int) -> None:
    """Modes 1 and 2: the accumulators go straight to C, rows past mr left alone."""
    for i, row in enumerate(acc):
        w.emit(f"    if ({i} < mr) {{", line)
        for v, c in enumerate(row):
            at = f"c + {i} * ldc + {v * lane}"
            w.emit(f"        {c} = mode == 2 ? " + ops.add.format(c, ops.loadu.format(at))
                   + f" : {c}; " + ops.storeu.format(at, c) + ";", line)
        w.emit("    }", line)


def _driver(w: CodeWriter, plan: GemmPlan, cfg: TileConfig, tensors: list[str], entry: str,
            prepacked_b: bool = False) -> None:
    line = plan.stmts[0].line
    a_off, a_rs, a_cs = _operand_strides(plan, plan.lhs, plan.m, plan.k)
    b_off, b_rs, b_cs = _operand_strides(plan, plan.rhs, plan.k, plan.n)
    w.emit(f"/* {plan.op.name}: the whole operator. args: {', '.join(tensors)} (data pointers); "
           "strides: each tensor's strides, concatenated. */")
    open_entry(w, entry, tensors, len(plan.op.inputs),
               ranks=[len(plan.tensor_shape(name)) for name in tensors])
    ksplit = cfg.par == "k" and cfg.threads > 1
    if ksplit:
        w.emit("    /* one private M x N partial sum per thread, added after the barrier */\n"
               "    float *part = aligned_alloc(64, (sizeof(float) * THREADS * MDIM * NDIM + 63)"
               " / 64 * 64);", line)
    if cfg.threads > 1:
        w.emit("#pragma omp parallel num_threads(THREADS)", line)
    w.emit("    {\n    const int64_t tid = omp_get_thread_num(), nth = omp_get_num_threads();\n"
           + ("" if prepacked_b else
              "    float *Bp = aligned_alloc(64, (sizeof(float) * KC * NR + 63) / 64 * 64);\n")
           + "    float tile[MR * NR] __attribute__((aligned(64)));\n"
           "    const int64_t ic = 0, jc = 0;  /* one block: tiles are placed by ir and jr */",
           line)
    if cfg.par == "batch" and cfg.threads > 1:
        w.emit("#pragma omp for schedule(dynamic, 1) nowait", line)
    w.emit("    for (int64_t bi = 0; bi < BATCH; ++bi) {", line)
    rest = "bi"
    for b in reversed(plan.batch):
        w.emit(f"        const int64_t {index_id(b)} = {rest} % {batch_extent(plan, b)};", line)
        rest = f"({rest} / {batch_extent(plan, b)})"
    w.emit(f"        const float *A = {tensor_id(plan.lhs.tensor)} + {a_off};\n"
           f"        const float *B = {tensor_id(plan.rhs.tensor)} + {b_off};\n"
           f"        const int64_t ars = {a_rs}, acs = {a_cs}, brs = {b_rs}, bcs = {b_cs};", line)
    _shares(w, cfg, ksplit, line)
    plain = plain_store(plan) and not ksplit
    _c_operand(w, plan, plain, line)
    c_args = "Cb + ir * crs + jr, crs, mode" if plain else "tile, 0, 0"
    w.emit("""\
        for (int64_t pc = k_lo; pc < k_hi; pc += KC) {
            const int64_t kc = k_hi - pc < KC ? k_hi - pc : KC;
            const int first = pc == 0, last = pc + KC >= KDIM;
            for (int64_t jr = j_lo; jr < j_hi; jr += NR) {
                const int64_t nr = NDIM - jr < NR ? NDIM - jr : NR;
                const int mode = UOL_MODE;
PANEL
                for (int64_t ir = i_lo; ir < i_hi; ir += MR) {
                    const int64_t mr = MDIM - ir < MR ? MDIM - ir : MR;
                    uol_micro_direct(kc, mr, A + ir * ars + pc * acs, ars, acs, bp, bstride,
                                     tile, C_ARGS);""".replace("C_ARGS", c_args)
           .replace("PANEL", PREPACKED_PANEL if prepacked_b else PACKED_PANEL), line)
    pad = "                    "
    if ksplit:
        w.emit(f"{pad}float *own = part + tid * MDIM * NDIM;\n"
               f"{pad}for (int64_t i = 0; i < mr; ++i)\n"
               f"{pad}    for (int64_t j = 0; j < nr; ++j)\n"
               f"{pad}        own[(ir + i) * NDIM + jr + j] = tile[i * NR + j]\n"
               f"{pad}            + (pc == k_lo ? 0.0f : own[(ir + i) * NDIM + jr + j]);", line)
    else:
        w.emit(f"{pad}if (!mode) {{", line)
        _store(w, plan, pad + "    ")
        w.emit(f"{pad}}}", line)
    w.emit("                }\n            }\n        }", line)
    if ksplit:
        _reduce(w, plan, line)
    w.emit("    }" + ("" if prepacked_b else "\n    free(Bp);") + "\n    }", line)
    if ksplit:
        w.emit("    free(part);", line)
    w.emit("}", line)


PACKED_PANEL = """\
                const float *bp = B + pc * brs + jr * bcs;
                int64_t bstride = brs;
                /* the panel that pays (reused, and not already laid out as one packed
                   panel: B rows NR wide) or must be packed (edge, strided) */
                if ((B_REUSED && brs != NR) || nr < NR || bcs != 1) {
                    uol_pack_b(bp, brs, bcs, nr, kc, Bp);
                    bp = Bp; bstride = NR;
                }"""
PREPACKED_PANEL = """\
                /* the kc x NR panel, packed once before any call (edges zero-padded) */
                const float *bp = B + pc * NPAD + jr * kc;
                const int64_t bstride = NR;"""


def _c_operand(w: CodeWriter, plan: GemmPlan, plain: bool, line: int) -> None:
    """C's base, row stride and the micro-kernel's store mode for full tiles (mode 0 everywhere
    when an epilogue or a depth split needs the tile buffer)."""

    if not plain:
        w.emit("#define UOL_MODE 0", line)
        return
    stmt = plan.stmts[0]  # the one statement, stored as it is
    out = Access(stmt.target, tuple(Affine.of(i) for i in stmt.indices))
    c_off, c_rs, c_cs = _operand_strides(plan, out, plan.m, plan.n)
    w.emit(f"        float *Cb = {tensor_id(stmt.target)} + {c_off};\n"
           f"        const int64_t crs = {c_rs}, ccs = {c_cs};", line)
    # set per tile in the k loop: whole unit-stride tiles go straight to C
    w.emit("#define UOL_MODE (nr == NR && ccs == 1 ? (first ? 1 : 2) : 0)", line)


def _share(var: str, units: str, step: str, extent: str) -> str:
    """C for this thread's contiguous share [var_lo, var_hi) of `units` blocks of `step`."""
    return (f"        const int64_t {var}_lo = {units} * tid / nth * {step};\n"
            f"        const int64_t {var}_hi_ = {units} * (tid + 1) / nth * {step};\n"
            f"        const int64_t {var}_hi = {var}_hi_ < {extent} ? {var}_hi_ : {extent};")


def _shares(w: CodeWriter, cfg: TileConfig, ksplit: bool, line: int) -> None:
    """This thread's depth range [k_lo, k_hi), panel range [j_lo, j_hi) and row-strip range
    [i_lo, i_hi). A row split (par=ir) packs the same B panels in each thread."""
    split = cfg.par if cfg.threads > 1 else ""
    if split == "ir":
        w.emit("        const int64_t strips = (MDIM + MR - 1) / MR;\n"
               + _share("i", "strips", "MR", "MDIM"), line)
    else:
        w.emit("        const int64_t i_lo = 0, i_hi = MDIM;", line)
    if ksplit:  # whole KC blocks per thread, so partial sums line up with the k loop
        w.emit("        const int64_t kblocks = (KDIM + KC - 1) / KC;\n"
               + _share("k", "kblocks", "KC", "KDIM") + "\n"
               "        const int64_t j_lo = 0, j_hi = NDIM;", line)
    elif split == "jr":
        w.emit("        const int64_t k_lo = 0, k_hi = KDIM;\n"
               "        const int64_t panels = (NDIM + NR - 1) / NR;\n"
               + _share("j", "panels", "NR", "NDIM"), line)
    else:
        w.emit("        const int64_t k_lo = 0, k_hi = KDIM, j_lo = 0, j_hi = NDIM;", line)


def _reduce(w: CodeWriter, plan: GemmPlan, line: int) -> None:
    """After the barrier: each thread adds the partial sums of its share of the MR-row strips
    (threads whose depth share was empty wrote nothing and are skipped), then runs the epilogue
    through the ordinary store with first = last = 1."""

    w.emit("""\
#pragma omp barrier
        {
            const int64_t strips = (MDIM + MR - 1) / MR;
            const int64_t r_lo = strips * tid / nth * MR, r_hi_ = strips * (tid + 1) / nth * MR;
            const int64_t r_hi = r_hi_ < MDIM ? r_hi_ : MDIM;
            const int first = 1, last = 1;
            /* the partial sums written, in thread order (found once: two divisions per
               element and thread cost more than the adds at small sizes) */
            const float *parts[THREADS];
            int64_t nparts = 0;
            for (int64_t t = 0; t < nth; ++t)
                if (kblocks * t / nth < kblocks * (t + 1) / nth) parts[nparts++] = part + t * MDIM * NDIM;
            for (int64_t ir = r_lo; ir < r_hi; ir += MR)
            for (int64_t jr = 0; jr < NDIM; jr += NR) {
                const int64_t mr = MDIM - ir < MR ? MDIM - ir : MR;
                const int64_t nr = NDIM - jr < NR ? NDIM - jr : NR;
                for (int64_t i = 0; i < mr; ++i) {
                    const int64_t row = (ir + i) * NDIM + jr;
                    for (int64_t j = 0; j < nr; ++j) tile[i * NR + j] = parts[0][row + j];
                    for (int64_t q = 1; q < nparts; ++q)
                        for (int64_t j = 0; j < nr; ++j) tile[i * NR + j] += parts[q][row + j];
                }""", line)
    _store(w, plan, "                ")
    w.emit("            }\n        }\n#pragma omp barrier", line)
