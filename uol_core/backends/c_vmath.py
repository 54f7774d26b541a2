"""Scalar math helpers every C kernel may call (exp, erf, tanh), written to vectorise.

gcc auto-vectorises the scalar `uol_expf`, but the clamps become compare-and-blend sequences
and every reduction keeps one accumulator; the platform files (c_platforms) spell the same
Cody-Waite + degree-5 polynomial (identical constants, rel. err ~1e-7) as a vector `uol_vexp`
with intrinsics, which runs about twice as fast.
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
