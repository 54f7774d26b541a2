"""Arm SVE / SVE2: vector-length-agnostic f32 vectors, <arm_sve.h> intrinsics.

An SVE vector holds svcntw() f32 lanes, a number the core fixes (128 to 2048 bits) and the
code reads at run time: one binary runs on every vector length. Loops step by `vla_step` and
govern each step with the predicate `vla_pred` (svwhilelt: the lanes still inside the row), so
a row's tail needs no scalar loop. Every operation below reads that predicate from the name
`uol_pg` in the loop's scope; merging forms (_m) leave inactive lanes of the first operand
as they were, so an accumulator carries through a partial last step unchanged.

Flash attention (forward and backward), the convolution and the packed GEMM have
length-agnostic forms (c_attention_sve, c_attention_bwd_sve, c_conv_sve, c_gemm_sve): their
register tiles count vectors, not lanes, and are written in the predicated vocabulary `_VLA`
gives (one predicate per vector of a tile). The GEMM's direct path and a user's isa=neon keep
the target's fixed-width ISA (NEON).
"""

from __future__ import annotations

from uol_core.backends.c.platforms import Platform

# exp(x) on every lane: the constants and steps of the scalar uol_expf (text.vmath) and of the NEON
# uol_vexp. svmls(a, b, c) = a - b * c and svmla(a, b, c) = a + b * c round once (FMLS/FMLA);
# svrintn rounds to nearest, ties to even (FRINTN). All lanes are computed (_x forms): the
# caller's predicate decides which lanes it keeps.
_VEXP = """
/* exp(x) on the lanes of an SVE vector: n = round(x / ln 2), r = x - n ln 2 in two parts,
   degree-5 polynomial, 2^n by an integer shift into the exponent field. */
static inline svfloat32_t uol_vexp(svfloat32_t x)
{
    const svbool_t all = svptrue_b32();
    x = svmin_n_f32_x(all, svmax_n_f32_x(all, x, -87.0f), 88.0f);
    const svfloat32_t n = svrintn_f32_x(all, svmul_n_f32_x(all, x, 1.44269504f));
    svfloat32_t r = svmls_n_f32_x(all, x, n, 0.693359375f);
    r = svmls_n_f32_x(all, r, n, -2.12194440e-4f);
    svfloat32_t q = svmla_n_f32_x(all, svdup_n_f32(1.3981999507e-3f), r, 1.9875691500e-4f);
    q = svmla_f32_x(all, svdup_n_f32(8.3334519073e-3f), q, r);
    q = svmla_f32_x(all, svdup_n_f32(4.1665795894e-2f), q, r);
    q = svmla_f32_x(all, svdup_n_f32(1.6666665459e-1f), q, r);
    q = svmla_f32_x(all, svdup_n_f32(5.0000001201e-1f), q, r);
    q = svmla_f32_x(all, svadd_n_f32_x(all, r, 1.0f), q, svmul_f32_x(all, r, r));
    const svint32_t e = svlsl_n_s32_x(all, svadd_n_s32_x(all, svcvt_s32_f32_x(all, n), 127), 23);
    return svmul_f32_x(all, q, svreinterpret_f32_s32(e));
}
"""


