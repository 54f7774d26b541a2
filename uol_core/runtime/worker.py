"""Run kernels in a worker process: a crash, a hang (timeout) or a wrong result comes back as a
result with its cause, and the calling process (tuner, IDE) keeps running."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import traceback
from dataclasses import asdict

from uol_core.backends.base import KernelSource
from uol_core.odl import parse
from uol_core.runtime.build import BuildError, build
from uol_core.runtime.cross import EMULATED_NOTE, ToolchainMissing
from uol_core.runtime.emulate import EmulatedKernel, EmulationError
from uol_core.runtime.inputs import random_inputs
from uol_core.runtime.measure import time_call, time_interleaved
from uol_core.runtime.native import NativeKernel
from uol_core.runtime.peak_memory import check_memory
from uol_core.runtime.reference import TORCH_DTYPES, evaluate_all
from uol_core.runtime.stats import thin
from uol_core.runtime.verify import compare


def _signal_name(code: int | None) -> str:
    if code is None:
        return "unknown"
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"


class Worker:
    """One long-lived worker process, restarted after a crash or a timeout."""

    def __init__(self, timeout_s: float = 120.0):
        self.timeout_s = timeout_s
        self.ctx = mp.get_context("spawn")  # never fork a process that holds OpenMP/torch threads
        self.proc = None
        self.conn = None
        self.owner = os.getpid()

    def _start(self) -> None:
        parent, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=_serve, args=(child,), daemon=True)
        self.proc.start()
        child.close()
        self.conn, self.owner = parent, os.getpid()

    def _adopt(self) -> None:
        """A Worker copied into a forked process (a background job of the IDE) holds a child of
        its parent, which only the parent may poll or kill: forget it and start our own."""
        if self.proc is not None and self.owner != os.getpid():
            self.proc, self.conn = None, None

    def _stop(self) -> None:
        self._adopt()
        if self.proc is not None and self.proc.is_alive():
            self.proc.kill()
        if self.proc is not None:
            self.proc.join(5)
        self.proc, self.conn = None, None

    def run(self, job: dict, timeout_s: float | None = None) -> dict:
        """Execute `job` (see `execute_job`) in the worker; always returns a result dict."""
        timeout = timeout_s or self.timeout_s
        self._adopt()
        if self.proc is None or not self.proc.is_alive():
            self._start()
        try:
            self.conn.send(job)
            if not self.conn.poll(timeout):
                self._stop()
                return {"status": "timeout",
                        "reason": f"no result within {timeout:.0f} s: the kernel hangs or is far "
                                  "too slow (worker killed)"}
            return self.conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            self.proc.join(5)
            code = self.proc.exitcode
            self._stop()
            return {"status": "crash",
                    "reason": f"the kernel crashed the worker process ({_signal_name(code)})"}

    def close(self) -> None:
        self._stop()

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def make_job(source: KernelSource, op_text: str, op_file: str, sizes: dict, *, seed: int = 0,
             warmup: int = 2, repeats: int = 7, min_seconds: float = 0.2,
             check_only: bool = False) -> dict:
    """A picklable job: build, verify against the reference, then time (unless check_only)."""
    return {"source": asdict(source), "op_text": op_text, "op_file": op_file, "sizes": sizes,
            "seed": seed, "warmup": warmup, "repeats": repeats, "min_seconds": min_seconds,
            "check_only": check_only}


def _serve(conn) -> None:
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        conn.send(run_one(job))


def run_one(job: dict) -> dict:
    """The result of one job of `make_job` or `make_race`, computed in this process (the
    worker process, or a remote worker's sandboxed job process); never raises."""
    try:
        return execute_race(job) if job.get("kind") == "race" else execute_job(job)
    except Exception as exc:  # reported, never fatal: the caller decides
        return {"status": "error", "reason": f"{type(exc).__name__}: {exc}",
                "trace": traceback.format_exc(limit=5)}


_REFERENCE: dict = {}


def execute_job(job: dict) -> dict:
    """Build the kernel, run it on seeded random inputs, compare with the reference, then time."""

    src = KernelSource(**job["source"])
    op = parse(job["op_text"], job["op_file"])
    sizes = job["sizes"]
    check_memory(op, sizes)  # a too-big request is an error here, not an OOM-killed machine
    if src.meta.get("cross"):  # built for another architecture: verified under emulation
        return _execute_emulated(src, op, sizes, job["seed"])
    result, call = _built_and_verified(src, op, *_reference(job, op))
    if call is None or job["check_only"]:
        return result
    timing = time_call(call, warmup=job["warmup"], repeats=job["repeats"],
                       min_seconds=job["min_seconds"])
    result.update(_timed(timing, src.meta.get("flops", 0)), outliers=timing.outliers)
    return result


def _reference(job: dict, op) -> tuple[dict, dict]:
    """The job's seeded random inputs and the reference outputs (kept for the next job of
    the same op, sizes and seed)."""

    key = (job["op_text"], tuple(sorted(job["sizes"].items())), job["seed"])
    if key not in _REFERENCE:
        _REFERENCE.clear()
        # typed as declared: bf16 data for a bf16 GEMM, class labels for integer inputs
        inputs = random_inputs(op, job["sizes"], job["seed"])
        _REFERENCE[key] = (inputs, evaluate_all(op, inputs))
    return _REFERENCE[key]


def _built_and_verified(src: KernelSource, op, inputs: dict, reference: dict):
    """(result, call): the kernel built and run once into its own outputs, compared with the
    reference; `call` runs it again, None when it failed to build or verify. Every tensor has
    the dtype `op` declares (a bf16 GEMM reads bf16 inputs)."""
    import torch

    try:
        path = build(src)
    except BuildError as exc:
        return {"status": "build_error", "reason": str(exc)}, None
    outputs = {name: torch.full_like(reference[name], float("nan")) for name in reference}
    tensors = {**inputs, **outputs}
    kernel = NativeKernel(path, src.entry, src.meta["args"],
                          {n: tuple(t.shape) for n, t in tensors.items()},
                          {d.name: TORCH_DTYPES[d.dtype] for d in (*op.inputs, *op.outputs)})
    kernel(tensors)
    verdict = compare(outputs, reference, int(src.meta.get("reduction_length", 1)))
    result = {"status": "ok" if verdict.ok else "mismatch", "max_abs_err": verdict.max_abs_err,
              "max_rel_err": verdict.max_rel_err, "atol": verdict.atol, "where": verdict.where}
    if not verdict.ok:
        result["reason"] = (f"wrong result at {verdict.where}: max abs err "
                            f"{verdict.max_abs_err:.3g}, max rel err {verdict.max_rel_err:.3g} "
                            f"(tolerance {verdict.atol:.3g})")
        return result, None
    if op.aliases:
        # timed in place, as a caller that donates its inputs runs it (the by-value call above
        # also paid a copy of each), on copies: the reference's inputs stay as they are
        donated = {**tensors, **{name: t.clone() for name, t in inputs.items()}}
        donated.update({out: donated[source] for out, source in op.aliases.items()})
        result["timed_in_place"] = sorted(op.aliases.values())
        return result, lambda: kernel(donated)
    return result, lambda: kernel(tensors)


def _timed(timing, flops: float) -> dict:
    """A timing's fields in a result (GFLOP/s from the kernel's FLOPs where it knows them);
    the samples travel too (thinned), so two results can be compared with a confidence."""

    return {"median_s": timing.median_s, "iqr_s": timing.iqr_s, "spread": timing.spread,
            "repeats": timing.repeats, "samples": thin(timing.samples),
            "gflops": flops / timing.median_s / 1e9 if timing.median_s > 0 else None}


def make_race(sources: list[KernelSource], op_text: str, op_file: str, sizes: dict, *,
              seed: int = 0, seconds: float = 1.0, rounds: int = 5) -> dict:
    """A picklable job that times several kernels of one op in turn (`execute_race`)."""
    return {"kind": "race", "sources": [asdict(s) for s in sources], "op_text": op_text,
            "op_file": op_file, "sizes": sizes, "seed": seed, "seconds": seconds,
            "rounds": rounds}


def execute_race(job: dict) -> dict:
    """Build each kernel and verify it as `execute_job` does, then time all of them in turn
    on the same inputs, each into its own outputs (measure.time_interleaved). The result's
    `results` holds one measurement per kernel, in order; a kernel that fails to build or
    verify gets its failure there and is not timed."""

    op = parse(job["op_text"], job["op_file"])
    check_memory(op, job["sizes"])
    inputs, reference = _reference(job, op)
    results, calls, flops = [], [], []
    for raw in job["sources"]:
        src = KernelSource(**raw)
        result, call = _built_and_verified(src, op, inputs, reference)
        results.append(result)
        if call is not None:
            calls.append((result, call))
            flops.append(src.meta.get("flops", 0))
    timings = time_interleaved([call for _, call in calls], seconds=job["seconds"],
                               rounds=job["rounds"]) if calls else []
    for (result, _), timing, work in zip(calls, timings, flops):
        result.update(_timed(timing, work))
    return {"status": "ok", "results": results}


def _execute_emulated(src: KernelSource, op, sizes: dict, seed: int) -> dict:
    """Build `src` for its foreign CPU, run it under the emulator on seeded random inputs and
    compare with the reference; never timed (the result's reason says so)."""

    try:
        kernel = EmulatedKernel(src, op, sizes)
    except (BuildError, ToolchainMissing) as exc:
        return {"status": "build_error", "reason": str(exc)}
    inputs = random_inputs(op, sizes, seed=seed)
    reference = evaluate_all(op, inputs)
    try:
        outputs = kernel.run(inputs)
    except EmulationError as exc:
        return {"status": "crash", "reason": str(exc)}
    verdict = compare(outputs, reference, int(src.meta.get("reduction_length", 1)))
    result = {"status": "ok" if verdict.ok else "mismatch", "max_abs_err": verdict.max_abs_err,
              "max_rel_err": verdict.max_rel_err, "atol": verdict.atol, "where": verdict.where,
              "emulated": src.meta["cross"]["target"],
              "reason": EMULATED_NOTE if verdict.ok else
              (f"wrong result under emulation at {verdict.where}: max abs err "
               f"{verdict.max_abs_err:.3g} (tolerance {verdict.atol:.3g})")}
    return result
