"""Triton's compiler stages (TTIR, TTGIR, LLVM IR, PTX or AMDGCN) of a generated kernel for a GPU
target, on a machine without that GPU.

`triton.compile(ASTSource(fn, signature, constexprs), target=GPUTarget(...))` needs no device:
the target's architecture comes from the HFL (`isa` sm_90a -> cuda 90, gfx942 -> hip), and the
kernel's argument types and constexprs from the op and its sizes, as the launcher would pass
them. Compilation runs in a child process (see triton_stages_worker.py for why), one kernel
per call; each stage line carries the kernel source line it came from (triton_stage_lines.py).

A pure service: text and facts in, stage texts out; errors are one line a user can act on.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from uol_core.backends.triton.expr import safe
from uol_core.runtime.triton_stage_lines import source_lines
from uol_core.runtime.usercache import private_dir

WORKER = Path(__file__).with_name("triton_stages_worker.py")
TIMEOUT_S = 180.0  # a large flash kernel compiles in seconds; a loaded host needs headroom
STAGE_LABELS = {"ttir": "TTIR", "ttgir": "TTGIR", "llir": "LLVM IR", "ptx": "PTX",
                "amdgcn": "AMDGCN"}
STAGE_ORDER = tuple(STAGE_LABELS)
BINARY_LABELS = {"cubin": "cubin (ptxas)", "hsaco": "hsaco"}
POINTER_TYPES = {"f16": "*fp16", "bf16": "*bf16", "f32": "*fp32", "f64": "*fp64",
                 "i32": "*i32", "i8": "*i8", "bool": "*i1"}


class StagesError(ValueError):
    """Why a kernel has no stages here, in one line (the Studio shows it as is)."""


@dataclass(frozen=True)
class GpuArch:
    """What `GPUTarget` needs: backend ('cuda' or 'hip'), architecture and warp size."""

    backend: str
    arch: int | str
    warp_size: int
    label: str  # "sm_90a", "gfx942": how the target names it


@dataclass(frozen=True)
class KernelSpec:
    """One @triton.jit kernel of a module, typed as its launch would type it."""

    name: str
    signature: dict[str, str]  # argument -> Triton type ('*fp32', 'i32', 'constexpr')
    constexprs: dict[str, Any]
    divisible: tuple[str, ...]  # arguments the JIT would mark 16-divisible (pointers, sizes)
    num_warps: int = 4
    num_stages: int = 2


@dataclass
class Stage:
    """One stage's text and, per line (1-based), the kernel source line it came from."""

    name: str
    label: str
    text: str
    source_lines: dict[int, int] = field(default_factory=dict)


@dataclass
class StagesResult:
    kernel: str
    arch: GpuArch
    triton_version: str
    stages: list[Stage]
    binaries: dict[str, int]  # binary stage -> size in bytes (cubin from the bundled ptxas)

    def stage(self, name: str) -> Stage:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise KeyError(f"no stage {name}; stages: {', '.join(s.name for s in self.stages)}")


def gpu_arch(target: Any) -> GpuArch:
    """The GPUTarget facts of an HFL target (its `isa` list and warp size)."""
    name = getattr(target, "name", str(target))
    if getattr(target, "kind", "") != "gpu":
        raise StagesError(f"{name} is not a GPU target: Triton's stages need one "
                          "(h100-sxm, h200-sxm, a100-sxm-80gb, ...)")
    warp = int(getattr(target, "warp_size", 0) or 32)
    for isa in getattr(target, "isa", None) or ():
        if isa.startswith("sm_") and isa[3:].rstrip("a").isdigit():
            return GpuArch("cuda", int(isa[3:].rstrip("a")), warp, isa)
        if isa.startswith("gfx"):
            return GpuArch("hip", isa, warp, isa)
    raise StagesError(f"{name}: the HFL names no sm_XX or gfxNNN architecture in its isa "
                      f"({', '.join(getattr(target, 'isa', None) or ()) or 'none'})")


