"""AArch64 Advanced SIMD (NEON): 32 V registers of 4 f32 lanes, <arm_neon.h> intrinsics.

The vector length is fixed at 128 bits, also on cores whose SVE vectors are wider (Neoverse
V1): this file is their fixed-width explicit-SIMD path. NEON has no non-temporal vector store
intrinsic (STNP is reachable only from assembly), so rows kernels use ordinary stores here;
vmaxvq_f32 and vaddvq_f32 reduce a vector's lanes in one instruction.
"""

from __future__ import annotations

from uol_core.backends.c.platforms import Platform

LANES = 4  # float32x4_t: the lanes every spelling below assumes

# The flash template's vector vocabulary as thin wrappers over the intrinsics.
_FLASH = """#include <arm_neon.h>
typedef float32x4_t uol_v;  /* 4 f32 lanes (neon) */
static inline uol_v uol_vld(const float *p) { return vld1q_f32(p); }
static inline void uol_vst(float *p, uol_v x) { vst1q_f32(p, x); }
static inline uol_v uol_vset(float x) { return vdupq_n_f32(x); }
static inline uol_v uol_vadd(uol_v a, uol_v b) { return vaddq_f32(a, b); }
static inline uol_v uol_vsub(uol_v a, uol_v b) { return vsubq_f32(a, b); }
static inline uol_v uol_vmul(uol_v a, uol_v b) { return vmulq_f32(a, b); }
static inline uol_v uol_vfma(uol_v a, uol_v b, uol_v c) { return vfmaq_f32(c, a, b); }
static inline uol_v uol_vlds(const float *p, int64_t stride)
{
    const float x[4] = {p[0], p[stride], p[2 * stride], p[3 * stride]};
    return vld1q_f32(x);
}"""

# vfmaq_f32(acc, a, b) = acc + a * b and vfmsq_f32(acc, a, b) = acc - a * b (one rounding each,
# like x86's fmadd / fnmadd); vrndnq_f32 rounds to nearest, ties to even (FRINTN).
_VEXP = """
/* exp(x) on float32x4_t lanes: the constants and steps of uol_expf (n = round(x / ln 2),
   r = x - n ln 2 in two parts, degree-5 polynomial, 2^n by an integer shift into the exponent
   field). */
static inline float32x4_t uol_vexp(float32x4_t x)
{
    x = vminq_f32(vmaxq_f32(x, vdupq_n_f32(-87.0f)), vdupq_n_f32(88.0f));
    const float32x4_t n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(1.44269504f)));
    float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(0.693359375f));
    r = vfmsq_f32(r, n, vdupq_n_f32(-2.12194440e-4f));
    float32x4_t q = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), vdupq_n_f32(1.9875691500e-4f), r);
    q = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), q, r);
    q = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), q, r);
    q = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), q, r);
    q = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), q, r);
    q = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.0f)), q, vmulq_f32(r, r));
    const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    return vmulq_f32(q, vreinterpretq_f32_s32(e));
}
"""


def _fixed_width(lanes: int) -> None:
    """NEON vectors hold 4 f32 lanes whatever the core's SVE length: refuse any other count."""
    if lanes != LANES:
        raise ValueError(f"NEON vectors hold {LANES} f32 lanes, not {lanes}: the lane count "
                         "for the neon ISA comes from isa.toml's 128-bit neon entry")


def _flash_prelude(lanes: int) -> str:
    _fixed_width(lanes)
    return _FLASH


def _vector_math(lanes: int) -> str:
    _fixed_width(lanes)
    return _VEXP


PLATFORM = Platform(
    name="neon", requires=("neon",), compile_flags=(), include="#include <arm_neon.h>", vec="float32x4_t", zero="vdupq_n_f32(0.0f)",
    load="vld1q_f32({0})", loadu="vld1q_f32({0})",  # LD1 has no alignment requirement
    store="vst1q_f32({0}, {1})", storeu="vst1q_f32({0}, {1})",
    bcast="vdupq_n_f32({0})", fma="vfmaq_f32({2}, {0}, {1})",
    add="vaddq_f32({0}, {1})", sub="vsubq_f32({0}, {1})", mul="vmulq_f32({0}, {1})",
    div="vdivq_f32({0}, {1})", max="vmaxq_f32({0}, {1})",
    prefetch="__builtin_prefetch({0}, 0, 3)",  # PRFM PLDL1KEEP
    pin="w",  # gcc's constraint for an AdvSIMD/FP register
    hmax="vmaxvq_f32({0})", hsum="vaddvq_f32({0})",
    # conv_im2col: 6 rows x 4 vectors (24 accumulators + 4 loads + 1 broadcast of the 32
    # registers, 16 output pixels per row as the x86 tiles) and 8 micro-panels per pixel block;
    # conv_direct: 6 filter rows x 4 input vectors (29 registers). 24 independent FMA chains
    # cover 4 FMA pipes x latency 4 (Neoverse V1/V2, Cortex-X1), more than 2 x 4 (A78, A76).
    # conv_depthwise: 1 filter row x 12 vectors (25 registers), 12 independent chains.
    tiles={"conv_im2col": (6, 4, 8), "conv_direct": (6, 4), "conv_depthwise": (1, 12)},
    flash_prelude=_flash_prelude,
    vector_math=_vector_math,
)
