"""Build C kernels with gcc into a content-addressed cache: hash(source + flags + compiler) -> .so.

Every compiler run goes through `run_compiler`, which bounds it (`BuildLimits`): gcc runs in a
session (process group) of its own under an address-space limit (RLIMIT_AS), and when it runs
past its time limit the whole group (driver, cc1, as, ld) is killed, so no compiler survives a
failed build. A limit that ends a build is a `BuildError` naming the kernel, its config and the
limit. Defaults come from the environment:

- `UOL_BUILD_TIMEOUT_S` (default 300): wall-clock seconds one compiler run may take;
- `UOL_BUILD_MEMORY_MB` (default 4096): address space of each compiler process, in MiB
  (0: no limit).

A kernel for a CPU of another architecture (its source carries `meta["cross"]`, see
runtime/cross.py) is built with the cross compiler and that CPU's HFL compiler flags, linked
with a harness into a program (`build_program`) that the emulator runs: it cannot be loaded
into this process, so `build` refuses it and says so.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from uol_core.backends.base import KernelSource
from uol_core.backends.c.platforms import PLATFORMS
from uol_core.runtime.cross import toolchain
from uol_core.runtime.usercache import private_dir

CC = os.environ.get("UOL_CC", "gcc")
# -march=native: the kernel runs where it is built; the ISA flag makes intrinsics explicit.
# -fno-math-errno -fno-trapping-math let gcc vectorise the epilogue (no errno, no FP traps);
# they do not change any computed value (unlike -ffast-math, which we never use).
BASE_FLAGS = ("-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-std=gnu11",
              "-fno-math-errno", "-fno-trapping-math")
# Each ISA's flags come from its platform file (a new ISA is one file there); cross builds add
# the target CPU's -mcpu from its HFL record instead.
ISA_FLAGS = {name: p.compile_flags for name, p in PLATFORMS.items()}
# The machine flags of the normal build; every other build of the same kernel (sanitizer, cycle
# counters) uses them too, or intrinsics the template chose for the host do not compile.
TARGET_FLAGS = ("-march=native",)
# A cross-built kernel: the same code generation flags, the target CPU's flags from the HFL
# instead of -march=native, a program instead of a shared object.
CROSS_BASE_FLAGS = ("-O3", "-fopenmp", "-std=gnu11", "-fno-math-errno", "-fno-trapping-math")
DEFAULT_TIMEOUT_S = 300.0
DEFAULT_MEMORY_MB = 4096
# The in-group `timeout` fires this long after the limit: normally this process stops the
# build first (and says so); the backstop acts only when it is gone.
BACKSTOP_GRACE_S = 5.0
# What gcc and its passes print when an allocation fails under RLIMIT_AS.
_OUT_OF_MEMORY = re.compile(r"memory exhausted|out of memory|cannot allocate memory|bad_alloc",
                            re.IGNORECASE)


class BuildError(RuntimeError):
    """gcc rejected a generated kernel; the message quotes the generated line and its ODL line."""


@dataclass(frozen=True)
class BuildLimits:
    """Bounds on one compiler run: wall-clock seconds and address space per process (MiB, 0 =
    unlimited). `from_env()` reads UOL_BUILD_TIMEOUT_S and UOL_BUILD_MEMORY_MB."""

    timeout_s: float = DEFAULT_TIMEOUT_S
    memory_mb: int = DEFAULT_MEMORY_MB

    @classmethod
    def from_env(cls) -> BuildLimits:
        """The limits the environment sets, defaults elsewhere; a malformed value is an error."""
        try:
            timeout = float(os.environ.get("UOL_BUILD_TIMEOUT_S") or DEFAULT_TIMEOUT_S)
            memory = int(os.environ.get("UOL_BUILD_MEMORY_MB") or DEFAULT_MEMORY_MB)
        except ValueError:
            raise BuildError("UOL_BUILD_TIMEOUT_S must be a number of seconds and "
                             "UOL_BUILD_MEMORY_MB a whole number of MiB") from None
        if timeout <= 0 or memory < 0:
            raise BuildError("UOL_BUILD_TIMEOUT_S must be > 0 and UOL_BUILD_MEMORY_MB >= 0")
        return cls(timeout, memory)


def describe_config(src: KernelSource) -> str:
    """The kernel's config as k=v,... (what `--config` accepts), or 'default config'."""
    return ",".join(f"{k}={v}" for k, v in src.config.items()) or "default config"


