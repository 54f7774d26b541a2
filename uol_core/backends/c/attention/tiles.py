"""Vector helpers and register micro-kernels of the C flash-attention template (attention.forward).

All tiles keep the query axis along the vector lanes ("transposed" layout):
    S^T[j][i] = sum_d K[j][d] * Q^T[d][i]      O^T[e][i] = alpha[i] O^T[e][i] + sum_j V[j][e] * P^T[j][i]
so K and V rows are broadcast straight from memory (no transposes inside the key loop), Q^T is
packed once per query block, and the row statistics (max, exp, sum) of a query are one lane:
the online softmax needs no horizontal reductions. Each micro-kernel holds MR x NV vectors of
accumulators (MR broadcast rows times NV vectors of queries) in registers.
The ISA's platform file (c/platforms) gives the same few inline functions (uol_vld, uol_vfma,
uol_vexp, ...) over AVX-512, AVX2 or gcc's portable vector extension, so the kernel body is
written once.
"""

from __future__ import annotations

from dataclasses import dataclass

from uol_core.acg.config import lanes, target_isas, vector_registers
from uol_core.backends.c.platforms import platform

NV = 2  # vectors of queries per micro-tile (3 on 16 registers spills)

@dataclass(frozen=True)
class Tiles:
    """Vector shape of the flash kernel on one target: ISA, lanes, broadcast rows per tile."""

    isa: str
    lanes: int
    mr: int  # broadcast rows (keys in Q.K, output columns in P.V) per micro-tile
    nv: int  # vectors of queries per micro-tile

    @property
    def qt(self) -> int:
        """Queries per micro-tile (nv vectors)."""
        return self.nv * self.lanes

    def prelude(self) -> str:
        """C definitions of uol_v and its inline operations for this ISA."""
        plat = platform(self.isa)
        return plat.flash_prelude(self.lanes) + (plat.vector_math(self.lanes)
                                                 if plat.vector_math else "")


def choose_tiles(target) -> Tiles:
    """Best ISA of the target; MR so that MR x NV accumulators, NV loads and a broadcast fit."""
    if target is None:
        return Tiles("vecext", 4, 6, NV)
    isa = target_isas(target)[0]
    regs = vector_registers(isa, target) if target.vector_registers else 16
    return Tiles(isa, lanes(isa, target), max(1, (regs - NV - 1) // NV), NV)


def _acc(t: Tiles, rows: int) -> list[list[str]]:
    return [[f"c{r}_{v}" for v in range(t.nv)] for r in range(rows)]


def _stores(t: Tiles, rows: int, dst: str, ld: str) -> str:
    return "\n".join("    " + " ".join(f"uol_vst({dst} + {r} * {ld} + {v * t.lanes}, {c});"
                                         for v, c in enumerate(row))
                     for r, row in enumerate(_acc(t, rows)))


def _fmas(t: Tiles, rows: int, name: str, src: str, vec: str) -> str:
    """One step: broadcast row r's scalar (`src` with {r}) times the nv vectors `vec`0.. per row."""
    return "\n".join(f"        {{ const uol_v {name} = uol_vset({src.format(r=r)}); "
                     + " ".join(f"{c} = uol_vfma({name}, {vec}{v}, {c});" for v, c in enumerate(row))
                     + " }" for r, row in enumerate(_acc(t, rows)))


def score_kernel(t: Tiles, depth: int, ldq: int, lds: int | None = None,
                 name: str = "uol_qk_tile", rows: int | None = None) -> str:
    """uol_qk_tile: S^T[rows keys (default MR)][QT queries] = K rows (broadcast) x Q^T (depth x
    QT, row stride ldq), stored with row stride lds (default ldq)."""
    rows = rows or t.mr
    q = ", ".join(f"q{v} = uol_vld(qt + d * {ldq} + {v * t.lanes})" for v in range(t.nv))
    zero = "\n".join("    uol_v " + ", ".join(f"{c} = uol_vset(0.0f)" for c in row) + ";"
                     for row in _acc(t, rows))
    return f"""/* Score micro-tile: {rows} keys x {t.qt} queries, {rows * t.nv} accumulators in registers. */
static inline void {name}(const float *const *restrict kr, const float *restrict qt,
                               float *restrict st)
{{
{zero}
    for (int64_t d = 0; d < {depth}; ++d) {{
        const uol_v {q};
{_fmas(t, rows, "k", "kr[{r}][d]", "q")}
    }}
{_stores(t, rows, "st", str(lds or ldq))}
}}
"""


def value_kernel(t: Tiles, rows: int, ldp: int, ldv: int) -> str:
    """uol_pv_tile<rows>: O^T[rows cols][QT queries] = alpha O^T + V^T (broadcast) x P^T, nk keys."""
    p = ", ".join(f"p{v} = uol_vld(pt + j * {ldp} + {v * t.lanes})" for v in range(t.nv))
    alpha = ", ".join(f"a{v} = uol_vld(alpha + {v * t.lanes})" for v in range(t.nv))
    load = "\n".join("    uol_v " + ", ".join(f"{c} = uol_vmul(uol_vld(ot + {r} * {ldp} + "
                                              f"{v * t.lanes}), a{v})" for v, c in enumerate(row))
                     + ";" for r, row in enumerate(_acc(t, rows)))
    return f"""/* Output micro-tile: {rows} columns x {t.qt} queries, rescaled by alpha, += V^T P^T. */
static inline void uol_pv_tile{rows}(int64_t nk, const float *restrict pt, const float *restrict v,
                               float *restrict ot, const float *restrict alpha)
{{
    const uol_v {alpha};
{load}
    for (int64_t j = 0; j < nk; ++j) {{
        const uol_v {p};
{_fmas(t, rows, "x", "v[j * " + str(ldv) + " + {r}]", "p")}
    }}
{_stores(t, rows, "ot", str(ldp))}
}}
"""


def acc_kernel(t: Tiles, name: str, rows: int, a_row: int, a_k: int, ldb: int, ldc: int) -> str:
    """<name><rows>: C[rows][QT] += sum_k A(r, k) B[k][QT], A(r, k) = a[r * a_row + k * a_k]
    broadcast, B rows and C rows (strides ldb, ldc) along the lanes: the flash backward's dV, dK
    (A = P^T or dS^T rows) and dQ (A = dS^T columns) with the head dimension on the lanes."""
    b = ", ".join(f"b{v} = uol_vld(b + k * {ldb} + {v * t.lanes})" for v in range(t.nv))
    load = "\n".join("    uol_v " + ", ".join(f"{c} = uol_vld(c + {r * ldc + v * t.lanes})"
                                              for v, c in enumerate(row)) + ";"
                     for r, row in enumerate(_acc(t, rows)))
    return f"""/* {rows} x {t.qt} accumulator tile in registers, loaded once and stored once per call. */
static inline void {name}{rows}(int64_t nk, const float *restrict a, const float *restrict b,
                               float *restrict c)
{{
{load}
    for (int64_t k = 0; k < nk; ++k) {{
        const uol_v {b};
{_fmas(t, rows, "x", "a[{r} * " + str(a_row) + " + k * " + str(a_k) + "]", "b")}
    }}
{_stores(t, rows, "c", str(ldc))}
}}
"""
