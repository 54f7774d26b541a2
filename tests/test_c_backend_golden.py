"""Golden files of the emitted C: any change to the generated text shows up as a diff.

Update them with `pytest tests/test_c_backend_golden.py --update-golden` and review the diff.
"""


import pytest

from uol_core.acg.config import TileConfig
from uol_core.acg.fixtures import fixed_target
from uol_core.backends.c import emit
from uol_core.ops import load_op

CASES = {
    "matmul_avx2": ("matmul", {"M": 64, "N": 48, "K": 32},
                    TileConfig("avx2", 6, 16, 256, 96, 48, 4, 0, "jr", 2), "test-avx2"),
    "linear_bias_gelu_avx512": ("linear_bias_gelu", {"M": 100, "N": 64, "K": 77},
                                TileConfig("avx512", 14, 32, 256, 112, 64, 4, 8, "ir", 2),
                                "test-avx512"),
    # SiLU's epilogue as x * (1 / (1 + e)): one vector division (c_expr.FUNCS)
    "linear_bias_silu_avx2": ("linear_bias_silu", {"M": 64, "N": 48, "K": 32},
                              TileConfig("avx2", 6, 16, 256, 96, 48, 4, 0, "jr", 2), "test-avx2"),
    "bmm_vecext": ("bmm", {"B": 4, "M": 8, "N": 8, "K": 8},
                   TileConfig("vecext", 4, 8, 64, 24, 8, 1, 0, "batch", 2), "test-portable"),
    "matmul_nt_avx2": ("matmul_nt", {"M": 30, "N": 20, "K": 10},
                       TileConfig("avx2", 4, 24, 64, 48, 24, 1, 0, "jr", 1), "test-avx2"),
}
TARGETS = {
    "test-avx2": fixed_target(),
    "test-avx512": fixed_target("test-avx512", isa=("avx512f", "avx2", "fma"), vector_bits=512,
                                registers=32),
    "test-portable": fixed_target("test-portable", isa=("neon",), vector_bits=128, registers=32),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_emitted_c_matches_golden(case, golden):
    name, sizes, cfg, target = CASES[case]
    text = emit(load_op(name), cfg, TARGETS[target], sizes).text
    golden(f"c/{case}.c", text)
