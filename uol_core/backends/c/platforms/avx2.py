"""AVX2 + FMA: 16 ymm registers of 8 f32 lanes; horizontal max and sum by shuffles."""

from __future__ import annotations

from uol_core.backends.c.platforms.x86 import x86_platform

_HORIZONTAL = r"""
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

PLATFORM = x86_platform(
    "avx2", 256, requires=("avx2", "fma"), compile_flags=("-mavx2", "-mfma"), pin="x",
    round_template="_mm256_round_ps({0}, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)",
    hmax="uol_hmax8({0})", hsum="uol_hsum8({0})", helpers=_HORIZONTAL,
    # conv_im2col: 6 rows x 2 vectors (12 accumulators of 16 registers), 8 micro-panels per
    # pixel block;
    # conv_direct: 4 filter rows x 3 input vectors; conv_depthwise: 1 filter row x 6 vectors
    # (6 accumulators + 6 pinned loads + 1 broadcast of the 16 registers).
    tiles={"conv_im2col": (6, 2, 8), "conv_direct": (4, 3), "conv_depthwise": (1, 6)},
)
