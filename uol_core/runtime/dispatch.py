"""One way to get a callable for an op on a backend: compiled C, Triton, or the reference."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch

from uol_core.odl.check import check_op
from uol_core.odl.ir import Access, Op, walk
from uol_core.runtime.reference import TORCH_DTYPES, evaluate_all

BACKENDS = ("auto", "c", "triton", "reference")


@dataclass
class OpRunner:
    """Runs one op on named tensors and returns every output by name.

    `backend` is what was asked; `used` says what actually runs (auto picks C when the C
    backend can emit the op for these sizes and dtypes, else the reference evaluator, and
    says why in `reason`).
    """

    op: Op
    backend: str = "auto"
    target: str = "host"
    used: dict[tuple, str] = field(default_factory=dict)
    reason: dict[tuple, str] = field(default_factory=dict)
    _kernels: dict[tuple, Callable] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend '{self.backend}'; choose one of {', '.join(BACKENDS)}")

    def __call__(self, tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        key = tuple((n, tuple(t.shape), t.dtype) for n, t in sorted(tensors.items()))
        if key not in self._kernels:
            self._kernels[key] = self._build(key, tensors)
        return self._kernels[key](tensors)

    def backend_for(self, tensors: Mapping[str, torch.Tensor]) -> str:
        """The backend that runs (or would run) for these tensors."""
        key = tuple((n, tuple(t.shape), t.dtype) for n, t in sorted(tensors.items()))
        if key not in self._kernels:
            self._kernels[key] = self._build(key, tensors)
        return self.used[key]

    def _build(self, key: tuple, tensors: Mapping[str, torch.Tensor]) -> Callable:
        if self.backend in ("c", "auto"):
            try:
                return self._c_kernel(key, tensors)
            except Exception as err:  # unsupported pattern or dtype: auto falls back, c reports
                if self.backend == "c":
                    raise
                self.reason[key] = f"C backend declined: {err}"
            if len(self.op.stmts) > 1 and _all_f32(tensors):
                return self._per_statement(key)
        if self.backend == "triton":
            return self._triton_kernel(key)
        self.used[key] = "reference"
        return lambda ts: evaluate_all(self.op, ts)

    def _c_kernel(self, key: tuple, tensors: Mapping[str, torch.Tensor]) -> Callable:
        from uol_core.api import compile as compile_op

        floats = {d.name for d in self.op.inputs if d.dtype.is_float}
        if any(tensors[n].dtype != torch.float32 for n in floats):
            raise ValueError("the C backend computes float32 only")
        kernel = compile_op(self.op, shapes={n: tuple(t.shape) for n, t in tensors.items()},
                            target=self.target, backend="c")
        _ = kernel.source  # builds now, so an unsupported op is found here, not mid-run
        self.used[key] = "c"
        outputs = [d.name for d in self.op.outputs]

        def run(ts: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            result = kernel(**{n: t.contiguous() for n, t in ts.items()})
            return result if isinstance(result, dict) else {outputs[0]: result}

        return run

    def _per_statement(self, key: tuple) -> Callable:
        """Compile each statement the C backend accepts on its own (the contractions of a
        derived backward op, say) and evaluate the others with the reference."""
        kernels: dict[tuple, Callable | None] = {}

        def hook(index: int, env: dict[str, torch.Tensor], sizes: dict[str, int]):
            cache_key = (index, tuple(sorted(sizes.items())))
            if cache_key not in kernels:
                try:
                    stmt_op = statement_op(self.op, index)
                    runner = OpRunner(stmt_op, "c", self.target)
                    runner.backend_for({d.name: env[d.name] for d in stmt_op.inputs})
                    kernels[cache_key] = runner
                except Exception:  # this statement stays with the reference
                    kernels[cache_key] = None
            runner = kernels[cache_key]
            if runner is None:
                return None
            feed = {d.name: env[d.name] for d in runner.op.inputs}
            return runner(feed)[runner.op.outputs[0].name]

        self.used[key] = "c+reference"
        return lambda ts: evaluate_all(self.op, ts, statement_hook=hook)

    def _triton_kernel(self, key: tuple) -> Callable:
        from uol_core.backends.triton import emit
        from uol_core.runtime.triton_runner import run_triton

        self.used[key] = "triton"
        source = emit(self.op, {}, None)
        return lambda ts: run_triton(source, self.op, dict(ts))


def _all_f32(tensors: Mapping[str, torch.Tensor]) -> bool:
    return all(t.dtype == torch.float32 for t in tensors.values() if t.is_floating_point())


def statement_op(op: Op, index: int) -> Op:
    """Statement `index` of `op` as an op of its own: inputs are the tensors it reads."""
    return _statement_op(op, index)


@functools.lru_cache(maxsize=512)
def _statement_op(op: Op, index: int) -> Op:
    stmt = op.stmts[index]
    read = list(dict.fromkeys(n.tensor for n in walk(stmt.expr) if isinstance(n, Access)))
    inputs = tuple(op.tensor(name) for name in read)
    target = op.tensor(stmt.target)
    return check_op(Op(f"{op.name}_{stmt.target}", inputs, (target,), (stmt,)))


def output_dtypes(op: Op) -> dict[str, torch.dtype]:
    """Torch dtype of each output."""
    return {d.name: TORCH_DTYPES[d.dtype] for d in op.outputs}
