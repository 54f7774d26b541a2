"""The host microbenchmarks as one generated C program (gcc, OpenMP), and how to run it."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from uol_core.hfl.schema import HflError

CFLAGS = ["-O3", "-march=native", "-fopenmp", "-ffp-contract=fast"]

# One program, several modes, so the probe pays for one compile. Every mode calibrates its own
# repetition count to run about TARGET seconds, then prints the best of REPS timings.
# Modes:  clock | lat32 | fma32 T | fma64 T | triad T NBYTES | read NBYTES | cpuid
#   clock: dependent register-register integer adds (1 cycle each) -> prints adds and CPU seconds
#   lat32: one dependent fp32 FMA chain -> prints FMAs and seconds
#   fmaXX: T threads, NCHAIN independent vector FMA chains each -> prints vector FMAs and seconds
#   triad: STREAM triad a = b + s*c over three double arrays of NBYTES each, T threads
#   read : one thread sums a buffer of NBYTES with 8 vector accumulators -> bytes and seconds
#   forkjoin T: empty OpenMP parallel regions of T threads -> regions and wall seconds
#   cpuid: base and maximum MHz from cpuid leaf 0x16 (0 0 where not reported)
SOURCE = r"""
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef float vf32 __attribute__((vector_size(VBYTES)));
typedef double vf64 __attribute__((vector_size(VBYTES)));
static volatile double sink;

/* Thread CPU time, not wall time, for the core-local kernels (clock, latency, FMA): on a shared
   machine other processes steal cores, and a thread's CPU time counts only the cycles it ran. */
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static volatile float seedf = 0.999999f, stepf = 1e-6f;
static volatile double seedd = 0.999999, stepd = 1e-6;

/* The addend comes from memory the compiler cannot see, so every add is register + register:
   recent x86 cores fold chains of add-immediate at rename, several per cycle, which made a
   constant addend time a fraction of a cycle per add. The empty asm keeps the 16 adds apart. */
static volatile long addend = 1;
static double t_clock(long n, int threads, long bytes) {
    (void)threads; (void)bytes;
    long x = seedf > 0, y = addend;
    double t0 = cpu_now();
    for (long i = 0; i < n; i++) {
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++) { x += y; __asm__ volatile("" : "+r"(x)); }
    }
    double t = cpu_now() - t0;
    sink = (double)x;
    return t;
}

/* x = x * a + b contracts to one FMA (-ffp-contract=fast; mul + add without FMA hardware);
   a, b and the seed are volatile loads and x ends in `sink`, so nothing can be folded. */
static double t_lat32(long n, int threads, long bytes) {
    (void)threads; (void)bytes;
    float x = seedf, a = seedf, b = stepf;
    double t0 = cpu_now();
    for (long i = 0; i < n; i++) {
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++) x = x * a + b;
    }
    double t = cpu_now() - t0;
    sink = x;
    return t;
}

/* Each thread times itself in CPU time; the sum of per-thread rates is the peak the cores
   sustain. Returned as the equivalent seconds for threads * n * NCHAIN vector FMAs. */
#define FMA_KERNEL(NAME, VT, ST, SEED, STEP)                                      \
static double NAME(long n, int threads, long bytes) {                             \
    (void)bytes;                                                                  \
    double rate = 0;                                                              \
    _Pragma("omp parallel num_threads(threads) reduction(+:rate)")                \
    {                                                                             \
        VT acc[NCHAIN];                                                           \
        VT a = (VT){0} + (ST)SEED, b = (VT){0} + (ST)STEP;                        \
        for (int j = 0; j < NCHAIN; j++) acc[j] = (VT){0} + (ST)(j + 1) * (ST)STEP; \
        double t0 = cpu_now();                                                    \
        for (long i = 0; i < n; i++) {                                            \
            _Pragma("GCC unroll 64")                                              \
            for (int j = 0; j < NCHAIN; j++) acc[j] = acc[j] * a + b;             \
        }                                                                         \
        double dt = cpu_now() - t0;                                               \
        rate += (double)n * NCHAIN / (dt > 1e-9 ? dt : 1e-9);                     \
        VT s = acc[0];                                                            \
        for (int j = 1; j < NCHAIN; j++) s += acc[j];                             \
        _Pragma("omp atomic")                                                     \
        sink += (double)s[0];                                                     \
    }                                                                             \
    return (double)threads * n * NCHAIN / rate;                                   \
}
FMA_KERNEL(t_fma32, vf32, float, seedf, stepf)
FMA_KERNEL(t_fma64, vf64, double, seedd, stepd)

static double *ta, *tb, *tc;
static double t_triad(long n, int threads, long bytes) {
    long len = bytes / (long)sizeof(double);
    double s = stepd, t0 = omp_get_wtime();
    for (long r = 0; r < n; r++) {
#pragma omp parallel for simd num_threads(threads) schedule(static)
        for (long i = 0; i < len; i++) ta[i] = tb[i] + s * tc[i];
    }
    double t = omp_get_wtime() - t0;
    sink = ta[len / 2];
    return t;
}

