"""The CPU sanitizer: a planted out-of-bounds read is caught at its kernel and ODL line."""

import shutil

import pytest

from profilers.sanitizer import sanitize, sanitize_op
from uol_core.backends.base import KernelSource

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

KERNEL = """#include <stdint.h>
void shift(void **args, const int64_t *strides)
{
    const float *x = args[0];
    float *y = args[1];
    for (int64_t i = 0; i < 16; ++i)
        y[i] = x[i + BOUND];
}
"""


def kernel(bound: int) -> KernelSource:
    text = KERNEL.replace("BOUND", str(bound))
    return KernelSource(text, "c", "shift", "shift", {}, {7: 2}, {"args": ["X", "Y"]})


def test_missing_bound_check_is_found_at_its_line():
    report = sanitize(kernel(1), {"X": (16,), "Y": (16,)})
    assert not report.clean
    finding = report.findings[0]
    assert finding.kind == "heap-buffer-overflow" and "read of 4 bytes" in finding.message
    assert finding.kernel_line == 7 and finding.odl_line == 2
    assert "x[i + 1]" in finding.kernel_text


def test_correct_kernel_is_clean():
    assert sanitize(kernel(0), {"X": (16,), "Y": (16,)}).clean


def test_generated_matmul_with_edge_tiles_is_clean():
    report = sanitize_op("matmul", {"M": 13, "N": 29, "K": 7})
    assert report.clean, report.to_dict()


def host_has(flag: str) -> bool:
    try:
        return f" {flag}" in open("/proc/cpuinfo").read()
    except OSError:
        return False


@pytest.mark.parametrize("name, sizes", [
    ("softmax", {"R": 5, "C": 70}),  # the row template: AVX-512 intrinsics on AVX-512 hosts
    ("attention", {"S": 19, "D": 16, "T": 23, "E": 8}),  # flash tiles over the host's vectors
    ("linear_bias_gelu", {"M": 13, "N": 29, "K": 7}),  # GEMM micro-kernel stores
])
def test_templates_with_host_intrinsics_build_and_run_clean(name, sizes):
    """The sanitizer build takes the normal build's machine flags: before, it failed on AVX-512
    hosts with "target specific option mismatch" on _mm512_* and _mm256_store_ps."""
    report = sanitize_op(name, sizes)
    assert report.clean, report.to_dict()


VECTOR_KERNEL = """#include <stdint.h>
#include <immintrin.h>
void vshift(void **args, const int64_t *strides)
{
    const float *x = args[0];
    float *y = args[1];
    for (int64_t i = 0; i < 16; i += 8)
        _mm256_storeu_ps(y + i, _mm256_loadu_ps(x + i + BOUND));
}
"""


@pytest.mark.skipif(not host_has("avx2"), reason="the host has no AVX2 to run the kernel")
def test_an_out_of_bounds_vector_load_is_found_at_its_line():
    text = VECTOR_KERNEL.replace("BOUND", "8")  # the second load lies wholly past the end
    src = KernelSource(text, "c", "vshift", "vshift", {"isa": "avx2"}, {8: 2},
                       {"args": ["X", "Y"]})
    report = sanitize(src, {"X": (16,), "Y": (16,)})
    assert not report.clean
    finding = report.findings[0]
    assert finding.kind == "heap-buffer-overflow" and "read of 32 bytes" in finding.message
    assert finding.kernel_line == 8 and finding.odl_line == 2
