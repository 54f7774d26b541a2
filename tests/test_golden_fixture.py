"""The golden check itself: a missing or different file fails (it never writes one silently)."""

import pytest


def test_missing_and_different_golden_files_fail(golden, request):
    if request.config.getoption("--update-golden"):
        pytest.skip("--update-golden rewrites files instead of checking them")
    with pytest.raises(AssertionError, match="no golden file"):
        golden("c/no_such_kernel.c", "int x;\n")
    with pytest.raises(AssertionError, match="differs"):
        golden("c/matmul_avx2.c", "not the kernel\n")
