"""The GEMM micro-kernels keep their accumulators in registers on every x86 host kind.

gcc decides spills from the machine flags, not from the host that runs the test: compiling
to assembly with the flags of each host kind makes the check the same everywhere. Inlined into
the OpenMP body, the AVX2 6x16 tile spilled accumulators to the stack under an AMD host's
AVX-512 tuning (-march=native on a Zen 5 is znver3 plus AVX-512 for gcc 12): every FMA then
waited on a reload and a store, and the kernel ran at half of OpenBLAS's Haswell kernel.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from uol_core import compile as uol_compile
from uol_core.ops import load_op
from uol_core.runtime.build import BASE_FLAGS

# -march=native as gcc 12 resolves it on each kind of x86-64 host the project runs on
HOST_KINDS = {
    "avx2": ("-march=haswell",),
    "amd-avx512": ("-march=skylake-avx512", "-mtune=znver3"),
    "intel-avx512-amx": ("-march=sapphirerapids",),
}
# the HFL target each kind emits for: its ISA list, not the test host's, says which kernels exist
# (an AVX2-only host has no AVX-512 kernel to emit, yet the check is about gcc's registers)
HOST_TARGETS = {"avx2": "avx2-desktop", "amd-avx512": "epyc-genoa-9654",
                "intel-avx512-amx": "xeon-spr-8480"}
PACKED = "path=packed,ku=4,pf=0,par=ir,threads=2,kc=256,mc=288"
DIRECT = "path=direct,ku=4,pf=0,par=jr,threads=2,kc=256,mc=64"
CASES = [
    ("matmul", {"M": 512, "N": 512, "K": 512}, f"isa=avx2,mr=6,nr=16,{PACKED}"),
    ("matmul", {"M": 512, "N": 512, "K": 512}, f"isa=avx512,mr=6,nr=64,{PACKED}"),
    ("matmul", {"M": 64, "N": 1024, "K": 256}, f"isa=avx2,mr=6,nr=16,{DIRECT}"),
    ("matmul", {"M": 64, "N": 1024, "K": 256}, f"isa=avx512,mr=6,nr=64,{DIRECT}"),
    ("linear_bias_gelu", {"M": 256, "N": 256, "K": 256}, f"isa=avx2,mr=6,nr=16,{PACKED}"),
]
LABEL = re.compile(r"^([A-Za-z_][\w.]*):")


def fmas_by_function(asm: str) -> dict[str, list[str]]:
    """The FMA instructions of each function in gcc's assembly output."""
    found: dict[str, list[str]] = {}
    function = "?"
    for line in asm.splitlines():
        label = LABEL.match(line)
        if label:
            function = label.group(1)
        elif line.strip().startswith("vfmadd"):
            found.setdefault(function, []).append(line.strip())
    return found


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc to compile the kernels")
@pytest.mark.parametrize("host", HOST_KINDS)
@pytest.mark.parametrize(("op_name", "sizes", "config"), CASES,
                         ids=[f"{o}-{c.split(',')[0]}-{c.split(',')[3]}" for o, _, c in CASES])
def test_no_accumulator_of_a_micro_kernel_lives_on_the_stack(tmp_path, host, op_name, sizes,
                                                             config):
    if host == "avx2" and "isa=avx512" in config:
        pytest.skip("an AVX-512 kernel is never built for an AVX2 host")
    kernel = uol_compile(load_op(op_name), shapes=sizes, target=HOST_TARGETS[host],
                         config=config)
    source = tmp_path / "kernel.c"
    source.write_text(kernel.source)
    flags = [f for f in BASE_FLAGS if f not in ("-march=native", "-shared")]
    subprocess.run(["gcc", *flags, *HOST_KINDS[host], "-S", str(source), "-o",
                    str(tmp_path / "kernel.s")], check=True, capture_output=True)
    fmas = fmas_by_function((tmp_path / "kernel.s").read_text())
    micro = {name: lines for name, lines in fmas.items() if name.startswith("uol_micro")}
    assert micro, f"the micro-kernel was inlined: FMAs only in {sorted(fmas)}"
    on_stack = {name: [f for f in lines if "(%rsp)" in f or "(%rbp)" in f]
                for name, lines in micro.items()}
    assert not any(on_stack.values()), on_stack
