"""Build emitted Triton text into a module and run it: on a GPU, else under TRITON_INTERPRET=1."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch

from uol_core.backends.base import KernelSource
from uol_core.backends.triton.expr import safe
from uol_core.odl.ir import DType, Op
from uol_core.odl.overflow import INT32, check_index_arithmetic
from uol_core.odl.shapes import bind_sizes, shape_of
from uol_core.runtime.reference import TORCH_DTYPES, evaluate_all
from uol_core.runtime.usercache import private_dir, read_verified, write_atomic

TOLERANCE = {DType.f16: 2e-2, DType.bf16: 5e-2, DType.f32: 1e-4, DType.f64: 1e-9}
INTERPRETED_NOTE = "interpreted, no timing"
_MODULES: dict[str, ModuleType] = {}

if not torch.cuda.is_available():
    # triton.language builds its helpers (tl.zeros, ...) at import time, interpreted or not:
    # the switch must be set before anything imports triton.
    os.environ.setdefault("TRITON_INTERPRET", "1")


def gpu_available() -> bool:
    """True when torch sees a CUDA device (Triton then compiles for it)."""
    return torch.cuda.is_available()


def use_interpreter() -> None:
    """Switch Triton to its CPU interpreter; must happen before a kernel module is imported."""
    os.environ["TRITON_INTERPRET"] = "1"


def cache_dir() -> Path:
    """The generated-module cache: a private per-user folder (see uol_core.runtime.usercache)."""
    return private_dir("triton")


def load_module(source: KernelSource) -> ModuleType:
    """Import the kernel text through a content-addressed file (Triton reads kernel source there).

    What runs is the text we generated, compiled from memory: the file only serves Triton's
    `inspect.getsource`. It is rewritten unless it is ours, private and holds exactly that text,
    so a file planted at the computed name is never imported.
    """
    if not gpu_available():
        use_interpreter()
    text = source.text.encode()
    digest = hashlib.sha256(text).hexdigest()[:16]
    key = f"{digest}-{os.environ.get('TRITON_INTERPRET', '0')}"
    if key in _MODULES:
        return _MODULES[key]
    path = cache_dir() / f"{safe(source.op_name)}_{digest}.py"
    if not read_verified(path, text):
        write_atomic(path, text)
    name = f"uol_triton_{safe(source.op_name)}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)  # the file just checked to hold the text we generated
    _MODULES[key] = module
    return module


def _prepare(op: Op, tensors: dict[str, torch.Tensor]) -> tuple[list, dict[str, int], str]:
    sizes = bind_sizes(op, {n: tuple(t.shape) for n, t in tensors.items()})
    check_index_arithmetic(op, sizes, INT32)  # the kernels' offsets and indices are int32
    device = "cuda" if gpu_available() else "cpu"
    args = [tensors[d.name].to(device=device, dtype=TORCH_DTYPES[d.dtype]).contiguous()
            for d in op.inputs]
    return args, sizes, device


def run_triton(source: KernelSource, op: Op, tensors: dict) -> dict[str, torch.Tensor]:
    """Run the emitted kernels on `tensors` (inputs by name) and return the outputs by name."""
    module = load_module(source)
    args, sizes, _ = _prepare(op, tensors)
    dims = {safe(d): sizes[d] for d in op.dims}
    outs = getattr(module, source.entry)(*args, **dims)
    return {name: value.reshape(shape_of(op, name, sizes)) for name, value in outs.items()}


def random_inputs(op: Op, sizes: dict[str, int], seed: int = 0) -> dict[str, torch.Tensor]:
    """Reproducible inputs: normal floats, small non-negative integers (valid labels, indices)."""
    gen = torch.Generator().manual_seed(seed)
    high = max(1, min(sizes.values())) if sizes else 1
    out = {}
    for d in op.inputs:
        shape = shape_of(op, d.name, sizes)
        if d.dtype.is_float:
            out[d.name] = torch.randn(shape, generator=gen).to(TORCH_DTYPES[d.dtype])
        elif d.dtype == DType.bool:
            out[d.name] = torch.randint(0, 2, shape, generator=gen).bool()
        else:
            out[d.name] = torch.randint(0, high, shape, generator=gen).to(TORCH_DTYPES[d.dtype])
    return out


@dataclass
class Verification:
    """Kernel outputs compared with the reference evaluator."""

    ok: bool
    max_error: dict[str, float]
    tolerance: dict[str, float]
    mode: str  # "gpu" or "interpreted, no timing"

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def verify(source: KernelSource, op: Op, tensors: dict) -> Verification:
    """Run the kernels and compare every output with the reference, tolerance by dtype."""
    got = run_triton(source, op, tensors)
    want = evaluate_all(op, {k: v.cpu() for k, v in tensors.items()})
    errors, tols, ok = {}, {}, True
    for decl in op.outputs:
        g = got[decl.name].detach().cpu().to(torch.float64)
        r = want[decl.name].to(torch.float64)
        tol = TOLERANCE.get(decl.dtype, 0.0)
        scale = 1.0 + r.abs()
        finite = torch.isfinite(r)
        err = ((g - r).abs() / scale)[finite]
        errors[decl.name] = float(err.max()) if err.numel() else 0.0
        same_inf = bool(torch.allclose(g[~finite], r[~finite], equal_nan=True))
        tols[decl.name] = tol
        ok &= errors[decl.name] <= tol and same_inf
    return Verification(ok, errors, tols, "gpu" if gpu_available() else INTERPRETED_NOTE)


def bench_triton(source: KernelSource, op: Op, tensors: dict, rep_ms: int = 100) -> dict:
    """Median time (ms) with triton.testing.do_bench on a GPU; without one, no timing at all."""
    if not gpu_available():
        return {"mode": INTERPRETED_NOTE, "median_ms": None}
    import triton.testing

    module = load_module(source)
    args, sizes, _ = _prepare(op, tensors)
    dims = {safe(d): sizes[d] for d in op.dims}
    fn = getattr(module, source.entry)
    q = triton.testing.do_bench(lambda: fn(*args, **dims), rep=rep_ms, quantiles=[0.5, 0.2, 0.8])
    return {"mode": "gpu", "median_ms": q[0], "p20_ms": q[1], "p80_ms": q[2]}
