"""What AVX2 and AVX-512 share: the same intrinsic names under a width prefix (_mm256, _mm512).

Each x86 platform file calls `x86_platform` with what differs: the width, the rounding and
horizontal-reduction spellings, the register constraint, and its tuned tiles.
"""

from __future__ import annotations

from collections.abc import Mapping

from uol_core.backends.c.platforms import GemmCosts, Platform

# The flash template's vector vocabulary as thin wrappers over the intrinsics.
_FLASH = """#include <immintrin.h>
typedef {m} uol_v;  /* {lanes} f32 lanes ({isa}) */
static inline uol_v uol_vld(const float *p) {{ return {mm}_loadu_ps(p); }}
static inline void uol_vst(float *p, uol_v x) {{ {mm}_storeu_ps(p, x); }}
static inline uol_v uol_vset(float x) {{ return {mm}_set1_ps(x); }}
static inline uol_v uol_vadd(uol_v a, uol_v b) {{ return {mm}_add_ps(a, b); }}
static inline uol_v uol_vsub(uol_v a, uol_v b) {{ return {mm}_sub_ps(a, b); }}
static inline uol_v uol_vmul(uol_v a, uol_v b) {{ return {mm}_mul_ps(a, b); }}
static inline uol_v uol_vfma(uol_v a, uol_v b, uol_v c) {{ return {mm}_fmadd_ps(a, b, c); }}
/* lane k = p[k * stride]: one gather where a transpose would take a scalar load per lane */
static inline uol_v uol_vlds(const float *p, int64_t stride) {{ return {gather}; }}"""

# The gather's operand order differs between the widths.
_GATHER = {256: "_mm256_i32gather_ps(p, _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), "
                "_mm256_set1_epi32((int)stride)), 4)",
           512: "_mm512_i32gather_ps(_mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, "
                "10, 11, 12, 13, 14, 15), _mm512_set1_epi32((int)stride)), p, 4)"}


def vexp(bits: int, round_template: str, helpers: str = "") -> str:
    """uol_vexp on one x86 vector: the constants and steps of the scalar uol_expf (text.vmath)."""
    p, vec, ivec = f"_mm{bits}", f"__m{bits}", f"__m{bits}i"
    rounded = round_template.format(f"{p}_mul_ps(x, {p}_set1_ps(1.44269504f))")
    return helpers + f"""
/* exp(x) on {vec} lanes: the constants and steps of uol_expf (n = round(x / ln 2), r = x - n ln 2
   in two parts, degree-5 polynomial, 2^n by an integer shift into the exponent field). */
static inline {vec} uol_vexp({vec} x)
{{
    x = {p}_min_ps({p}_max_ps(x, {p}_set1_ps(-87.0f)), {p}_set1_ps(88.0f));
    const {vec} n = {rounded};
    {vec} r = {p}_fnmadd_ps(n, {p}_set1_ps(0.693359375f), x);
    r = {p}_fnmadd_ps(n, {p}_set1_ps(-2.12194440e-4f), r);
    {vec} q = {p}_fmadd_ps({p}_set1_ps(1.9875691500e-4f), r, {p}_set1_ps(1.3981999507e-3f));
    q = {p}_fmadd_ps(q, r, {p}_set1_ps(8.3334519073e-3f));
    q = {p}_fmadd_ps(q, r, {p}_set1_ps(4.1665795894e-2f));
    q = {p}_fmadd_ps(q, r, {p}_set1_ps(1.6666665459e-1f));
    q = {p}_fmadd_ps(q, r, {p}_set1_ps(5.0000001201e-1f));
    q = {p}_fmadd_ps(q, {p}_mul_ps(r, r), {p}_add_ps(r, {p}_set1_ps(1.0f)));
    const {ivec} e = {p}_slli_epi32({p}_add_epi32({p}_cvtps_epi32(n), {p}_set1_epi32(127)), 23);
    return {p}_mul_ps(q, {p}_castsi{bits}_ps(e));
}}
"""


def x86_platform(name: str, bits: int, *, requires: tuple[str, ...], compile_flags: tuple[str, ...],
                 pin: str, round_template: str, hmax: str, hsum: str,
                 tiles: Mapping[str, tuple[int, ...]], helpers: str = "",
                 gemm: GemmCosts = GemmCosts()) -> Platform:
    """The platform of one x86 vector width."""
    p = f"_mm{bits}"
    return Platform(
        name=name, requires=requires, compile_flags=compile_flags,
        include="#include <immintrin.h>", vec=f"__m{bits}",
        zero=f"{p}_setzero_ps()", load=f"{p}_load_ps({{0}})", loadu=f"{p}_loadu_ps({{0}})",
        store=f"{p}_store_ps({{0}}, {{1}})", storeu=f"{p}_storeu_ps({{0}}, {{1}})",
        bcast=f"{p}_set1_ps({{0}})", fma=f"{p}_fmadd_ps({{0}}, {{1}}, {{2}})",
        add=f"{p}_add_ps({{0}}, {{1}})", sub=f"{p}_sub_ps({{0}}, {{1}})",
        mul=f"{p}_mul_ps({{0}}, {{1}})", div=f"{p}_div_ps({{0}}, {{1}})",
        max=f"{p}_max_ps({{0}}, {{1}})",
        prefetch="_mm_prefetch((const char *)({0}), _MM_HINT_T0)", pin=pin,
        stream=f"{p}_stream_ps({{0}}, {{1}})", fence="_mm_sfence();", hmax=hmax, hsum=hsum,
        tiles=dict(tiles), gemm=gemm,
        flash_prelude=lambda lanes: _FLASH.format(m=f"__m{bits}", mm=p, lanes=lanes, isa=name,
                                                    gather=_GATHER[bits]),
        vector_math=lambda lanes: vexp(bits, round_template, helpers))
