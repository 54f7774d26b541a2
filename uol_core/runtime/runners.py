"""How a tuning session measures a config: a runner turns one config into a result row.

- `WorkerRunner`: the kernel is emitted, then built, verified and timed in the isolated worker
  process (`runtime.worker`), or in any object with its `run(job, timeout_s)` (the Studio's
  queued worker, a remote worker); it also races finalists in turn (`race`);
- `InProcessRunner`: the backend emits and loads the kernel in this process, verifies it
  against the reference evaluator and times it with the kernel's own benchmark (Triton).

A result row has a `status` ('ok' when verified and timed) and, when timed, `median_s` and
`gflops`; the Studio's runner (queued Runs) returns the same shape.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from uol_core.backends.base import KernelSource
from uol_core.odl.printer import format_op
from uol_core.runtime.worker import Worker, make_job, make_race


class WorkerRunner:
    """Configs emitted by `source(cfg)` and measured in a worker; `flops` (the op's work)
    rates a kernel the worker does not rate itself (it knows GEMM FLOPs only)."""

    def __init__(self, source: Callable[[Any], KernelSource], op: Any, sizes: Mapping[str, int],
                 worker: Any = None, seed: int = 0, min_seconds: float = 0.15,
                 timeout_s: float = 120.0, flops: float | None = None) -> None:
        self.source, self.op, self.sizes = source, op, dict(sizes)
        self.worker, self.own_worker = worker, worker is None
        self.seed, self.min_seconds, self.timeout_s, self.flops = seed, min_seconds, timeout_s, flops

    def _worker(self) -> Any:
        if self.worker is None:  # started on the first measurement: a replay starts none
            self.worker = Worker(self.timeout_s)
        return self.worker

    def run(self, cfg: Any) -> dict:
        """Build, verify and time one config in the worker."""
        src = self.source(cfg)
        job = make_job(src, self.op.source or format_op(self.op), f"{self.op.name}.odl",
                       self.sizes, seed=self.seed, min_seconds=self.min_seconds)
        result = self._worker().run(job, self.timeout_s)
        if self.flops is not None and result.get("status") == "ok" and result.get("median_s") \
                and not result.get("gflops"):
            result["gflops"] = self.flops / result["median_s"] / 1e9
        return result

    def race(self, configs: list, seconds: float, rounds: int) -> dict:
        """Time `configs` in turn in one worker process (the confirmation round)."""
        job = make_race([self.source(c) for c in configs],
                        self.op.source or format_op(self.op), f"{self.op.name}.odl", self.sizes,
                        seed=self.seed, seconds=seconds, rounds=rounds)
        return self._worker().run(job, self.timeout_s)

    def close(self) -> None:
        if self.own_worker and self.worker is not None:
            self.worker.close()


class InProcessRunner:
    """Configs emitted and loaded by `backend` for `plan`, verified against the reference
    evaluator and timed with the kernel's benchmark in this process. Without a timer (a Triton
    kernel under the interpreter, where a time says nothing about a GPU) a verified config is
    recorded as 'verified' with the reason, never ranked by time."""

    def __init__(self, backend: Any, plan: Any, seed: int = 0, flops: float = 0.0) -> None:
        self.backend, self.plan, self.seed, self.flops = backend, plan, seed, flops
        self._inputs = self._expected = None

    def run(self, cfg: Any) -> dict:
        # the reference evaluator and the comparison are the runtime's: loaded on the first
        # measurement only, as a replay measures nothing
        from uol_core.runtime.inputs import random_inputs
        from uol_core.runtime.reference import evaluate_all
        from uol_core.runtime.verify import compare

        op, sizes = self.plan.op, self.plan.sizes
        if self._inputs is None:
            self._inputs = random_inputs(op, sizes, seed=self.seed)
            self._expected = evaluate_all(op, self._inputs)
        try:
            source = self.backend.emit(self.plan, dict(cfg))
            kernel = self.backend.load(source, self.plan)
            verdict = compare(kernel.run_with(self._inputs), self._expected,
                              int(source.meta.get("reduction_length", 1) or 1))
        except Exception as exc:  # a config that fails to build or run is a result too
            return {"status": "error", "reason": f"{type(exc).__name__}: {exc}"}
        if not verdict.ok:
            return {"status": "wrong", "reason": str(verdict)}
        note = getattr(kernel, "timing_note", "")
        times = [] if note else kernel.bench(self._inputs)
        if not times:
            return {"status": "verified", "reason": f"verified; not timed ({note or 'no timer'})"}
        median = sorted(times)[len(times) // 2]
        return {"status": "ok", "median_s": median,
                "gflops": self.flops / median / 1e9 if self.flops else 1.0 / median}

    def close(self) -> None:
        """Nothing to release: kernels run in this process."""
