"""AVX-512 (F): 32 zmm registers of 16 f32 lanes, native horizontal reductions."""

from __future__ import annotations

from uol_core.backends.c.platforms import GemmCosts
from uol_core.backends.c.platforms.x86 import x86_platform

# Measured on a 2-core Sapphire Rapids class host (python benchmarks/gemm_tiles.py: tiles
# alternated with torch.matmul inside whole GEMMs; docs/benchmarks.md, "Register tiles"):
# - loads: alone, with packed A and B in L1/L2, every tile ran near the FMA peak; in the GEMM
#   at 1024^3 (kc=128) they ranked by loads per FMA cycle: 6x64 and 5x64 (0.83, 0.90 loads
#   per cycle) 0.86-0.89x torch, 4x64 (1.0) 0.85x, 8x48 (0.92) 0.82x, 12x32 (1.17) and 8x32
#   (1.25) 0.81x: one load per cycle is what the k loop sustains.
# - streamed B: 6x64 at kc=512 (B's micro-panel 128 KiB, beyond the 48 KiB L1, streamed from
#   L2 on every row strip) ran 0.975x and 0.985x kc=128 at 512^3 and 1024^3 (C in L2), where
#   the model's other terms rate it 2% faster (fewer tile updates): streaming runs at ~0.96x.
# - tile update beyond L2: at 2048^3 (C's share per thread 8 MiB) 6x64 ran 0.86x / 0.89x /
#   0.93x torch at kc=128 / 256 / 512 (0.88x / 0.91x at kc=256 / 512 in a second run); with
#   streaming at 0.96x, about 10 cycles per accumulator vector for each pass over C fit them.
GEMM = GemmCosts(loads_per_cycle=1.0, streamed_b_vectors=3, streamed_b_efficiency=0.96,
                 tile_update_cycles=2.0, tile_update_cycles_beyond_l2=10.0)

PLATFORM = x86_platform(
    "avx512", 512, requires=("avx512f",), compile_flags=("-mavx512f", "-mfma"), pin="v",
    round_template="_mm512_roundscale_ps({0}, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)",
    hmax="_mm512_reduce_max_ps({0})", hsum="_mm512_reduce_add_ps({0})",
    # conv_im2col: MR rows x NV vectors (14 x 2 = 28 accumulators of the 32 registers) and 4
    # micro-panels per pixel block; conv_direct: MR filter rows x NV input vectors;
    # conv_depthwise: 1 filter row x 12 vectors (12 accumulators + 12 pinned loads + 1 broadcast).
    # conv_direct_others: (MR, NV, percent of 8 x 3's throughput) triples, each taken where
    # the makespan model rates it faster than 8 x 3 by more than that (conv/tiles.py
    # `direct_tiles`). Measured on a 2-core Sapphire Rapids class Xeon (python
    # benchmarks/conv_tile.py --tiles 8x3,14x2,6x4: 1x1 and 3x3 layers alternated as 1-conv
    # graphs): a 7x7 plane's 49 pixels take 3 vectors of 16 in 8 x 3 tiles (2 tiles, 96 lanes),
    # 4 in 14 x 2 or 6 x 4 (64 lanes): both ran 0.65-0.80x 8 x 3's time on EfficientNet's 1x1
    # convolutions at 7x7 (modelled 0.67x); at 14x14 14 x 2 ran 0.92-0.97x (modelled
    # 0.93-0.96x), 6 x 4 1.01-1.08x (1.07-1.09x). Where the lanes fill alike, 3x3 at 56x56 and
    # 14x14: 14 x 2 1.07-1.11x (modelled 1.09x, 0.98x), 6 x 4 1.06-1.11x (1.04x, 1.07x).
    # Measured over modelled, the median: 14 x 2 0.95, 6 x 4 0.98.
    tiles={"conv_im2col": (14, 2, 4), "conv_direct": (8, 3), "conv_direct_others": (14, 2, 95, 6, 4, 98),
           "conv_depthwise": (1, 12)}, gemm=GEMM,
)
