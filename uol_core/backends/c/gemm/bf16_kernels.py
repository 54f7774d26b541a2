"""C text of the bf16 GEMM template (c/gemm/bf16.py): B packing, A packing, block write-back,
one micro-kernel per unit and the OpenMP driver.

Packed B layout, per 32-column panel and 32-deep k step: two 16-column halves of 16 rows (k
pairs) x 32 bf16 (each column's two k values side by side): one AMX B tile per half, contiguous
(1 KiB, row stride 64 bytes), and the same bytes two zmm loads per k pair for VDPBF16PS.
Every micro-kernel writes a whole BM x BN block over the whole (padded) k.

A reaches a micro-kernel as rows LDA elements apart: A itself where the template reads it in
place, else a zero-padded copy in the micro-kernel's layout (A_LAYOUT): 1 rows (the copy keeps
A's row order, its rows LDA_P elements apart), 2 AMX tiles (per k step, 32 rows x 32 k), 3 f32
(per k, the BM rows' values widened side by side). A_TAIL: A is read in place but its row
count is not a multiple of BM; the last block row comes from a zero-padded copy of its rows.
"""

from __future__ import annotations

from dataclasses import dataclass

from uol_core.hfl.matrix import matrix_units


@dataclass(frozen=True)
class MicroKernel:
    """One micro-kernel: its block, the target pragma its intrinsics need, per-thread set-up."""

    name: str
    block_m: int
    block_n: int
    describe: str
    pragma: str
    text: str
    thread_setup: str = ""
    thread_teardown: str = ""
    process_setup: str = ""
    a_in_place: bool = False  # may read A's rows where they are (they take a row stride)
    a_layout: int = 1  # the layout of packed A: 1 rows, 2 AMX tiles, 3 widened to f32
    a_tail: bool = False  # in place, the last block row may come from a padded copy

    def __post_init__(self) -> None:
        # the tail copy is packed in the kernel's own layout and read as rows LDA_P apart
        if self.a_tail and not (self.a_in_place and self.a_layout == 1):
            raise ValueError(f"{self.name}: a padded tail needs A read in place, packed as rows")

    @property
    def a_f32(self) -> bool:
        return self.a_layout == 3


