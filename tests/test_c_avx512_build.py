"""AVX-512 kernels of every template build with gcc (this CPU may not run them: the check is
the build), and a target without vector intrinsics still gets a kernel."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from uol_core.acg.fixtures import fixed_target
from uol_core.backends.c.route import emit_any
from uol_core.ops import load_op

WIDE = fixed_target("test-avx512", isa=("avx512f", "avx2", "fma"), vector_bits=512, registers=32)
PORTABLE = fixed_target("test-portable", isa=("neon",), vector_bits=128, registers=32)

CASES = {  # op, sizes, config, what the AVX-512 source must contain
    "softmax": ("softmax", {"R": 40, "C": 4096}, {"stream": 1}, "_mm512_stream_ps"),
    "log_softmax": ("log_softmax", {"R": 7, "C": 100}, {}, "uol_vexp"),
    "temperature": ("softmax_temperature", {"R": 7, "C": 37}, {}, "_mm512_div_ps"),
    "flash": ("attention_batched", {"B": 1, "NH": 2, "S": 70, "T": 45, "D": 24}, {}, "_mm512"),
    "causal": ("causal_attention", {"S": 37, "D": 8}, {}, "_mm512"),
    "conv_direct": ("conv2d_pad1", {"N": 1, "C": 3, "K": 5, "H": 9, "W": 40}, {}, "_mm512"),
}


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc")
@pytest.mark.parametrize("case", sorted(CASES))
def test_avx512_kernels_build(case, tmp_path):
    name, sizes, config, marker = CASES[case]
    src = emit_any(load_op(name), sizes, WIDE, {"threads": 2, **config})
    assert marker in src.text, src.text[:400]
    path = tmp_path / "k.c"
    path.write_text(src.text)
    done = subprocess.run(["gcc", "-O2", "-std=gnu11", "-mavx512f", "-mfma", "-fopenmp", "-c",
                           str(path), "-o", str(tmp_path / "k.o")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("case", sorted(CASES))
def test_portable_target_gets_a_kernel_without_intrinsics(case):
    name, sizes, _, _ = CASES[case]
    src = emit_any(load_op(name), sizes, PORTABLE, {"threads": 2})
    assert "_mm256" not in src.text and "_mm512" not in src.text