def run_compiler(args: Sequence[str], src: KernelSource, limits: BuildLimits | None = None,
                 what: str = "kernel") -> subprocess.CompletedProcess:
    """Run the compiler command `args` (without the compiler itself) on `src`'s files, bounded.

    The compiler starts through `sh -c 'ulimit -v ...; exec ...'` so the limit is set in the
    child without a Python preexec hook (which is unsafe in a threaded server), and in a new
    session, so a timeout kills the group: the driver and the cc1/as/ld it started. Inside the
    group, coreutils `timeout` (where installed) kills the group a few seconds after the limit
    even when the process that started the build is gone (a worker killed mid-build). Raises
    BuildError naming the kernel, its config and the limit when a limit ends the run.
    """
    label = f"the {src.op_name} {what} (config {describe_config(src)})"
    return run_bounded_compiler(args, label, limits)


def run_bounded_compiler(args: Sequence[str], label: str, limits: BuildLimits | None = None,
                         compiler: str = CC) -> subprocess.CompletedProcess:
    """`compiler args...` under `limits` (see run_compiler); `label` names what is built in
    the BuildError a limit raises."""
    limits = limits or BuildLimits.from_env()
    ulimit = f"ulimit -v {limits.memory_mb * 1024}; " if limits.memory_mb else ""
    backstop = shutil.which("timeout")
    guard = ([backstop, "-s", "KILL", f"{limits.timeout_s + BACKSTOP_GRACE_S:g}"]
             if backstop else [])
    argv = ["/bin/sh", "-c", ulimit + 'exec "$@"', "sh", *guard, compiler, *args]
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
    except OSError as exc:
        raise BuildError(f"cannot start the C compiler '{compiler}': {exc}") from None
    try:
        out, err = proc.communicate(timeout=limits.timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise BuildError(f"building {label} exceeded the build time limit of "
                         f"{limits.timeout_s:g} s (UOL_BUILD_TIMEOUT_S); the compiler was "
                         "stopped. Choose smaller tiles or unrolling, or raise the limit.") from None
    finally:
        if proc.returncode is None:  # interrupted (KeyboardInterrupt): nothing may outlive it
            _kill_group(proc)
    if proc.returncode == 127 and "not found" in err:
        raise BuildError(f"the C compiler '{compiler}' was not found (install gcc, or set UOL_CC)")
    if proc.returncode != 0 and limits.memory_mb:
        budget = (f"memory limit of {limits.memory_mb} MiB per compiler process "
                  "(UOL_BUILD_MEMORY_MB)")
        if _OUT_OF_MEMORY.search(err):
            raise BuildError(f"building {label} ran out of its {budget}; choose smaller tiles "
                             "or unrolling, or raise the limit.")
        if "signal terminated program" in err:
            raise BuildError(f"the compiler died of a signal building {label} under its "
                             f"{budget}, most likely for want of memory; choose smaller tiles "
                             "or unrolling, or raise the limit.")
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill the compiler's whole process group, then reap the driver (until it is reaped, its
    pid, which names the group, cannot be reused by another process)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone already
        os.killpg(proc.pid, signal.SIGKILL)
    if proc.poll() is None:
        proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream:
            stream.close()


def cache_dir() -> Path:
    """The private kernel cache (usercache: 0700, ours): the .so files here are loaded into
    worker processes, so nobody else may be able to plant one."""

    return private_dir("kernels")


