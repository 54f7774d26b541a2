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
    # conv_direct: 6 filter rows x 2 input vectors, the GEMM's 6 x 16 (12 accumulators, 2
    # loads, 1 broadcast). It was 4 x 3: more input vectors per filter load, yet on Zen 3
    # (benchmarks/conv_tile.py, docs/benchmarks.md) 6 x 2 ran 1.0-1.2x as fast on the 1x1
    # convolutions of MobileNetV2 and EfficientNet-B0 read in place (7x7 to 56x56 planes), 1.46x
    # on a 3x3 512 -> 512 at 7x7 and 0.98x at 64 -> 64 56x56: each reduction step reads two
    # input vectors of a plane (one or two cache lines, not two or three), and a 49-pixel plane
    # fills 7 of 8 vector pairs' lanes in rows of 14, not 6 of 9 vectors in rows of 21.
    # conv_depthwise: 1 filter row x 6 vectors (6 accumulators + 6 pinned loads + 1 broadcast
    # of the 16 registers).
    tiles={"conv_im2col": (6, 2, 8), "conv_direct": (6, 2), "conv_depthwise": (1, 6)},
)
