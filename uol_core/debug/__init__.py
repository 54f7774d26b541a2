"""The visual debugger's engine: trace Triton kernels (generated or a user's) per program."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from typing import Any

# The recorder needs the interpreter; triton.language reads the switch when first imported.
os.environ.setdefault("TRITON_INTERPRET", "1")

from uol_core.backends.triton import emit
from uol_core.debug.recorder import MAX_PROGRAMS, Trace, recording
from uol_core.debug.trace_io import load_trace, save_trace
from uol_core.debug.views import (
    bytes_per_program,
    heatmap,
    mask_ratios,
    oob_findings,
    program_events,
    summary,
)
from uol_core.runtime.triton_runner import random_inputs, run_triton

__all__ = ["Trace", "bytes_per_program", "heatmap", "load_kernel", "load_trace", "mask_ratios",
           "oob_findings", "program_events", "save_trace", "summary", "trace_kernel", "trace_op"]


def trace_op(op, tensors: dict | None = None, sizes: dict | None = None, config: dict | None = None,
             max_programs: int = MAX_PROGRAMS) -> tuple[Trace, dict]:
    """Emit Triton for an ODL op, run it under the recorder; returns (trace, outputs)."""
    os.environ["TRITON_INTERPRET"] = "1"  # before the kernel module is imported

    if tensors is None:
        tensors = random_inputs(op, sizes or {})
    source = emit(op, config or {})
    with recording(max_programs) as trace:
        outputs = run_triton(source, op, tensors)
    trace.notes.append(f"op {op.name}: {', '.join(p for p in source.meta['pattern'])} kernels")
    trace.meta = {"line_map": source.line_map}  # kernel line -> ODL line, for the views
    _note_sampling(trace)
    return trace, outputs


def trace_kernel(fn: Any, grid: tuple | Callable, *args: Any, max_programs: int = MAX_PROGRAMS,
                 **kwargs: Any) -> Trace:
    """Run a user's @triton.jit kernel `fn[grid](*args, **kwargs)` under the recorder."""
    os.environ["TRITON_INTERPRET"] = "1"
    from triton.runtime.interpreter import InterpretedFunction

    if not isinstance(fn, InterpretedFunction):  # a JITFunction made before the env was set
        fn = InterpretedFunction(getattr(fn, "fn", fn))
    with recording(max_programs) as trace:
        fn[grid](*args, **kwargs)
    _note_sampling(trace)
    return trace


def load_kernel(spec: str) -> Any:
    """Import `module:function` (a user's @triton.jit kernel) with the interpreter switched on."""
    if ":" not in spec:
        raise ValueError(f"kernel '{spec}' must be written module:function, e.g. my_kernels:add")
    module_name, _, name = spec.partition(":")
    os.environ["TRITON_INTERPRET"] = "1"
    if module_name.endswith(".py") or os.sep in module_name:
        spec_obj = importlib.util.spec_from_file_location(
            os.path.basename(module_name).removesuffix(".py"), module_name)
        module = importlib.util.module_from_spec(spec_obj)
        sys.modules[spec_obj.name] = module
        spec_obj.loader.exec_module(module)
    else:
        module = importlib.import_module(module_name)
    if not hasattr(module, name):
        raise ValueError(f"module {module_name} has no attribute '{name}'")
    return getattr(module, name)


def _note_sampling(trace: Trace) -> None:
    for lc in trace.launches:
        if lc.sampled:
            total = lc.grid[0] * lc.grid[1] * lc.grid[2]
            trace.notes.append(f"{lc.kernel}: grid of {total} programs, {len(lc.recorded)} "
                               "recorded (evenly sampled)")
        if lc.dropped_events:
            trace.notes.append(f"{lc.kernel}: {lc.dropped_events} events over the per-program "
                               "limit were not recorded")