PACKING = r"""
static inline uint16_t to_bf16(float f)
{
    /* round to nearest even, as torch's float -> bfloat16 */
    uint32_t bits; memcpy(&bits, &f, 4);
    return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

/* B (K x N, any strides) -> Bp, panels j0 <= j < j1: per panel j and k step s, halves h of 16
   rows (k pairs) x 16 columns x 2 (k, k+1); zero beyond K and N so that padded blocks add
   nothing. */
static void pack_b(const uint16_t *restrict B, uint16_t *restrict Bp, int64_t j0, int64_t j1)
{
    #pragma omp for collapse(2) schedule(static)
    for (int64_t j = j0; j < j1; ++j)
        for (int64_t s = 0; s < KS; ++s) {
            uint16_t *restrict tile = Bp + (j * KS + s) * 1024;
            const int64_t n0 = j * 32, k0 = s * 32;
#ifdef __AVX512BW__
            if (SBN == 1 && n0 + 32 <= NDIM && k0 + 32 <= KDIM) {
                /* rows k and k+1 interleaved column by column: one permute per half */
                const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10,
                    41, 9, 40, 8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
                const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
                for (int64_t r = 0; r < 16; ++r) {
                    const __m512i even = _mm512_loadu_si512(B + (k0 + 2 * r) * SBK + n0);
                    const __m512i odd = _mm512_loadu_si512(B + (k0 + 2 * r + 1) * SBK + n0);
                    _mm512_storeu_si512(tile + r * 32, _mm512_permutex2var_epi16(even, lo, odd));
                    _mm512_storeu_si512(tile + 512 + r * 32, _mm512_permutex2var_epi16(even, hi, odd));
                }
                continue;
            }
#endif
            if (SBK == 1 && KDIM % 2 == 0) {
                /* k contiguous (B given as N x K): each column's k pair is one 32-bit copy */
                for (int64_t c = 0; c < 32; ++c)
                    for (int64_t r = 0; r < 16; ++r) {
                        const int64_t n = n0 + c, k = k0 + 2 * r;
                        uint32_t pair = 0;
                        if (n < NDIM && k < KDIM) memcpy(&pair, B + n * SBN + k, 4);
                        memcpy(tile + (c / 16) * 512 + r * 32 + (c % 16) * 2, &pair, 4);
                    }
                continue;
            }
            for (int64_t r = 0; r < 16; ++r)
                for (int64_t c = 0; c < 32; ++c)
                    for (int64_t t = 0; t < 2; ++t) {
                        const int64_t n = n0 + c, k = k0 + 2 * r + t;
                        tile[(c / 16) * 512 + r * 32 + (c % 16) * 2 + t] =
                            n < NDIM && k < KDIM ? B[k * SBK + n * SBN] : 0;
                    }
        }
}

/* A (M x K, any strides) -> Ap, zero padded, block rows ib >= ib0 (BM rows each) from Ap:
   A_LAYOUT 1: rows LDA_P elements apart, in A's order (one memcpy per row and k step);
   A_LAYOUT 2: per block row BM * KP elements, per k step 32 rows x 32 k (two AMX A tiles of 16
   rows, row stride 64 bytes);
   A_LAYOUT 3: per block row BM * KP f32, per k the BM rows' values widened side by side. */
static void pack_a(const uint16_t *restrict A, uint16_t *restrict Ap, int64_t ib0)
{
    #pragma omp for collapse(2) schedule(static)
    for (int64_t ib = ib0; ib < MP / BM; ++ib)
        for (int64_t s = 0; s < KS; ++s) {
            const int64_t block = (ib - ib0) * BM;
            for (int64_t i = 0; i < BM; ++i) {
                const int64_t row = ib * BM + i, k0 = s * 32;
                uint16_t line[32];
                if (SAK == 1 && row < MDIM && k0 + 32 <= KDIM) {
                    memcpy(line, A + row * SAM + k0, 64);
                } else {
                    for (int64_t k = 0; k < 32; ++k)
                        line[k] = row < MDIM && k0 + k < KDIM ? A[row * SAM + (k0 + k) * SAK] : 0;
                }
                if (A_LAYOUT == 1) {
                    memcpy(Ap + (block + i) * LDA_P + k0, line, 64);
                } else if (A_LAYOUT == 2) {
                    memcpy(Ap + block * KP + s * 32 * BM + i * 32, line, 64);
                } else {
                    float *restrict dst = (float *)Ap + block * KP + s * 32 * BM;
                    for (int64_t k = 0; k < 32; ++k) {
                        const uint32_t bits = (uint32_t)line[k] << 16;
                        memcpy(dst + k * BM + i, &bits, 4);
                    }
                }
            }
        }
}

/* A finished block from the thread's buffer into C: edges clipped, bf16 rounded if asked
   (trip counts computed first, so that gcc vectorises the rounding). */
static void write_block(const float *restrict buf, void *restrict C, int64_t row0, int64_t col0)
{
    const int64_t ni = MDIM - row0 < BM ? MDIM - row0 : BM;
    const int64_t nj = NDIM - col0 < BN ? NDIM - col0 : BN;
    for (int64_t i = 0; i < ni; ++i) {
        const float *restrict src = buf + i * BN;
        const int64_t at = (row0 + i) * SCM + col0 * SCN;
        if (C_F32) {
            float *restrict dst = (float *)C + at;
            #pragma omp simd
            for (int64_t j = 0; j < nj; ++j) dst[j * SCN] = src[j];
        } else {
            uint16_t *restrict dst = (uint16_t *)C + at;
            #pragma omp simd
            for (int64_t j = 0; j < nj; ++j) dst[j * SCN] = to_bf16(src[j]);
        }
    }
}
"""


def packing_text() -> str:
    """Packing and write-back helpers (shared by every micro-kernel)."""
    return PACKING


