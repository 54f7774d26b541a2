"""bf16 GEMM template: bf16 inputs, f32 accumulation, f32 or bf16 output, any operand layout.

C[batch, m, n] = sum[k](A[.., m, k] * B[.., k, n]) with A and B in bf16. B is packed per batch
entry (once when the batch shares it) into VNNI panels: pairs of k interleaved, the layout
TDPBF16PS and VDPBF16PS read; each group of panels right before A passes over it, so the
group is still in cache (about 1% faster at 2048^3 on Zen 4 than packing all of B first). The AMX and VDPBF16PS kernels read A in place when its k axis
is contiguous, k fills whole 32-deep steps and its rows are not a multiple of 4 KiB apart (rows
in the same L1 sets evict each other); AMX also needs whole 32-row blocks, while VDPBF16PS takes
a last, short block row from a padded copy. Every other case packs A, zero padded, in the
layout its micro-kernel reads (packing cost 3-8% of a call on Zen 5). Three micro-kernels share the
packing and the driver (c/gemm/bf16_kernels.py):
  amx        AMX tiles: a 32 x 32 block in 4 accumulator tiles, 2 A and 2 B tiles per k step
  avx512bf16 VDPBF16PS: 12 rows x 32 columns in 24 zmm accumulators
  f32        any host: bf16 pairs widened to f32 by shifts, FMAs on GCC vector types
The first unit the target's ISA list has (hfl/matrix.py, isa.toml [[matrix_isa]]) is chosen;
config {"bf16_isa": ...} overrides it (golden tests emit every variant on any host).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from uol_core.backends.base import KernelSource
from uol_core.backends.c.gemm.bf16_kernels import KERNELS, driver_text, packing_text
from uol_core.backends.c.text.writer import CodeWriter
from uol_core.hfl.matrix import unit_for
from uol_core.odl.ir import Access, Binary, DType, Op, Reduce
from uol_core.odl.shapes import shape_of

GENERATOR_VERSION = "uol-c-bf16-1"
ISA_OF_UNIT = {"amx_bf16": "amx", "avx512_bf16": "avx512bf16"}
# The build flags each variant needs (runtime/build.py ISA_FLAGS keys): the AMX and BF16
# intrinsics are enabled by a target pragma in the source, the rest by the AVX-512 flags.
BUILD_ISA = {"amx": "avx512", "avx512bf16": "avx512", "f32": "vecext"}
PANEL = 32  # columns of one packed B panel; k is padded to a multiple of 32 (one AMX k step)
# (the VDPBF16PS and f32 kernels stop at K's last pair, KPAIRS: at K = 513, padded to 544, the
# zeros were 6% of the work, and 1000x777x513 ran 3% faster without them)
# The bytes of B's panels per pass over A: a tuning choice, not a cache size. Measured at
# 2048^3 on Zen 5 (1 MiB L2; VDPBF16PS, alternated with torch): 512 KiB (half the L2) ran 0.91x
# torch, 1 MiB 1.00-1.02x, 2 MiB 1.02x, 8 MiB 0.95x; 1 MiB was the Sapphire Rapids (2 MiB L2)
# kernels' budget when they were measured (docs/benchmarks.md).
B_PANELS_BYTES = 1 << 20


@dataclass(frozen=True)
class Bf16Gemm:
    """A recognised bf16 GEMM with its sizes bound: element strides of every operand."""

    op: Op
    a: str
    b: str
    c: str
    out_dtype: DType
    M: int
    N: int
    K: int
    a_mk: tuple[int, int]  # element strides of A along m and k
    b_kn: tuple[int, int]
    c_mn: tuple[int, int]
    batch: tuple[tuple[int, int, int, int], ...]  # per batch index: extent, A, B, C strides

    @property
    def batch_count(self) -> int:
        count = 1
        for extent, *_ in self.batch:
            count *= extent
        return count

    @property
    def flops(self) -> int:
        return 2 * self.batch_count * self.M * self.N * self.K


def _strides(op: Op, access: Access | tuple[str, tuple[str, ...]],
             sizes: Mapping[str, int]) -> dict[str, int] | None:
    """Element stride of each index name in a row-major tensor; None unless every position is
    one plain index used once."""
    tensor, names = access if isinstance(access, tuple) else (
        access.tensor, tuple(f.pure_symbol for f in access.indices))
    if any(n is None for n in names) or len(set(names)) != len(names):
        return None
    shape = shape_of(op, tensor, sizes)
    strides, step = {}, 1
    for name, extent in zip(reversed(names), reversed(shape)):
        strides[name] = step
        step *= extent
    return strides


def match(op: Op, sizes: Mapping[str, int]) -> Bf16Gemm | None:
    """The bf16 GEMM of `op`, or None when the op is anything else (the caller moves on)."""
    if len(op.stmts) != 1 or len(op.outputs) != 1 or op.locals:
        return None
    stmt = op.stmts[0]
    red = stmt.expr
    if not (isinstance(red, Reduce) and red.op == "sum" and len(red.indices) == 1
            and isinstance(red.body, Binary) and red.body.op == "mul"
            and isinstance(red.body.lhs, Access) and isinstance(red.body.rhs, Access)):
        return None
    lhs, rhs = red.body.lhs, red.body.rhs
    if lhs.pad is not None or rhs.pad is not None or lhs.tensor == rhs.tensor:
        return None
    if (op.tensor(lhs.tensor).dtype != DType.bf16 or op.tensor(rhs.tensor).dtype != DType.bf16
            or op.outputs[0].dtype not in (DType.f32, DType.bf16)):
        return None
    sa, sb = _strides(op, lhs, sizes), _strides(op, rhs, sizes)
    sc = _strides(op, (stmt.target, stmt.indices), sizes)
    if sa is None or sb is None or sc is None:
        return None
    k = red.indices[0]
    # m and n: the innermost output index read by A only (B only); other such indices are
    # batch indices that the other operand broadcasts over.
    m_only = [i for i in stmt.indices if i in sa and i not in sb]
    n_only = [i for i in stmt.indices if i in sb and i not in sa]
    if (not m_only or not n_only or k not in sa or k not in sb
            or set(sa) - set(stmt.indices) - {k} or set(sb) - set(stmt.indices) - {k}):
        return None
    m, n = m_only[-1], n_only[-1]
    extent = dict(zip(stmt.indices, shape_of(op, stmt.target, sizes)))
    M = extent[m]
    batch = [i for i in stmt.indices if i not in (m, n)]
    # A batch index B broadcasts over, laid out right above m in both A and C, merges into m:
    # one taller GEMM instead of many short ones (a linear layer over a batch of sequences).
    while (batch and batch[-1] not in sb and sa.get(batch[-1]) == M * sa[m]
           and sc[batch[-1]] == M * sc[m]):
        M *= extent[batch.pop()]
    k_extent = shape_of(op, lhs.tensor, sizes)[[f.pure_symbol for f in lhs.indices].index(k)]
    if k_extent != shape_of(op, rhs.tensor, sizes)[[f.pure_symbol for f in rhs.indices].index(k)]:
        return None
    return Bf16Gemm(op, lhs.tensor, rhs.tensor, stmt.target, op.outputs[0].dtype,
                    M, extent[n], k_extent, (sa[m], sa[k]), (sb[k], sb[n]),
                    (sc[m], sc[n]),
                    tuple((extent[i], sa.get(i, 0), sb.get(i, 0), sc[i]) for i in batch))


def choose_isa(target, config: Mapping | None = None) -> str:
    """The micro-kernel for `target`: the config's bf16_isa, else its first matrix unit."""

    wanted = (config or {}).get("bf16_isa")
    if wanted:
        if wanted not in KERNELS:
            raise ValueError(f"bf16_isa={wanted!r} is not a bf16 GEMM kernel "
                             f"(choose from {', '.join(KERNELS)})")
        return str(wanted)
    unit = unit_for(target, "bf16") if target is not None else None
    return ISA_OF_UNIT.get(unit.flag, "f32") if unit else "f32"


