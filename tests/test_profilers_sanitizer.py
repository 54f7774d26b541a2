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