static vf32 *rbuf;
static double t_read(long n, int threads, long bytes) {
    (void)threads;
    long len = bytes / VBYTES;
    vf32 z = {0}, s0 = z, s1 = z, s2 = z, s3 = z, s4 = z, s5 = z, s6 = z, s7 = z;
    double t0 = cpu_now();  /* one thread, core-local for cache levels: CPU time (see cpu_now) */
    for (long r = 0; r < n; r++) {
        for (long i = 0; i < len; i += 8) {
            s0 += rbuf[i]; s1 += rbuf[i + 1]; s2 += rbuf[i + 2]; s3 += rbuf[i + 3];
            s4 += rbuf[i + 4]; s5 += rbuf[i + 5]; s6 += rbuf[i + 6]; s7 += rbuf[i + 7];
        }
        __asm__ volatile("" : : : "memory");  /* keep every sweep */
    }
    double t = cpu_now() - t0;
    vf32 s = s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7;
    sink = s[0];
    return t;
}

/* Empty parallel regions of T threads back to back: one fork and join each, with the pool warm
   (libgomp's threads spin between regions, as they do between a graph's kernels). Wall time:
   the cost is the threads waking and meeting, not work on a core. */
static double t_forkjoin(long n, int threads, long bytes) {
    (void)bytes;
    double t0 = omp_get_wtime();
    for (long r = 0; r < n; r++) {
#pragma omp parallel num_threads(threads)
        { __asm__ volatile("" : : : "memory"); }
    }
    return omp_get_wtime() - t0;
}

/* cpuid leaf 0x16: base and maximum MHz as the CPU reports them (0 0 where it does not:
   non-x86, older CPUs, most hypervisors). */
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
static void print_cpuid_mhz(void) {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_max(0, 0) >= 0x16) __cpuid(0x16, a, b, c, d);
    printf("%u %u\n", a & 0xffff, b & 0xffff);
}
#else
static void print_cpuid_mhz(void) { printf("0 0\n"); }
#endif