def _amx_kernel() -> MicroKernel:
    """AMX tiles, geometry and the OS permission request from isa.toml [[matrix_isa]] amx_bf16."""

    unit = next(u for u in matrix_units("bf16") if u.flag == "amx_bf16")
    rows, colsb = unit.fact("tile_rows"), unit.fact("tile_colsb")
    perm = unit.fact("os_permission")
    text = f"""
#include <unistd.h>
#include <sys/syscall.h>
/* Linux grants AMX tile state to a process that asks ({perm['source']}). */
static void amx_permission(void)
{{
    static int granted = 0;
    if (granted) return;
    if (syscall(SYS_arch_prctl, {perm['arch_prctl']:#x}, {perm['xfeature']}) != 0) {{
        fprintf(stderr, "uol: the kernel refused AMX tile data (arch_prctl ARCH_REQ_XCOMP_PERM); "
                        "Linux 5.16 or later is needed, or build with config bf16_isa=avx512bf16\\n");
        abort();
    }}
    granted = 1;
}}

/* Palette {unit.fact('palette')}: tiles 0-3 accumulate C (16 x 16 f32), 4-5 hold A (16 rows x 32 bf16),
   6-7 hold B (16 k pairs x 16 columns); each {rows} rows x {colsb} bytes. */
static void tile_config(void)
{{
    struct {{ uint8_t palette, start_row, reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; }} cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = {unit.fact('palette')};
    for (int t = 0; t < 8; ++t) {{ cfg.rows[t] = {rows}; cfg.colsb[t] = {colsb}; }}
    _tile_loadconfig(&cfg);
}}

static inline void block(const uint16_t *a, int64_t lda, const uint16_t *bp, float *c, int64_t ldc)
{{
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    /* Tiles are not renamed: a load into a tile waits for the products reading it. Each load
       sits right before its first use, so loads overlap the products already issued. */
    for (int64_t s = 0; s < KS; ++s) {{
        const uint16_t *a0 = A_DIRECT ? a + s * 32 : a + s * 1024;
        const uint16_t *a1 = A_DIRECT ? a + 16 * lda + s * 32 : a + s * 1024 + 512;
        const int64_t a_stride = A_DIRECT ? lda * 2 : 64;
        _tile_loadd(4, a0, a_stride);
        _tile_loadd(6, bp + s * 1024, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_loadd(7, bp + s * 1024 + 512, 64);
        _tile_dpbf16ps(1, 4, 7);
        _tile_loadd(5, a1, a_stride);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }}
    _tile_stored(0, c, ldc * 4); _tile_stored(1, c + 16, ldc * 4);
    _tile_stored(2, c + 16 * ldc, ldc * 4); _tile_stored(3, c + 16 * ldc + 16, ldc * 4);
}}
"""
    return MicroKernel("amx", 32, 32, "AMX TDPBF16PS, 32 x 32 block in 4 accumulator tiles",
                       '#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16,amx-tile,'
                       'amx-bf16")', text, "tile_config();", "_tile_release();",
                       "amx_permission();", a_in_place=True, a_layout=2)


AVX512BF16 = r"""
/* 12 rows x 32 columns: 24 zmm accumulators, 2 B vectors and 1 broadcast A pair of 32. A's
   rows lda elements apart: each row is read along k, 4 bytes per k pair. */
static inline void block(const uint16_t *a, int64_t lda, const uint16_t *bp, float *c, int64_t ldc)
{
    __m512 acc[BM][2];
    #pragma GCC unroll 12
    for (int i = 0; i < BM; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int64_t s = 0; s < KS; ++s) {
        const uint16_t *b = bp + s * 1024;
        /* the last step stops at K's last pair: the padding's pairs are zeros */
        const int pairs = s == KS - 1 ? KPAIRS - (KS - 1) * 16 : 16;
        for (int r = 0; r < pairs; ++r) {
            const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + r * 32);
            const __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + 512 + r * 32);
            #pragma GCC unroll 12
            for (int i = 0; i < BM; ++i) {
                int32_t pair;
                memcpy(&pair, a + i * lda + s * 32 + 2 * r, 4);
                const __m512bh av = (__m512bh)_mm512_set1_epi32(pair);
                acc[i][0] = _mm512_dpbf16_ps(acc[i][0], av, b0);
                acc[i][1] = _mm512_dpbf16_ps(acc[i][1], av, b1);
            }
        }
    }
    #pragma GCC unroll 12
    for (int i = 0; i < BM; ++i) {
        _mm512_storeu_ps(c + i * ldc, acc[i][0]);
        _mm512_storeu_ps(c + i * ldc + 16, acc[i][1]);
    }
}
"""

F32 = r"""
/* bf16 is the top half of an f32: A comes packed as f32 (one broadcast per row and k), B's k
   pairs (k in the low 16 bits, k+1 in the high) widen by a shift and a mask. 6 rows x 16
   columns in 12 vectors of 8 floats (GCC vector types: AVX2 or wider, plain code elsewhere). */
typedef float v8f __attribute__((vector_size(32)));
typedef uint32_t v8u __attribute__((vector_size(32)));

static inline void block(const uint16_t *a16, int64_t lda, const uint16_t *bp, float *c, int64_t ldc)
{
    (void)lda;
    const float *a = (const float *)a16;
    v8f acc[BM][2];
    for (int i = 0; i < BM; ++i) acc[i][0] = acc[i][1] = (v8f){0};
    for (int64_t s = 0; s < KS; ++s) {
        const uint16_t *b = bp + s * 1024;
        const int pairs = s == KS - 1 ? KPAIRS - (KS - 1) * 16 : 16;  /* as the VDPBF16PS kernel */
        for (int r = 0; r < pairs; ++r) {
            v8u p0, p1;
            memcpy(&p0, b + r * 32, 32);
            memcpy(&p1, b + r * 32 + 16, 32);
            const v8f even0 = (v8f)(p0 << 16), odd0 = (v8f)(p0 & 0xffff0000u);
            const v8f even1 = (v8f)(p1 << 16), odd1 = (v8f)(p1 & 0xffff0000u);
            const float *ak = a + (s * 32 + 2 * r) * BM;
            #pragma GCC unroll 6
            for (int i = 0; i < BM; ++i) {
                acc[i][0] += ak[i] * even0;
                acc[i][1] += ak[i] * even1;
                acc[i][0] += ak[BM + i] * odd0;
                acc[i][1] += ak[BM + i] * odd1;
            }
        }
    }
    for (int i = 0; i < BM; ++i) {
        memcpy(c + i * ldc, &acc[i][0], 32);
        memcpy(c + i * ldc + 8, &acc[i][1], 32);
    }
}
"""