def emit(op: Op, sizes: Mapping[str, int], target=None,
         config: Mapping | None = None) -> KernelSource | None:
    """The bf16 GEMM kernel of `op`, or None when `op` is not a bf16 GEMM."""
    gemm = match(op, sizes)
    return None if gemm is None else emit_matched(gemm, target, config)


def emit_matched(gemm: Bf16Gemm, target=None, config: Mapping | None = None) -> KernelSource:
    """The kernel of a recognised bf16 GEMM (`match`'s plan) for `target` and the knobs."""
    isa = choose_isa(target, config)
    threads = int((config or {}).get("threads") or getattr(target, "cores", 0)
                  or os.cpu_count() or 1)
    return emit_gemm(gemm, isa, threads, getattr(target, "name", "host"))


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step


def emit_gemm(g: Bf16Gemm, isa: str, threads: int, target_name: str) -> KernelSource:
    """The C source of `g` with the `isa` micro-kernel on `threads` OpenMP threads."""
    kernel = KERNELS[isa]
    bm, bn = kernel.block_m, kernel.block_n
    mp, np_, kp = _round_up(g.M, bm), _round_up(g.N, PANEL), _round_up(g.K, PANEL)
    # A is read in place when its k axis is contiguous, k fills whole steps and its rows are
    # not 4 KiB multiples apart; its rows must fill whole blocks too unless the micro-kernel
    # takes the last, short block row from a padded copy. Else A is packed, zero padded.
    a_direct = (kernel.a_in_place and g.a_mk[1] == 1 and g.K % PANEL == 0
                and not _aliasing_rows(g.a_mk[0]) and (g.M % bm == 0 or kernel.a_tail))
    a_tail = a_direct and g.M % bm != 0
    # a packed copy in rows keeps its rows off 4 KiB multiples too (one cache line more)
    lda_p = kp + PANEL if _aliasing_rows(kp) else kp
    lda = g.a_mk[0] if a_direct else {1: lda_p, 2: kp, 3: 2 * kp}[kernel.a_layout]
    # B panels every A block row passes over before the next group: each group costs a pass
    # over packed A, so a group as large as the L2 beats one that fits with room to spare.
    chunk = max(1, min(np_ // PANEL, B_PANELS_BYTES // (kp * PANEL * 2)))
    stmt_line = g.op.stmts[0].line
    w = CodeWriter(default_line=g.op.line)
    sizes = ", ".join(f"{k}={v}" for k, v in (("M", g.M), ("N", g.N), ("K", g.K)))
    w.emit(f"/* {g.op.name}: bf16 GEMM generated by UOL ({GENERATOR_VERSION}) for target "
           f"{target_name}.\n   {sizes}, batch {g.batch_count}; micro-kernel {isa}: "
           f"{kernel.describe}.\n   B packed in {PANEL}-column VNNI panels; A "
           f"{_a_route(a_direct, a_tail, g, kernel, lda)}; {chunk} B panel(s) "
           f"per pass over A ({B_PANELS_BYTES >> 10} KiB at most); "
           f"output {g.out_dtype.value}. */")
    w.emit("#include <stdint.h>\n#include <stdlib.h>\n#include <string.h>\n#include <stdio.h>\n"
           "#include <omp.h>")
    w.emit("#if defined(__x86_64__)\n#include <immintrin.h>\n#endif")
    if kernel.pragma:
        w.emit(kernel.pragma)
    defines = {"MDIM": g.M, "NDIM": g.N, "KDIM": g.K, "MP": mp, "NP": np_, "KP": kp,
               "KS": kp // PANEL, "KPAIRS": (g.K + 1) // 2, "BM": bm, "BN": bn, "BATCH": g.batch_count,
               "THREADS": threads, "CHUNK": chunk, "A_DIRECT": int(a_direct),
               "A_TAIL": int(a_tail), "A_LAYOUT": kernel.a_layout, "LDA": lda, "LDA_P": lda_p,
               "A_PACKED": mp * (lda_p if kernel.a_layout == 1 else kp * (2 if kernel.a_f32 else 1)),
               "B_SHARED": int(all(sb == 0 for _, _, sb, _ in g.batch)),
               "SAM": g.a_mk[0], "SAK": g.a_mk[1], "SBK": g.b_kn[0], "SBN": g.b_kn[1],
               "SCM": g.c_mn[0], "SCN": g.c_mn[1],
               "C_F32": int(g.out_dtype == DType.f32)}
    w.emit("\n".join(f"#define {k} {v}" for k, v in defines.items()) + "\n")
    w.emit(_batch_offsets(g) + "\n")
    w.emit(packing_text(), stmt_line)
    w.emit(kernel.text, stmt_line)
    entry = f"uol_{g.op.name}"
    tensors = [d.name for d in g.op.inputs] + [g.c]
    w.emit(driver_text(entry, kernel, {"a": tensors.index(g.a), "b": tensors.index(g.b),
                                       "c": tensors.index(g.c)}), stmt_line)
    meta = {"args": tensors, "outputs": [g.c], "threads": threads, "flops": g.flops,
            "isa": BUILD_ISA[isa], "bf16_isa": isa, "generator": GENERATOR_VERSION,
            "a_direct": a_direct, "reduction_length": g.K}
    config = {"bf16_isa": isa, "threads": threads}
    return w.source(entry, g.op.name, config, meta)


def _a_route(direct: bool, tail: bool, g: Bf16Gemm, kernel, lda: int) -> str:
    """How A reaches the micro-kernel, for the kernel's header."""
    if direct and tail:
        return (f"read in place, its last {g.M % kernel.block_m} row(s) from a zero-padded "
                f"copy")
    if direct:
        return "read in place"
    why = ("k not contiguous" if g.a_mk[1] != 1 else f"K={g.K} not a multiple of {PANEL}"
           if g.K % PANEL else f"rows {g.a_mk[0] * 2} bytes apart, a multiple of 4 KiB"
           if _aliasing_rows(g.a_mk[0]) and kernel.a_in_place else "")
    layout = (f"rows {lda} elements apart" if kernel.a_layout == 1 else
              "AMX tiles" if kernel.a_layout == 2 else "widened to f32")
    return f"packed (zero padded, {layout}{'; ' + why if why else ''})"


def _aliasing_rows(row_stride: int) -> bool:
    """Whether rows `row_stride` bf16 apart fall into the same L1 sets (a multiple of 4 KiB:
    the set index repeats), where reading rows in place thrashes the L1."""
    return (row_stride * 2) % 4096 == 0


def _batch_offsets(g: Bf16Gemm) -> str:
    """A C function from a flat batch number to the element offsets of A, B and C (the last
    batch index varies fastest, as in the output's row-major order)."""
    lines = ["static inline void batch_offsets(int64_t b, int64_t *oa, int64_t *ob, int64_t *oc)",
             "{", "    int64_t i;", "    *oa = *ob = *oc = 0;"]
    for extent, sa, sb, sc in reversed(g.batch):
        lines.append(f"    i = b % {extent}; b /= {extent}; "
                     f"*oa += i * {sa}; *ob += i * {sb}; *oc += i * {sc};")
    lines += ["    (void)i; (void)b;", "}"]
    return "\n".join(lines)
