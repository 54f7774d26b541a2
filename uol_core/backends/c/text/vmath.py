"""Scalar math helpers every C kernel may call (exp, erf, tanh), written to vectorise.

gcc auto-vectorises the scalar `uol_expf`, but the clamps become compare-and-blend sequences
and every reduction keeps one accumulator; the platform files (c/platforms) spell the same
Cody-Waite + degree-5 polynomial (identical constants, rel. err ~1e-7) as a vector `uol_vexp`
with intrinsics, which runs about twice as fast.
"""

from __future__ import annotations

# Scalar helpers. uol_expf uses only + * and bit moves (Cody-Waite + Cephes, rel. err ~1e-7) so
# that loops calling it vectorise without libmvec; tanh/sigmoid/silu build on it. gelu and erf
# use uol_erff, a rational fit (rel. err < 3.7e-7 over [-9, 9]): a GELU loop over it runs 3.4x
# faster than over the erfc-by-exp form before it, which ran 8x faster than libm's erff.
# uol_recipf takes 1 / (1 + e) for SiLU, GELU-tanh (c/text/expr.py) and uol_tanhf without a
# division: SiLU and GELU-tanh kernels 1.13x and 1.20x the division form on an AVX2 Zen 3
# (benchmarks/activation_recip.py; tanh follows them, not timed on its own).
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
    /* x P(x^2) / Q(x^2) on [-3.92, 3.92] (benchmarks/erf_fit.py); past that float32 erf
       is 1. No exp and no branch: a GELU loop is one vector stream */
    x = x < -3.92f ? -3.92f : (x > 3.92f ? 3.92f : x);
    const float t = x * x;
    const float p = 1.1283791e+00f + t * (1.999292e-01f + t * (5.0573952e-02f + t * (3.7018019e-03f
                    + t * (1.4185444e-04f + t * (-1.9578347e-06f + t * 1.9923847e-08f)))));
    const float q = 1.0f + t * (5.105143e-01f + t * (1.15000345e-01f + t * (1.4353602e-02f
                    + t * 9.5608353e-04f)));
    const float r = x * p / q;  /* within 4e-7 of erf: keep |erf| <= 1 at the clamp */
    return r > 1.0f ? 1.0f : (r < -1.0f ? -1.0f : r);
}
static inline float uol_recipf(float y)
{
    /* 1 / y for y >= 1 (a sigmoid's 1 + exp(-x)) within 1.2 ulp, with no division: a
       bit-trick first guess, then three Newton steps (each squares the relative error). The
       guess needs y <= 2^125: past it 1 / y is under 2.4e-38, and a sigmoid there is 0 */
    y = y > 4.2535296e37f ? 4.2535296e37f : y;  /* a NaN stays NaN */
    union { float f; int32_t i; } guess = { .f = y };
    guess.i = 0x7EF311C3 - guess.i;
    float r = guess.f;
    r = r + r * (1.0f - y * r);
    r = r + r * (1.0f - y * r);
    return r + r * (1.0f - y * r);
}
static inline float uol_tanhf(float x)
{
    const float e = uol_expf(-2.0f * fabsf(x));
    return copysignf((1.0f - e) * uol_recipf(1.0f + e), x);
}
"""
