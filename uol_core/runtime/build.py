"""Build C kernels with gcc into a content-addressed cache: hash(source + flags + compiler) -> .so."""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

from uol_core.backends.base import KernelSource

CC = os.environ.get("UOL_CC", "gcc")
# -march=native: the kernel runs where it is built; the ISA flag makes intrinsics explicit.
# -fno-math-errno -fno-trapping-math let gcc vectorise the epilogue (no errno, no FP traps);
# they do not change any computed value (unlike -ffast-math, which we never use).
BASE_FLAGS = ("-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-std=gnu11",
              "-fno-math-errno", "-fno-trapping-math")
ISA_FLAGS = {"avx512": ("-mavx512f", "-mfma"), "avx2": ("-mavx2", "-mfma"), "vecext": ()}


class BuildError(RuntimeError):
    """gcc rejected a generated kernel; the message quotes the generated line and its ODL line."""


def cache_dir() -> Path:
    """$UOL_CACHE_DIR or ~/.cache/uol-studio, created on demand."""
    root = Path(os.environ.get("UOL_CACHE_DIR") or Path.home() / ".cache" / "uol-studio")
    path = root / "kernels"
    path.mkdir(parents=True, exist_ok=True)
    return path


@lru_cache(maxsize=1)
def compiler_version() -> str:
    """First line of `gcc --version` (part of every cache key)."""
    try:
        out = subprocess.run([CC, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(f"C compiler '{CC}' not usable: {exc}") from None
    return out.stdout.splitlines()[0] if out.stdout else CC


def flags_for(src: KernelSource) -> tuple[str, ...]:
    """Compiler flags of a kernel: the base set plus its ISA's."""
    return BASE_FLAGS + ISA_FLAGS.get(src.config.get("isa", "vecext"), ())


def build(src: KernelSource) -> Path:
    """Compile (or find in the cache) the shared library of a C kernel; returns its path."""
    flags = flags_for(src)
    key = hashlib.sha256("\0".join([src.text, " ".join(flags), compiler_version()])
                         .encode()).hexdigest()[:24]
    out = cache_dir() / f"{src.op_name[:40]}-{key}.so"
    if out.exists():
        return out
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        c_file = Path(tmp) / "kernel.c"
        c_file.write_text(src.text)
        tmp_so = Path(tmp) / "kernel.so"
        proc = subprocess.run([CC, *flags, str(c_file), "-o", str(tmp_so), "-lm"],
                              capture_output=True, text=True, timeout=300)
        if proc.returncode < 0:  # the compiler itself died: say so, not "gcc failed:" + nothing
            raise BuildError(f"the C compiler '{CC}' crashed ({_signal(proc.returncode)}) on the "
                             f"generated {src.op_name} kernel. {proc.stderr[-1000:]}".strip())
        if proc.returncode != 0:
            raise BuildError(explain_compile_error(proc.stderr, src))
        os.replace(tmp_so, out)  # atomic: concurrent builders never see a half-written file
    (out.with_suffix(".c")).write_text(src.text)
    return out


def _signal(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def explain_compile_error(stderr: str, src: KernelSource) -> str:
    """gcc's first error with the generated line it points at and the ODL line behind it."""
    lines = src.text.splitlines()
    for match in re.finditer(r"kernel\.c:(\d+):(\d+): (error|fatal error): (.*)", stderr):
        number = int(match.group(1))
        text = lines[number - 1].strip() if 0 < number <= len(lines) else ""
        odl = src.odl_line(number)
        where = f" (implements ODL line {odl})" if odl else ""
        return (f"gcc error in generated {src.op_name} kernel line {number}{where}: "
                f"{match.group(4)}\n    {text}")
    return f"gcc failed on generated {src.op_name} kernel:\n{stderr[-2000:]}"
