"""Kernels for a CPU that is not the host: which targets need a cross build, the toolchain that
builds for them, and the emulator that runs what it built (for verification, never for timing).

A target's architecture follows from its HFL ISA list (NEON or SVE: AArch64). Where the host is
of another architecture, the C backend stamps the kernel source with `cross_meta(target)`: the
architecture, the HFL's compiler flags for that CPU and its SVE vector length; `build.py`
compiles such a source with the cross compiler into a program and `emulate.py` runs it under
qemu-user. Tool names can be overridden from the environment (UOL_CROSS_CC_AARCH64,
UOL_QEMU_AARCH64, UOL_QEMU_SYSROOT_AARCH64).
"""

from __future__ import annotations

import os
import platform
import shutil
from dataclasses import dataclass, replace
from typing import Any

AARCH64 = "aarch64"
ARM_ISA_FLAGS = ("neon", "sve", "sve2")
EMULATED_NOTE = "verified under emulation; not timed"
# On SVE targets GCC's vectoriser writes NEON, and only the SVE platform's intrinsics use SVE:
# GCC 12.2's length-agnostic vectorisation of the generic loop nests miscompiles the masked
# sum of the library's `cross_entropy` (`#pragma omp simd reduction(+:acc)` over
# `(c == T[r]) ? X[r, c] : 0`: wrong sums at every vector length; found verifying it under
# qemu), and NEON code is right whatever the length.
SVE_AUTOVEC_FLAGS = ("--param=aarch64-autovec-preference=1",)  # 1: Advanced SIMD only


@dataclass(frozen=True)
class Toolchain:
    """The tools that build and run kernels of one foreign architecture on this host."""

    arch: str
    compiler: str
    emulator: str
    sysroot: str  # where the emulator finds the target's dynamic loader and libraries
    packages: tuple[str, ...]  # Debian/Ubuntu packages that provide the tools

    def missing(self) -> list[str]:
        """The tools (and runtime libraries) not installed here."""
        gone = [tool for tool in (self.compiler, self.emulator) if shutil.which(tool) is None]
        if not os.path.isdir(os.path.join(self.sysroot, "lib")):
            gone.append(f"{self.sysroot}/lib (the {self.arch} C library)")
        return gone

    def require(self) -> None:
        """Raise ToolchainMissing, saying what to install, when a tool is absent."""
        gone = self.missing()
        if gone:
            raise ToolchainMissing(
                f"building and verifying {self.arch} kernels on this {host_arch()} host needs "
                f"{', '.join(gone)}; install them with `apt-get install "
                f"{' '.join(self.packages)}` (or `make install`)")


class ToolchainMissing(RuntimeError):
    """The cross compiler or the emulator for a target's architecture is not installed."""


def toolchain(arch: str) -> Toolchain:
    """The cross toolchain of `arch`; a ValueError for an architecture it does not know."""
    if arch != AARCH64:
        raise ValueError(f"no cross toolchain for {arch}; kernels build for {AARCH64} or natively")
    return Toolchain(
        arch=AARCH64,
        compiler=os.environ.get("UOL_CROSS_CC_AARCH64", "aarch64-linux-gnu-gcc"),
        emulator=os.environ.get("UOL_QEMU_AARCH64", "qemu-aarch64"),
        # Debian's multiarch cross layout (libc6-dev-arm64-cross)
        sysroot=os.environ.get("UOL_QEMU_SYSROOT_AARCH64", "/usr/aarch64-linux-gnu"),
        packages=("gcc-aarch64-linux-gnu", "libc6-dev-arm64-cross", "qemu-user"))


def host_arch() -> str:
    """This machine's architecture in GCC's spelling (x86_64, aarch64)."""
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": AARCH64}.get(machine, machine)


def target_arch(target: Any) -> str:
    """The architecture a CPU target's kernels are built for, from its HFL ISA list."""
    isa = {name.lower() for name in (getattr(target, "isa", None) or [])}
    return AARCH64 if isa & set(ARM_ISA_FLAGS) else "x86_64"


def needs_cross_build(target: Any) -> bool:
    """Whether kernels for `target` must be cross-built and emulated on this host."""
    if getattr(target, "kind", "cpu") != "cpu" or getattr(target, "name", "host") == "host":
        return False
    return target_arch(target) != host_arch()


def sve_vector_bits(target: Any) -> int:
    """The SVE vector length the target implements (0 without SVE)."""
    isa = {name.lower() for name in (getattr(target, "isa", None) or [])}
    return int(target.vector_bits or 0) if isa & {"sve", "sve2"} else 0


def cross_meta(target: Any) -> dict:
    """What a kernel source records to be built and emulated for `target` on this host.

    Kernels are built with the HFL's compiler flags only, never for one SVE vector length
    (no -msve-vector-bits): the SVE platform and GCC's vectoriser write length-agnostic code
    that reads the lane count at run time, so one binary is right on every SVE core.
    `sve_bits` (the length the target's cores implement, the HFL's vector_bits) is the length
    the emulator runs it at."""
    flags = list(getattr(target, "compiler_flags", None) or [])
    sve_bits = sve_vector_bits(target)
    if sve_bits:
        flags += SVE_AUTOVEC_FLAGS
    return {"target": target.name, "arch": target_arch(target), "flags": flags,
            "sve_bits": sve_bits}


def emulator_argv(cross: dict) -> list[str]:
    """The emulator command line prefix for a program built with `cross` (see cross_meta).

    qemu's 'max' CPU implements every extension the HFL targets list; its SVE vector length is
    set to the target's, so vector-length-agnostic code runs at the length it will meet.
    A copy of `cross` with another `sve_bits` runs the same binary at that length."""
    tools = toolchain(cross["arch"])
    cpu = "max"
    bits = int(cross.get("sve_bits") or 0)
    if bits:
        cpu += f",sve-default-vector-length={bits // 8}"
    return [tools.emulator, "-L", tools.sysroot, "-cpu", cpu]


def for_target(src: Any, target: Any) -> Any:
    """`src` stamped with `cross_meta(target)` when `target` needs a cross build here, else
    `src` itself (a KernelSource is frozen: the stamped one is a copy)."""

    if target is None or not needs_cross_build(target) or src.lang != "c":
        return src
    return replace(src, meta={**src.meta, "cross": cross_meta(target)})
