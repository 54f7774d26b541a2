"""Python API: `uol_core.compile(op, shapes=..., target=..., config=...)` -> a callable kernel.

In-process and fast: the kernel is a gcc-built .so called through ctypes on torch data
pointers (no copies). The worker-process path (isolation) is for the tuner and the IDE.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import torch

from uol_core.acg.config import TileConfig, lanes, parse_config, resolve_target
from uol_core.acg.cost_model import CostModel
from uol_core.acg.lower import lower_contraction
from uol_core.acg.space import build_space
from uol_core.backends.base import KernelSource
from uol_core.odl.ir import Op
from uol_core.runtime.native import NativeKernel
from uol_core.runtime.shapes import ShapeError, bind_sizes, shape_of

DEFAULT_TUNE_BUDGET = 8


def load_any(op_or_path) -> Op:
    """An Op from an Op, a path to an .odl file, or a library operator name."""
    from uol_core.odl import parse
    from uol_core.ops import load_op

    if isinstance(op_or_path, Op):
        return op_or_path
    text = str(op_or_path)
    path = Path(text)
    if text.endswith(".odl") or path.is_file():
        if not path.is_file():
            raise FileNotFoundError(f"no ODL file '{text}'")
        return parse(path.read_text(), filename=path.name)
    return load_op(text)


def memory_budget_bytes() -> int:
    """Bytes the tensors of one kernel may use: $UOL_MEM_BUDGET_MB, else a quarter of RAM."""
    if os.environ.get("UOL_MEM_BUDGET_MB"):
        return int(float(os.environ["UOL_MEM_BUDGET_MB"]) * 2**20)
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4


def check_memory(op: Op, sizes: Mapping[str, int]) -> None:
    """Raise ShapeError when verifying the op (its tensors and the reference evaluator's
    intermediates) would exceed the memory budget."""
    from uol_core.runtime.peak_memory import peak_bytes

    total = peak_bytes(op, sizes)
    budget = memory_budget_bytes()
    if total > budget:
        raise ShapeError(f"{op.name} at {dict(sizes)} needs {total / 2**20:.0f} MiB (tensors and "
                         f"the reference's intermediates), over the budget of "
                         f"{budget / 2**20:.0f} MiB (set UOL_MEM_BUDGET_MB)")


class CompiledKernel:
    """A kernel for one op, target and config; call it with tensors by input name."""

    def __init__(self, op: Op, shapes, target, backend: str, config):
        if backend != "c":
            raise ValueError(f"backend '{backend}' is not available here; use backend='c'")
        self.op, self.target, self.backend = op, resolve_target(target), backend
        self._config_request = config
        self._built: dict[tuple, tuple] = {}
        self._by_shapes: dict[tuple, dict[str, int]] = {}
        self._fast: dict[tuple, tuple] = {}  # shapes -> (source, native kernel, output shapes)
        self.sizes: dict[str, int] | None = None
        if shapes:
            self._specialise(bind_sizes(op, shapes))

    def _specialise(self, sizes: dict[str, int]):
        key = tuple(sorted(sizes.items()))
        if key in self._built:
            self.sizes = sizes
            return self._built[key]
        if key not in self._built:
            from uol_core.backends.c import emit
            from uol_core.runtime.build import build

            check_memory(self.op, sizes)
            cfg, space, model = choose_config(self.op, sizes, self.target, self._config_request)
            src = emit(self.op, cfg, self.target, sizes)
            if isinstance(cfg, dict):  # non-GEMM kernels take any dtype (issue 5)
                from uol_core.backends.c_native import CKernel
                native = CKernel(src, self.op, sizes)
            else:
                path = build(src)
                shapes = {n: shape_of(self.op, n, sizes) for n in src.meta["args"]}
                native = NativeKernel(path, src.entry, src.meta["args"], shapes)
            self._built[key] = (cfg, src, native, space, model)
        self.sizes = sizes
        return self._built[key]

    def _current(self):
        if self.sizes is None:
            raise ShapeError(f"{self.op.name} has no shapes yet: pass shapes= to compile or call "
                             "it once with tensors")
        return self._specialise(self.sizes)

    @property
    def config(self) -> dict:
        cfg = self._current()[0]
        return dict(cfg) if isinstance(cfg, dict) else cfg.to_dict()

    @property
    def kernel_source(self) -> KernelSource:
        return self._current()[1]

    @property
    def source(self) -> str:
        return self._current()[1].text

    def explain(self, measured: dict | None = None):
        """Why this kernel looks as it does (binding constraints, roofline, HFL facts, picture)."""
        from uol_core.acg.explain import explain
        from uol_core.acg.tuner import recorded
        cfg, src, _, space, model = self._current()
        if model is None:  # non-GEMM kernels: fusion plan, pattern space, byte roofline
            from uol_core.acg.space_patterns import explain_pattern
            return explain_pattern(space, cfg, src, measured)
        rank = None
        if measured is None:
            measured, rank = recorded(self.op, self.sizes, self.target, cfg)
        return explain(space, model, cfg, measured=measured, measured_rank=rank)

    def native_for(self, shapes: Mapping[str, tuple]):
        """The loaded kernel (NativeKernel or CKernel) for these input shapes."""
        return self._specialise(bind_sizes(self.op, dict(shapes)))[2]

    def __call__(self, out=None, **tensors: torch.Tensor):
        """Run on named input tensors; returns the output (or a dict for several outputs)."""
        shapes = tuple((n, tuple(t.shape)) for n, t in tensors.items())
        fast = self._fast.get(shapes)
        if fast is None:  # first call at these shapes: bind sizes, build, remember the outputs
            if set(tensors) != {d.name for d in self.op.inputs}:
                raise ShapeError(f"{self.op.name} takes inputs "
                                 f"{', '.join(d.name for d in self.op.inputs)}")
            sizes = self._by_shapes.get(shapes) or bind_sizes(self.op, dict(shapes))
            self._by_shapes[shapes] = sizes
            _, src, native, _, _ = self._specialise(sizes)
            fast = (src, native, [(n, shape_of(self.op, n, sizes)) for n in src.meta["outputs"]])
            self._fast[shapes] = fast
        else:
            self.sizes = self._by_shapes[shapes]  # what _specialise would set, without the sort
        src, native, out_shapes = fast
        if not isinstance(native, NativeKernel):
            outs = native.run_with(tensors, out)
            return outs[src.meta["outputs"][0]] if len(outs) == 1 else outs
        outs = {}
        for name, shape in out_shapes:
            given = out.get(name) if isinstance(out, Mapping) else out
            outs[name] = torch.empty(shape, dtype=torch.float32) if given is None else given
        for n, t in tensors.items():
            if t.dtype != torch.float32:
                _dtype_error(n, t)
        native({**tensors, **outs})
        return outs[out_shapes[0][0]] if len(outs) == 1 else outs


def _dtype_error(name: str, t: torch.Tensor):
    raise ShapeError(f"input {name} must be float32 (got {t.dtype}); convert with .float()")


def choose_config(op: Op, sizes: dict, target, request):
    """The config to build: model top-1, user overrides on top of it, or the tuned best."""
    from uol_core.acg.lower import UnsupportedOp
    try:
        plan = lower_contraction(op, sizes)
    except UnsupportedOp:  # every other pattern: the pattern space (acg/space_patterns.py)
        from uol_core.acg.space_patterns import choose_pattern_config
        cfg, space = choose_pattern_config(op, sizes, target, request)
        return cfg, space, None
    space = build_space(plan, target)
    model = CostModel(plan, target)
    if not space.configs:
        raise ShapeError(f"no legal config for {op.name} at {sizes} on {target.name}")
    best = model.rank(space.configs)[0][0]
    if request is None:
        return best, space, model
    if request == "tuned":
        return tuned_config(op, sizes, target) or best, space, model
    cfg = parse_config(request, best)
    # The space's other constraints only cost speed, so overrides may break them to explore;
    # these two are what the packing and the unrolled k loop rely on (an mc that is not a
    # multiple of mr overran the A panel).
    if cfg.mc % cfg.mr or cfg.kc % cfg.ku:
        raise ValueError(f"mc={cfg.mc} must be a multiple of mr={cfg.mr} and kc={cfg.kc} of "
                         f"ku={cfg.ku} (constraint 'divisibility': A is packed in whole "
                         "mr-row strips, the k loop is unrolled ku times)")
    if cfg.nr % lanes(cfg.isa, target):
        raise ValueError(f"nr={cfg.nr} must be a multiple of the {cfg.isa} vector "
                         f"({lanes(cfg.isa, target)} lanes)")
    if cfg.isa not in space.domains["isa"] and cfg.isa != "vecext":
        raise ValueError(f"isa={cfg.isa} is not available on target {target.name} "
                         f"(usable: {', '.join(space.domains['isa'])}, vecext)")
    return cfg, space, model


def tuned_config(op: Op, sizes: dict, target) -> TileConfig | None:
    """The best recorded config, tuning with a small budget when none is recorded."""
    from uol_core.acg.config import parse_config as parse
    from uol_core.acg.tuner import TuningSession

    session = TuningSession(op, sizes, target)
    try:
        row = session.db.best(session.key)
        if row is None:
            result = session.tune(budget=DEFAULT_TUNE_BUDGET)
            return result.best
        return parse(row["config"], TileConfig())
    finally:
        session.close()


def compile(op_or_path, shapes: Mapping | None = None, target="host", backend: str = "c",
            config=None) -> CompiledKernel:
    """Compile an ODL op (object, path or library name) into a callable kernel."""
    return CompiledKernel(load_any(op_or_path), shapes, target, backend, config)
