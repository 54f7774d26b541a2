"""Explicit-SIMD math for the C templates: one vector exp and the few lane operations around it.

gcc auto-vectorises the scalar `uol_expf` of c_expr, but the clamps become compare-and-blend
sequences and every reduction keeps one accumulator; written with intrinsics the same
Cody-Waite + degree-5 polynomial (identical constants, rel. err ~1e-7) runs about twice as fast.
Only x86 ISAs have a table; other targets keep the auto-vectorised generic kernels.
"""

from __future__ import annotations

# Scalar helpers. uol_expf uses only + * and bit moves (Cody-Waite + Cephes, rel. err ~1e-7) so
# that loops calling it vectorise without libmvec; tanh/sigmoid/silu/gelu/erf build on it
# (uol_erff: rel. err < 3.2e-7 over [-9, 9], 8x faster than libm's erff in a vector loop).
SCALAR_MATH = r"""
static inline float uol_expf(float x)
{
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    const float n = __builtin_floorf(x * 1.44269504f + 0.5f);
    const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f; p = p * r + 8.3334519073e-3f; p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f; p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const union { int32_t i; float f; } scale = { .i = ((int32_t)n + 127) << 23 };
    return p * scale.f;
}
static inline float uol_erff(float x)
{
    const float a = fabsf(x), z = x * x;
    /* |x| < 0.5: the odd Taylor series of erf to x^13 (the next term is below 5e-10) */
    const float s = x * (1.12837917f + z * (-0.376126389f + z * (0.112837917f + z * (-0.0268661706f
                    + z * (0.00522397763f + z * (-0.000854832702f + z * 0.00012055333f))))));
    /* else 1 - erfc, erfc by the Chebyshev fit of Numerical Recipes (fractional error < 1.2e-7) */
    const float t = 1.0f / (1.0f + 0.5f * a);
    const float e = t * uol_expf(-z - 1.26551223f + t * (1.00002368f + t * (0.37409196f + t * (0.09678418f
                    + t * (-0.18628806f + t * (0.27886807f + t * (-1.13520398f + t * (1.48851587f
                    + t * (-0.82215223f + t * 0.17087277f)))))))));
    return a < 0.5f ? s : copysignf(1.0f - e, x);
}
static inline float uol_tanhf(float x)
{
    const float e = uol_expf(-2.0f * fabsf(x));
    return copysignf((1.0f - e) / (1.0f + e), x);
}
"""

# Per ISA: the vector type, its lane count source, and intrinsic templates ({0}, {1}: operands).
VMATH: dict[str, dict[str, str]] = {
    "avx512": {"vec": "__m512", "ivec": "__m512i", "p": "_mm512", "si": "si512",
               "round": "_mm512_roundscale_ps({0}, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)",
               "hmax": "_mm512_reduce_max_ps({0})", "hsum": "_mm512_reduce_add_ps({0})"},
    "avx2": {"vec": "__m256", "ivec": "__m256i", "p": "_mm256", "si": "si256",
             "round": "_mm256_round_ps({0}, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)",
             "hmax": "uol_hmax8({0})", "hsum": "uol_hsum8({0})"},
}

_AVX2_HORIZONTAL = r"""
static inline float uol_hmax8(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));
}
static inline float uol_hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}
"""


def has_vmath(isa: str) -> bool:
    """Whether explicit vector math exists for `isa`."""
    return isa in VMATH


def vmath_prelude(isa: str) -> str:
    """C helpers for `isa`: uol_vexp (vector exp) and, for AVX2, horizontal max and sum."""
    t = VMATH[isa]
    p, vec, ivec, si = t["p"], t["vec"], t["ivec"], t["si"]
    rounded = t["round"].format(f"{p}_mul_ps(x, {p}_set1_ps(1.44269504f))")
    helpers = _AVX2_HORIZONTAL if isa == "avx2" else ""
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
    return {p}_mul_ps(q, {p}_castsi{si[2:]}_ps(e));
}}
"""