@lru_cache(maxsize=1)
def compiler_version() -> str:
    """First line of `gcc --version` (part of every cache key)."""
    try:
        out = subprocess.run([CC, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(f"C compiler '{CC}' not usable: {exc}") from None
    return out.stdout.splitlines()[0] if out.stdout else CC


def flags_for(src: KernelSource) -> tuple[str, ...]:
    """Compiler flags of a kernel: the base set plus its ISA's (and the f16 workaround); for a
    cross-built kernel, the cross base set plus the target CPU's flags."""
    cross = src.meta.get("cross")
    if cross:
        return CROSS_BASE_FLAGS + tuple(cross.get("flags") or ())
    return BASE_FLAGS + ISA_FLAGS.get(kernel_isa(src), ()) + f16_flags(src)


def f16_flags(src: KernelSource) -> tuple[str, ...]:
    """On hosts with AVX512-FP16, -march=native lets gcc 12 emit masked `vmovsh` forms that the
    assembler refuses ("unsupported masking for `vmovsh'"), so _Float16 kernels would not build
    there; without the FP16 extension gcc computes f16 through f32 (F16C), which every x86-64
    host with AVX2 has. The flag is added only where the compiler knows it."""
    if "_Float16" not in src.text or not _compiler_accepts("-mno-avx512fp16"):
        return ()
    return ("-mno-avx512fp16",)


@lru_cache(maxsize=8)
def _compiler_accepts(flag: str) -> bool:
    try:
        done = subprocess.run([CC, flag, "-x", "c", "-c", "-o", os.devnull, "-"], input="",
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def kernel_isa(src: KernelSource) -> str:
    """The vector ISA a kernel's intrinsics need: the GEMM config's, else what the template
    recorded in its meta (rows, flash, conv), else none (portable C)."""
    return src.config.get("isa") or src.meta.get("isa") or "vecext"


def target_flags(src: KernelSource) -> tuple[str, ...]:
    """The machine flags of the normal build of `src` (-march=native plus its ISA's; the
    target CPU's flags for a cross-built kernel)."""
    cross = src.meta.get("cross")
    if cross:
        return tuple(cross.get("flags") or ())
    return TARGET_FLAGS + ISA_FLAGS.get(kernel_isa(src), ()) + f16_flags(src)


def build(src: KernelSource, limits: BuildLimits | None = None) -> Path:
    """Compile (or find in the cache) the shared library of a C kernel; returns its path.

    `limits` bound the compiler run (default: `BuildLimits.from_env()`, see the module doc)."""
    cross = src.meta.get("cross")
    if cross:
        raise BuildError(f"the {src.op_name} kernel is built for {cross['target']} "
                         f"({cross['arch']}); it cannot be loaded on this host. Run it under "
                         "emulation (uol_core.runtime.emulate), or choose a target of this host.")
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
        proc = run_compiler([*flags, str(c_file), "-o", str(tmp_so), "-lm"], src, limits)
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


def build_program(src: KernelSource, harness: str, limits: BuildLimits | None = None) -> Path:
    """Cross-compile (or find in the cache) the program `harness` + kernel `src` for the CPU
    its `meta["cross"]` names; returns the executable's path. The cross compiler must be
    installed (runtime.cross.Toolchain.require says what to install)."""

    cross = src.meta["cross"]
    tools = toolchain(cross["arch"])
    tools.require()
    flags = flags_for(src)
    key = hashlib.sha256("\0".join([src.text, harness, " ".join(flags), tools.compiler,
                                    _cross_version(tools.compiler)]).encode()).hexdigest()[:24]
    out = cache_dir() / f"{src.op_name[:40]}-{cross['arch']}-{key}"
    if out.exists():
        return out
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        c_file, main_file = Path(tmp) / "kernel.c", Path(tmp) / "harness.c"
        c_file.write_text(src.text)
        main_file.write_text(harness)
        tmp_exe = Path(tmp) / "kernel.exe"
        label = f"the {src.op_name} kernel for {cross['target']} (config {describe_config(src)})"
        proc = run_bounded_compiler([*flags, str(c_file), str(main_file), "-o", str(tmp_exe),
                                     "-lm"], label, limits, compiler=tools.compiler)
        if proc.returncode != 0:
            raise BuildError(explain_compile_error(proc.stderr, src).replace(
                "gcc", f"{tools.compiler} ({' '.join(flags[len(CROSS_BASE_FLAGS):])})", 1))
        os.replace(tmp_exe, out)
    return out


@lru_cache(maxsize=4)
def _cross_version(compiler: str) -> str:
    try:
        done = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return compiler
    return done.stdout.splitlines()[0] if done.stdout else compiler