# The length-agnostic templates' vocabulary: every operation takes the predicate of its own
# vector, so a register tile of several vectors (each with its own tail) needs no `uol_pg`
# scope per vector. Merging forms (_m) keep the inactive lanes of the accumulator; loads
# under a predicate read no memory for inactive lanes (they are zero), so a tile may run past
# the end of a row or of a buffer.
_VLA = """
typedef svfloat32_t uol_v;  /* svcntw() f32 lanes, read at run time (sve) */
typedef svbool_t uol_p;     /* one predicate bit per lane */
static inline int64_t uol_lanes(void) { return (int64_t)svcntw(); }
static inline uol_p uol_pwhile(int64_t i, int64_t n) { return svwhilelt_b32_s64(i, n); }
static inline uol_p uol_pnone(void) { return svpfalse_b(); }
static inline uol_v uol_vzero(void) { return svdup_n_f32(0.0f); }
static inline uol_v uol_vset(float x) { return svdup_n_f32(x); }
static inline uol_v uol_vld(uol_p pg, const float *p) { return svld1_f32(pg, p); }
static inline void uol_vst(uol_p pg, float *p, uol_v x) { svst1_f32(pg, p, x); }
static inline uol_v uol_vfma(uol_p pg, uol_v acc, uol_v a, uol_v b) { return svmla_f32_m(pg, acc, a, b); }
static inline uol_v uol_vfmas(uol_p pg, uol_v acc, uol_v a, float s) { return svmla_n_f32_m(pg, acc, a, s); }
static inline uol_v uol_vsub(uol_p pg, uol_v a, uol_v b) { return svsub_f32_m(pg, a, b); }
static inline uol_v uol_vsubs(uol_p pg, uol_v a, float s) { return svsub_n_f32_m(pg, a, s); }
static inline uol_v uol_vadd(uol_p pg, uol_v a, uol_v b) { return svadd_f32_m(pg, a, b); }
static inline uol_v uol_vmul(uol_p pg, uol_v a, uol_v b) { return svmul_f32_m(pg, a, b); }
static inline uol_v uol_vmuls(uol_p pg, uol_v a, float s) { return svmul_n_f32_m(pg, a, s); }
/* a * s on the active lanes, 0 on the others */
static inline uol_v uol_vmulsz(uol_p pg, uol_v a, float s) { return svmul_n_f32_z(pg, a, s); }
static inline uol_v uol_vmax(uol_p pg, uol_v a, uol_v b) { return svmax_f32_m(pg, a, b); }
/* horizontal sum and max of every lane (FADDV, FMAXV) */
static inline float uol_vsum(uol_v x) { return svaddv_f32(svptrue_b32(), x); }
static inline float uol_vhmax(uol_v x) { return svmaxv_f32(svptrue_b32(), x); }
"""


def _no_fixed_tiles(lanes: int) -> str:
    raise ValueError("SVE vectors have no lane count fixed at generation time; the flash "
                     "templates' SVE forms use the predicated vocabulary (vla_prelude)")


PLATFORM = Platform(
    name="sve", requires=("sve",), compile_flags=(), include="#include <arm_sve.h>", vec="svfloat32_t",
    zero="svdup_n_f32(0.0f)",
    # LD1W/ST1W need only element alignment: aligned and unaligned spellings are the same
    load="svld1_f32(uol_pg, {0})", loadu="svld1_f32(uol_pg, {0})",
    store="svst1_f32(uol_pg, {0}, {1})", storeu="svst1_f32(uol_pg, {0}, {1})",
    bcast="svdup_n_f32({0})", fma="svmla_f32_m(uol_pg, {2}, {0}, {1})",
    add="svadd_f32_m(uol_pg, {0}, {1})", sub="svsub_f32_m(uol_pg, {0}, {1})",
    mul="svmul_f32_m(uol_pg, {0}, {1})", div="svdiv_f32_m(uol_pg, {0}, {1})",
    max="svmax_f32_m(uol_pg, {0}, {1})",
    prefetch="svprfw(uol_pg, {0}, SV_PLDL1KEEP)",
    pin="w",  # gcc's constraint for an FP/SIMD (Z) register
    # STNT1W: a non-temporal contiguous store (the predicate keeps the row's tail exact)
    stream="svstnt1_f32(uol_pg, {0}, {1})",
    # horizontal reductions over every lane: inactive lanes of a merged accumulator hold its
    # start value (-inf for a max, 0 for a sum)
    hmax="svmaxv_f32(svptrue_b32(), {0})", hsum="svaddv_f32(svptrue_b32(), {0})",
    tiles={},
    flash_prelude=_no_fixed_tiles,
    vector_math=lambda lanes: _VEXP,
    vla_step="(int64_t)svcntw()", vla_pred_type="svbool_t",
    vla_pred="svwhilelt_b32_s64({0}, {1})",
    vla_prelude=_VLA,
)