typedef double (*kernel_t)(long, int, long);

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "cpuid")) { print_cpuid_mhz(); return 0; }
    if (argc < 4) { fprintf(stderr, "usage: probe MODE TARGET_S REPS [THREADS] [BYTES]\n"); return 2; }
    const char *mode = argv[1];
    double target = atof(argv[2]);
    int reps = atoi(argv[3]);
    int threads = argc > 4 ? atoi(argv[4]) : 1;
    long bytes = argc > 5 ? atol(argv[5]) : 0;
    kernel_t k = 0;
    double per_n = 0;  /* work units per repetition, printed for Python */
    if (!strcmp(mode, "clock")) { k = t_clock; per_n = 16; }
    else if (!strcmp(mode, "lat32")) { k = t_lat32; per_n = 16; }
    else if (!strcmp(mode, "fma32")) { k = t_fma32; per_n = (double)threads * NCHAIN; }
    else if (!strcmp(mode, "fma64")) { k = t_fma64; per_n = (double)threads * NCHAIN; }
    else if (!strcmp(mode, "forkjoin")) { k = t_forkjoin; per_n = 1; }
    else if (!strcmp(mode, "triad")) {
        k = t_triad; per_n = 3.0 * (double)bytes;
        ta = aligned_alloc(4096, bytes); tb = aligned_alloc(4096, bytes); tc = aligned_alloc(4096, bytes);
        if (!ta || !tb || !tc) { fprintf(stderr, "out of memory\n"); return 3; }
        long len = bytes / (long)sizeof(double);
        /* first touch by the threads that will use the pages (NUMA placement) */
#pragma omp parallel for num_threads(threads) schedule(static)
        for (long i = 0; i < len; i++) { ta[i] = 0; tb[i] = 1; tc[i] = 2; }
    } else if (!strcmp(mode, "read")) {
        k = t_read; per_n = (double)bytes;
        rbuf = aligned_alloc(4096, bytes);
        if (!rbuf) { fprintf(stderr, "out of memory\n"); return 3; }
        memset(rbuf, 0, bytes);
    } else { fprintf(stderr, "unknown mode %s\n", mode); return 2; }
    long n = 1;
    double t = k(n, threads, bytes);  /* warm-up: page faults, thread pool, clock ramp */
    /* grow n until one run takes half the target; small runs are dominated by thread wake-up
       (milliseconds when another process holds a core), so never trust one extrapolation */
    for (int i = 0; i < 40 && (t = k(n, threads, bytes)) < target / 2; i++) {
        double grow = target / (t > 1e-9 ? t : 1e-9);
        n = (long)(n * (grow < 2 ? 2 : grow > 64 ? 64 : grow)) + 1;
    }
    /* utilisation = process CPU time / (threads x wall time) of the best run: below 1 when other
       processes held our cores, which only the wall-timed triad cannot correct for */
    double best = 1e30, util = 1;
    for (int r = 0; r < reps; r++) {
        struct timespec c0, c1;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
        double w0 = omp_get_wtime();
        t = k(n, threads, bytes);
        double wall = omp_get_wtime() - w0;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
        double cpu = (double)(c1.tv_sec - c0.tv_sec) + 1e-9 * (double)(c1.tv_nsec - c0.tv_nsec);
        if (t < best) { best = t; util = cpu / (threads * (wall > 1e-9 ? wall : 1e-9)); }
    }
    printf("%.17g %.17g %d %.4f\n", per_n * (double)n, best, VBYTES, util > 1 ? 1.0 : util);
    return 0;
}
"""


PROBE_BUILD_TIMEOUT_S = 120.0  # the probe program is small: minutes mean a broken toolchain


def _compile(gcc: str, vector_bits: int, chains: int, src: Path, out: Path,
             extra: tuple[str, ...] = ()) -> list[str]:
    cmd = [gcc, *CFLAGS, f"-DVBYTES={vector_bits // 8}", f"-DNCHAIN={chains}", *extra,
           str(src), "-o", str(out)]
    # Bounded like every kernel build: its own process group, killed whole at the limit.
    from uol_core.runtime.build import BuildError, BuildLimits, run_bounded_compiler

    try:
        done = run_bounded_compiler(cmd[1:], "the host probe program",
                                    BuildLimits(timeout_s=PROBE_BUILD_TIMEOUT_S,
                                                memory_mb=BuildLimits.from_env().memory_mb),
                                    compiler=gcc)
    except BuildError as exc:
        raise HflError("host", "", str(exc)) from None
    if done.returncode != 0:
        raise HflError("host", "", f"probe compile failed ({' '.join(cmd)}):\n{done.stderr}")
    return cmd


def probe_assembly(vector_bits: int, chains: int, march: str = "native") -> str:
    """The probe program as gcc emits it (assembly text), to check that the kernels time what
    they claim: a register-add chain, a dependent FMA chain, independent vector FMA chains."""
    gcc = shutil.which(os.environ.get("CC", "gcc"))
    if gcc is None:
        raise HflError("host", "", "gcc not found (install gcc, or set CC)")
    with tempfile.TemporaryDirectory(prefix="uol-probe-asm-") as tmp:
        src, asm = Path(tmp) / "probe.c", Path(tmp) / "probe.s"
        src.write_text(SOURCE)
        _compile(gcc, vector_bits, chains, src, asm, ("-S", f"-march={march}"))
        return asm.read_text()


class ProbeProgram:
    """The compiled microbenchmark binary in a temporary directory."""

    def __init__(self, vector_bits: int, chains: int) -> None:
        gcc = shutil.which(os.environ.get("CC", "gcc"))
        if gcc is None:
            raise HflError("host", "", "gcc not found: the host probe compiles small C programs "
                                       "(install gcc with OpenMP, or set CC)")
        self.dir = tempfile.TemporaryDirectory(prefix="uol-probe-")
        src = Path(self.dir.name) / "probe.c"
        self.exe = Path(self.dir.name) / "probe"
        src.write_text(SOURCE)
        cmd = _compile(gcc, vector_bits, chains, src, self.exe)
        self.cmd = " ".join(Path(c).name if i == 0 else c for i, c in enumerate(cmd[:5]))

    def cpuid_mhz(self) -> tuple[int, int] | None:
        """(base, max) MHz from cpuid leaf 0x16, or None where the CPU reports none."""
        done = subprocess.run([str(self.exe), "cpuid"], capture_output=True, text=True,
                              timeout=10)
        try:
            base, top = (int(v) for v in done.stdout.split())
        except ValueError:
            return None
        return (base, top) if base or top else None

    def run(self, mode: str, target_s: float, reps: int, threads: int = 1,
            nbytes: int = 0) -> tuple[float, float, float]:
        """Run one mode; returns (work units, best seconds, CPU utilisation of that run)."""
        env = dict(os.environ, OMP_PROC_BIND="spread", OMP_PLACES="cores", OMP_DYNAMIC="false")
        args = [str(self.exe), mode, str(target_s), str(reps), str(threads), str(nbytes)]
        done = subprocess.run(args, capture_output=True, text=True, timeout=300, env=env)
        if done.returncode != 0:
            raise HflError("host", "", f"probe mode '{mode}' failed: {done.stderr.strip()}")
        work, seconds, _, util = done.stdout.split()
        return float(work), float(seconds), float(util)

    def close(self) -> None:
        """Remove the temporary directory."""
        self.dir.cleanup()
