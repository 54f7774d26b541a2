"""gcc's portable vector extension: any target gcc builds for, at the HFL's vector width.

No intrinsics: arithmetic on `vector_size` types, which gcc lowers to the target's SIMD. There
is no explicit vector exp here (the generic kernels auto-vectorise the scalar uol_expf).
"""

from __future__ import annotations

from uol_core.backends.c.platforms import Platform

_FLASH = """typedef float uol_v __attribute__((vector_size({bytes})));  /* {lanes} f32 lanes (vecext) */
static inline uol_v uol_vld(const float *p) {{ uol_v x; __builtin_memcpy(&x, p, sizeof x); return x; }}
static inline void uol_vst(float *p, uol_v x) {{ __builtin_memcpy(p, &x, sizeof x); }}
static inline uol_v uol_vset(float x) {{ return (uol_v){{0}} + x; }}
static inline uol_v uol_vadd(uol_v a, uol_v b) {{ return a + b; }}
static inline uol_v uol_vsub(uol_v a, uol_v b) {{ return a - b; }}
static inline uol_v uol_vmul(uol_v a, uol_v b) {{ return a * b; }}
static inline uol_v uol_vfma(uol_v a, uol_v b, uol_v c) {{ return a * b + c; }}
static inline uol_v uol_vlds(const float *p, int64_t stride)
{{
    uol_v x;
    for (int k = 0; k < {lanes}; ++k) x[k] = p[k * stride];
    return x;
}}
static inline uol_v uol_vexp(uol_v x)
{{
    for (int k = 0; k < {lanes}; ++k) x[k] = uol_expf(x[k]);
    return x;
}}"""


def _typedefs(lanes: int) -> str:
    # uol_vf: an aligned vector; uol_vfu: the same lanes at any float alignment (unaligned loads)
    return (f"typedef float uol_vf __attribute__((vector_size({lanes * 4})));\n"
            f"typedef float uol_vfu __attribute__((vector_size({lanes * 4}), aligned(4)));")


PLATFORM = Platform(
    name="vecext", requires=(), compile_flags=(), include="", vec="uol_vf", zero="(uol_vf){0}",
    load="(*(const uol_vf *)({0}))", loadu="(*(const uol_vfu *)({0}))",
    store="(*(uol_vf *)({0}) = ({1}))", storeu="(*(uol_vfu *)({0}) = ({1}))",
    bcast="((uol_vf){{0}} + ({0}))", fma="(({0}) * ({1}) + ({2}))",
    add="(({0}) + ({1}))", sub="(({0}) - ({1}))", mul="(({0}) * ({1}))", div="(({0}) / ({1}))",
    max="",  # C has no vector ?: ; the templates needing max use an ISA with vector math
    prefetch="__builtin_prefetch({0}, 0, 3)", pin="",
    # conv_im2col: 4 rows x 2 vectors, 8 micro-panels per pixel block; conv_direct: 4 filter
    # rows x 2 input vectors; conv_depthwise: 1 filter row x 6 vectors: within the 16-32
    # registers of any SIMD target.
    tiles={"conv_im2col": (4, 2, 8), "conv_direct": (4, 2), "conv_depthwise": (1, 6)},
    typedefs=_typedefs,
    flash_prelude=lambda lanes: _FLASH.format(bytes=lanes * 4, lanes=lanes),
)
