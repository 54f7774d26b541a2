"""AVX-512 (F): 32 zmm registers of 16 f32 lanes, native horizontal reductions."""

from __future__ import annotations

from uol_core.backends.c_platforms.x86 import x86_platform

PLATFORM = x86_platform(
    "avx512", 512, requires=("avx512f",), pin="v",
    round_template="_mm512_roundscale_ps({0}, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)",
    hmax="_mm512_reduce_max_ps({0})", hsum="_mm512_reduce_add_ps({0})",
    # conv_im2col: MR rows x NV vectors (14 x 2 = 28 accumulators of the 32 registers) and 4
    # micro-panels per pixel block; conv_direct: MR filter rows x NV input vectors.
    tiles={"conv_im2col": (14, 2, 4), "conv_direct": (8, 3)},
)
