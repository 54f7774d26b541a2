"""Worker process for one kernel run: compile, verify against the reference, measure; JSON out.

Runs as `python -m app.services.run_child` with a JSON request on stdin, so a kernel that
crashes or hangs takes down this process only; the server reads the exit status.

Deferred imports: a child process loads only the engine its request needs, so it starts fast.
"""

from __future__ import annotations

import os
import signal
import statistics
import time

from app.services.child_io import serve_one
from uol_core.runtime.stats import thin

MARK = "@@RESULT@@"  # what the parent (runner.py) looks for in this process's output

TOLERANCE = 1e-4  # f32, relative to 1 + |reference|, as the Triton runner uses


def _compare(got: dict, want: dict) -> tuple[bool, dict[str, float]]:
    import torch

    errors, ok = {}, True
    for name, ref in want.items():
        g = got[name].detach().cpu().to(torch.float64)
        r = ref.detach().cpu().to(torch.float64)
        finite = torch.isfinite(r)
        err = ((g - r).abs() / (1.0 + r.abs()))[finite]
        errors[name] = float(err.max()) if err.numel() else 0.0
        ok &= errors[name] <= TOLERANCE and bool(torch.isfinite(g[finite]).all())
    return ok, errors


def _time(fn, budget_s: float = 0.3, max_reps: int = 50) -> list[float]:
    """Wall times of repeated calls after one warm-up, until the budget or max_reps is reached."""
    fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - start < budget_s and len(times) < max_reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def _inject_fault() -> None:
    """Test hook: UOL_FAULT_INJECT=segfault|hang makes the kernel run crash or hang on purpose."""
    fault = os.environ.get("UOL_FAULT_INJECT", "")
    if fault == "segfault":
        os.kill(os.getpid(), signal.SIGSEGV)
    if fault == "hang":
        time.sleep(3600)


def run(request: dict) -> dict:
    """Compile the request's kernel, run it on random inputs, compare and time it."""
    import torch

    from app.services.kernels import emit
    from uol_core.backends import get_backend
    from uol_core.odl.shapes import shape_of
    from uol_core.runtime.inputs import random_inputs
    from uol_core.runtime.reference import TORCH_DTYPES, evaluate_all

    op, sizes, src, _, _ = emit(request["odl"], request["backend"], request["target"],
                                request["sizes"], request.get("config"))
    inputs = random_inputs(op, sizes, seed=0)
    reference = evaluate_all(op, inputs)
    want = {d.name: reference[d.name] for d in op.outputs}
    backend = get_backend(request["backend"], request["target"])
    kernel = backend.load(src, backend.plan(op, sizes, request["target"]))
    outputs = {d.name: torch.zeros(shape_of(op, d.name, sizes), dtype=TORCH_DTYPES[d.dtype])
               for d in op.outputs}

    def call() -> dict:
        if hasattr(kernel, "run_with"):  # a kernel that takes inputs and outputs apart
            return kernel.run_with(inputs, outputs)
        kernel({**inputs, **outputs})  # the C GEMM: every tensor by name, outputs written
        return outputs

    _inject_fault()
    got = call()
    note = getattr(kernel, "timing_note", "")  # why a time would mean nothing (interpreted)
    mode = note or "measured"
    if note:
        times = []
    else:  # a GPU kernel is timed by its backend (asynchronous launches), others by wall clock
        times = kernel.bench(inputs) if hasattr(kernel, "bench") else _time(call)
    ok, errors = _compare(got, want)
    out = {"ok": ok, "max_error": errors, "tolerance": TOLERANCE, "mode": mode,
           "config": dict(src.config), "sizes": sizes, "op": op.name}
    if times:
        q = statistics.quantiles(times, n=4) if len(times) > 1 else [times[0]] * 3
        out.update(median_s=statistics.median(times), iqr_s=q[2] - q[0], reps=len(times),
                   samples=thin(times))
    return out


def main() -> None:
    """Read one request from stdin, write one JSON result line to stdout."""
    serve_one(run, MARK)


if __name__ == "__main__":
    main()
