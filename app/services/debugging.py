"""Debugger service: trace a kernel in a sandboxed worker, then serve views of the saved trace.

Deferred imports: an engine loads when the service first calls it, so the server starts fast.
"""

from __future__ import annotations

import functools
import re
import uuid
from dataclasses import replace
from pathlib import Path

from app.services.debug_child import MARK
from app.services.job_queue import LOCAL_CLIENT, JobRefused, job_slot
from uol_core.runtime.sandbox import Limits, run_sandboxed
from uol_core.runtime.usercache import private_dir

TRACE_TIMEOUT_S = 120.0
MAX_KERNEL_BYTES = 64 * 1024  # an uploaded kernel file larger than this is refused
EXAMPLE_KERNEL = '''import triton
import triton.language as tl


@triton.jit
def scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)  # bug: no mask, the last program reads past x
    tl.store(y_ptr + offs, x * 2.0, mask=offs < n)
'''
EXAMPLE_CALL = {"function": "scale", "grid": "4", "args": "x_ptr=randn:60 y_ptr=zeros:60 n=60 BLOCK=16"}


def _root() -> Path:
    """Saved traces: the private per-user cache (never a shared temporary folder, where
    another local user could plant or read a trace)."""
    return private_dir("traces")


# What a trace may use; the interpreter is slow, so CPU time is what usually runs out first.
TRACE_LIMITS = Limits(cpu_s=int(TRACE_TIMEOUT_S), memory_mb=2048, file_mb=256, processes=64,
                      wall_s=TRACE_TIMEOUT_S + 15)
# What an ok result of the trace worker must look like (it comes from an untrusted process;
# the page indexes into it): sandbox_io.check's schema.
_NAME_OR_NONE = (str, type(None))
TRACE_RESULT = {"ok": bool, "summary": {
    "launches": [{"kernel": str, "grid": [int], "recorded": int, "sampled": bool,
                  "dropped_events": int, "tensors": {"*": {"shape": [int], "dtype": str}}}],
    "events": int, "bytes_loaded": float, "bytes_stored": float,
    "findings": [{"kind": str, "kernel": str, "tensor": _NAME_OR_NONE, "line": int,
                  "source": str, "programs": [[int]], "lanes": int, "offsets": [int],
                  "numel": int}],
    "mask_ratios": [{"kernel": str, "kind": str, "line": int, "tensor": _NAME_OR_NONE,
                     "lanes": int, "masked": int, "source": str, "masked_ratio": float}],
    "notes": [str]}}
# Imported before the memory cap and before the sandbox drops root: the runtime's own cost.
PRELOAD = ("torch", "numpy", "triton", "triton.language", "uol_core.debug", "uol_core.ops",
           "uol_core.backends.triton", "uol_core.runtime.triton_runner")


def _run_child(request: dict, tid: str, limits: Limits, client: str) -> dict:
    """Trace in the sandbox, through the client's job queue; the trace files come back as
    `<tid>.json` / `<tid>.npz`, and the result says which isolation and limits applied."""
    keep = {f"trace{suffix}": _root() / f"{tid}{suffix}" for suffix in (".json", ".npz")}
    try:
        with job_slot(client, "debug trace"):
            res = run_sandboxed("app.services.debug_child", {**request, "out": "trace"}, MARK,
                                limits=limits, preload=PRELOAD, keep=keep,
                                env={"TRITON_INTERPRET": "1"}, schema=TRACE_RESULT,
                                timed_out="the trace did not finish within {timeout:.0f} s; the "
                                          "worker was stopped (try fewer programs or smaller "
                                          "shapes)")
    except JobRefused as exc:
        return {"ok": False, "error": str(exc)}
    report = res.get("sandbox", {})
    if report.get("refused") and res.get("ok") is False:
        res["error"] += " | refused in the sandbox: " + "; ".join(report["refused"][:3])
    return {**res, "id": tid} if res.get("ok") else res


def trace_library_op(op: str, sizes: dict, timeout: float = TRACE_TIMEOUT_S,
                     client: str = LOCAL_CLIENT) -> dict:
    """Trace a library op's Triton kernel at `sizes`; result has ok, id (trace) or error.
    `op` must name a library operator (a client's value: never a path, never text)."""
    from uol_core.ops import UnknownOp, library_name

    try:
        library_name(op)
    except UnknownOp as exc:
        return {"ok": False, "error": str(exc)}
    limits = replace(TRACE_LIMITS, cpu_s=int(timeout), wall_s=timeout + 15)
    return _run_child({"kind": "op", "op": op, "sizes": sizes}, uuid.uuid4().hex[:12], limits,
                      client)


def trace_user_kernel(source: str, function: str, grid: str, args: str,
                      timeout: float = TRACE_TIMEOUT_S, client: str = LOCAL_CLIENT,
                      limits: Limits | None = None) -> dict:
    """Trace the user's kernel source `function[grid](args)` in the sandbox (never here)."""
    if len(source.encode()) > MAX_KERNEL_BYTES:
        return {"ok": False, "error": f"kernel file is over {MAX_KERNEL_BYTES // 1024} KiB"}
    if not function.isidentifier():
        return {"ok": False, "error": f"kernel function '{function}' is not a Python name"}
    try:
        dims = [int(g) for g in re.split(r"[,\s]+", grid.strip()) if g]
    except ValueError:
        return {"ok": False, "error": f"grid '{grid}' must be 1-3 integers, e.g. 4 or 2,2"}
    if not 1 <= len(dims) <= 3 or any(d < 1 for d in dims):
        return {"ok": False, "error": f"grid '{grid}' must be 1-3 positive integers"}
    limits = limits or replace(TRACE_LIMITS, cpu_s=int(timeout), wall_s=timeout + 15)
    return _run_child({"kind": "source", "source": source, "function": function, "grid": dims,
                       "args": args}, uuid.uuid4().hex[:12], limits, client)


@functools.lru_cache(maxsize=8)
def load(tid: str):
    """The saved trace of id `tid` (kept in memory for the page's view changes)."""
    from uol_core.debug.trace_io import load_trace

    if not re.fullmatch(r"[0-9a-f]{12}", tid or ""):
        raise ValueError("bad trace id")
    return load_trace(_root() / f"{tid}.json")


def programs(tid: str, launch: int = 0) -> list[list[int]]:
    """Recorded program ids (grid coordinates) of one launch."""
    tr = load(tid)
    return [list(p) for p in tr.launches[launch].recorded] if tr.launches else []


def tensor_view(tid: str, tensor: str, program: list[int] | None, launch: int = 0) -> dict:
    """Load and store counts of one tensor (one program or all), its shape and OOB offsets by kind."""
    from uol_core.debug import heatmap, oob_findings

    tr = load(tid)
    info = tr.launches[launch].tensors[tensor]
    prog = tuple(program) if program is not None else None
    oob: dict[str, list[int]] = {}  # by kind: the figure marks a store among the stores
    for f in oob_findings(tr):
        if f.tensor == tensor and (prog is None or prog in [tuple(p) for p in f.programs]):
            oob.setdefault(f.kind, []).extend(f.offsets)
    return {"loads": heatmap(tr, tensor, prog, kind="load", launch=launch),
            "stores": heatmap(tr, tensor, prog, kind="store", launch=launch),
            "shape": list(info.shape), "oob": oob}


def source_of(tid: str, launch: int = 0) -> str:
    """The kernel source text of one launch ('' when the file could not be read)."""
    tr = load(tid)
    return tr.sources.get(tr.launches[launch].file, "") if tr.launches else ""