KERNELS: dict[str, MicroKernel] = {}


def _register() -> None:
    KERNELS["amx"] = _amx_kernel()
    KERNELS["avx512bf16"] = MicroKernel(
        "avx512bf16", 12, 32, "VDPBF16PS, 12 x 32 block in 24 zmm accumulators",
        '#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16")', AVX512BF16,
        a_in_place=True, a_tail=True)
    KERNELS["f32"] = MicroKernel("f32", 6, 16, "bf16 widened to f32, 6 x 16 block of FMAs",
                                 "", F32, a_layout=3)


_register()

DRIVER = r"""
/* Packing buffers kept between calls of the calling thread (no page faults per call). */
static __thread uint16_t *keep_b, *keep_a, *keep_tail;

void ENTRY(void **args, const int64_t *strides)
{
    (void)strides;
    const uint16_t *A = (const uint16_t *)args[ARG_A], *B = (const uint16_t *)args[ARG_B];
    void *C = args[ARG_C];
    PROCESS_SETUP
    if (!keep_b) keep_b = aligned_alloc(64, (size_t)NP * KP * 2);
    if (!A_DIRECT && !keep_a) keep_a = aligned_alloc(64, (size_t)A_PACKED * 2);
    if (A_TAIL && !keep_tail) keep_tail = aligned_alloc(64, (size_t)BM * LDA_P * 2);
    uint16_t *Bp = keep_b, *Ap = keep_a, *At = keep_tail;
    #pragma omp parallel num_threads(THREADS)
    {
        THREAD_SETUP
        float buf[BM * BN] __attribute__((aligned(64)));
        for (int64_t bt = 0; bt < BATCH; ++bt) {
            int64_t oa, ob, oc;
            batch_offsets(bt, &oa, &ob, &oc);
            if (!A_DIRECT) pack_a(A + oa, Ap, 0);
            if (A_TAIL) pack_a(A + oa, At, MP / BM - 1);  /* the last, short block row */
            /* block rows LDA elements apart: A's own rows, or the packed copy's */
            const uint16_t *a0 = A_DIRECT ? A + oa : Ap;
            /* CHUNK panels of B stay in L2 while every block row of A passes over them; they
               are packed right before (still in cache), once when the batch shares B */
            for (int64_t jc = 0; jc < NP / 32; jc += CHUNK) {
                const int64_t panels = jc + CHUNK <= NP / 32 ? CHUNK : NP / 32 - jc;
                const int64_t blocks_n = panels * (32 / BN);
                if (!B_SHARED || bt == 0) pack_b(B + ob, Bp, jc, jc + panels);
                #pragma omp for collapse(2) schedule(static)
                for (int64_t ib = 0; ib < MP / BM; ++ib)
                    for (int64_t jb = 0; jb < blocks_n; ++jb) {
                        const int64_t row = ib * BM, col = jc * 32 + jb * BN;
                        const uint16_t *bp = Bp + (col / 32) * KS * 1024 + (col % 32) / 16 * 512;
                        const int tail = A_TAIL && row + BM > MDIM;
                        const uint16_t *a = tail ? At : a0 + row * LDA;
                        const int64_t lda = tail ? LDA_P : LDA;
                        if (C_F32 && SCN == 1 && row + BM <= MDIM && col + BN <= NDIM) {
                            block(a, lda, bp, (float *)C + oc + row * SCM + col, SCM);
                        } else {
                            block(a, lda, bp, buf, BN);
                            write_block(buf, (char *)C + oc * (C_F32 ? 4 : 2), row, col);
                        }
                    }
            }
        }
        THREAD_TEARDOWN
    }
}
"""


def driver_text(entry: str, kernel: MicroKernel, arg_index: dict[str, int]) -> str:
    """The entry point: packs, then splits block rows x columns over the OpenMP threads."""
    text = DRIVER.replace("ENTRY", entry)
    for key, value in (("ARG_A", arg_index["a"]), ("ARG_B", arg_index["b"]),
                       ("ARG_C", arg_index["c"])):
        text = text.replace(key, str(value))
    return (text.replace("PROCESS_SETUP", kernel.process_setup or "/* no process set-up */")
            .replace("THREAD_SETUP", kernel.thread_setup or "/* no thread set-up */")
            .replace("THREAD_TEARDOWN", kernel.thread_teardown or "/* no thread tear-down */"))