def _evaluate(expr: str, names: Mapping[str, int]) -> Any:
    """Value of a launcher's constexpr expression ('min(triton.next_power_of_2(C), 1024)'):
    numbers, sizes, arithmetic, comparisons, min/max and triton.next_power_of_2/cdiv, read
    from the syntax tree (nothing is executed)."""
    calls = {"min": min, "max": max, "next_power_of_2": lambda n: 1 << max(int(n) - 1, 0)
             .bit_length(), "cdiv": lambda a, b: -(-a // b)}
    ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
           ast.Mult: lambda a, b: a * b, ast.FloorDiv: lambda a, b: a // b,
           ast.Mod: lambda a, b: a % b, ast.Gt: lambda a, b: a > b, ast.Lt: lambda a, b: a < b,
           ast.GtE: lambda a, b: a >= b, ast.LtE: lambda a, b: a <= b,
           ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b}

    def value(node: ast.AST) -> Any:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, bool)):
            return node.value
        if isinstance(node, ast.Name) and node.id in names:
            return names[node.id]
        if isinstance(node, ast.Name) and node.id in ("True", "False"):
            return node.id == "True"
        if isinstance(node, ast.BinOp) and type(node.op) in ops:
            return ops[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in ops:
            return ops[type(node.ops[0])](value(node.left), value(node.comparators[0]))
        if isinstance(node, ast.Call) and not node.keywords:
            fn = node.func.attr if isinstance(node.func, ast.Attribute) else \
                getattr(node.func, "id", "")
            if fn in calls:
                return calls[fn](*(value(a) for a in node.args))
        raise StagesError(f"cannot read the launch constant '{expr}'")

    return value(ast.parse(expr, mode="eval").body)


def kernel_specs(source: Any, op: Any, sizes: Mapping[str, int]) -> list[KernelSpec]:
    """The kernels of a generated Triton module (`KernelSource.meta`), each typed as the
    module's launcher calls it at `sizes`: tensors as pointers of their element type
    (intermediates at the compute type), sizes as i32 (1 as a constant, as the JIT does)."""

    outside = {d.name for d in op.inputs} | {d.name for d in op.outputs}
    wide = any(d.dtype.value == "f64" for d in op.inputs + op.outputs + op.locals)
    compute = "*fp64" if wide else "*fp32"
    names = {safe(d): int(sizes[d]) for d in op.dims}
    specs = []
    for kernel in (source.meta or {}).get("kernels", []):
        signature: dict[str, str] = {}
        constexprs: dict[str, Any] = {}
        divisible: list[str] = []
        for tensor in kernel["tensors"]:
            dtype = op.tensor(tensor).dtype
            is_local_float = tensor not in outside and dtype.is_float and dtype.value != "f64"
            signature[f"{safe(tensor)}_ptr"] = compute if is_local_float else \
                POINTER_TYPES[dtype.value]
            divisible.append(f"{safe(tensor)}_ptr")  # torch allocations are 16-byte aligned
        for dim in op.dims:
            value = names[safe(dim)]
            signature[safe(dim)] = "constexpr" if value == 1 else "i32"
            if value == 1:
                constexprs[safe(dim)] = 1
            elif value % 16 == 0:
                divisible.append(safe(dim))
        for const, expr in kernel.get("consts", {}).items():
            signature[const] = "constexpr"
            constexprs[const] = _evaluate(str(expr), names)
        config = source.config or {}
        specs.append(KernelSpec(kernel["name"], signature, constexprs, tuple(divisible),
                                int(config.get("num_warps", 4)),
                                int(config.get("num_stages", 2))))
    return specs


def compile_stages(text: str, spec: KernelSpec, arch: GpuArch, file_name: str = "kernel.py",
                   binary: bool = False, timeout_s: float = TIMEOUT_S) -> StagesResult:
    """Compile kernel `spec.name` of module `text` for `arch` and return its stages; `binary`
    also runs the assembler Triton bundles (ptxas: the cubin), the slow part of large kernels."""

    request = {"text": text, "file_name": file_name, "kernel": spec.name,
               "signature": spec.signature, "constexprs": spec.constexprs,
               "divisible": list(spec.divisible), "backend": arch.backend, "arch": arch.arch,
               "warp_size": arch.warp_size, "num_warps": spec.num_warps,
               "num_stages": spec.num_stages, "binary": binary}
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(private_dir("triton-stages"))
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton's default, said out loud
    try:
        done = subprocess.run([sys.executable, str(WORKER)], input=json.dumps(request),
                              capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        raise StagesError(f"Triton took over {timeout_s:.0f} s to compile {spec.name} for "
                          f"{arch.label}; try smaller blocks") from None
    try:
        answer = json.loads(done.stdout)
    except json.JSONDecodeError:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise StagesError(f"the Triton compiler process failed (exit {done.returncode}): "
                          f"{tail}") from None
    if not answer.get("ok"):
        raise StagesError(answer.get("error") or "Triton compiled nothing")
    stages = [Stage(name, STAGE_LABELS[name], answer["stages"][name],
                    source_lines(name, answer["stages"][name], file_name))
              for name in STAGE_ORDER if name in answer["stages"]]
    return StagesResult(spec.name, arch, answer.get("version", ""), stages,
                        dict(answer.get("binaries", {})))


def binary_note(result: StagesResult) -> str:
    """One line on the machine code: its size when the bundled assembler made it."""
    if not result.binaries:
        return "not assembled (the text stages only; ask for the binary to run the assembler)"
    return "; ".join(f"{BINARY_LABELS.get(k, k)}: {v:,} bytes, built offline"
                     for k, v in result.binaries.items())
