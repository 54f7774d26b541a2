"""Python API: `uol_core.compile(op, shapes=..., target=..., backend=..., config=...)` -> a
callable kernel; `run`, `tune` and `explain` for one-shot use.

In-process and fast: a C kernel is a gcc-built .so called through ctypes on torch data
pointers (no copies); a Triton kernel runs on the GPU, or interpreted where there is none.
Every backend is reached through the registry (`uol_core.backends`). The worker-process
path (isolation) is for the tuner and the IDE.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch

from uol_core.acg.config import TileConfig, resolve_target
from uol_core.acg.explain import explain_space
from uol_core.acg.session import open_session, recorded, tuned
from uol_core.acg.space_core import as_mapping
from uol_core.backends import get_backend
from uol_core.backends.base import KernelSource
from uol_core.backends.c.native import CKernel
from uol_core.backends.c.space import explain_pattern
from uol_core.backends.contract import Tuned
from uol_core.odl import parse
from uol_core.odl.ir import Op
from uol_core.odl.shapes import ShapeError, bind_sizes, shape_of
from uol_core.ops import load_op
from uol_core.runtime.native import NativeKernel
from uol_core.runtime.pages import fresh_output

# the memory budget lives with the peak it bounds (runtime, which imports no api): public here
# as before, for the IDE, the remote workers and the graph runtime
from uol_core.runtime.peak_memory import check_memory
from uol_core.runtime.peak_memory import memory_budget_bytes as memory_budget_bytes

# kernels called on their tensors by name in one pass (outputs given): the short call path
NATIVE = (NativeKernel, CKernel)
DEFAULT_TUNE_BUDGET = 8


def looks_like_odl(text: str) -> bool:
    """Whether `text` is ODL source rather than a path or a library name."""
    stripped = text.lstrip()
    return "\n" in stripped or stripped.startswith(("op ", "#"))


def load_any(op_or_path) -> Op:
    """An Op from an Op, ODL text, a path to an .odl file, or a library operator name."""

    if isinstance(op_or_path, Op):
        return op_or_path
    text = str(op_or_path)
    if looks_like_odl(text):
        return parse(text)
    path = Path(text)
    if text.endswith(".odl") or path.is_file():
        if not path.is_file():
            raise FileNotFoundError(f"no ODL file '{text}'")
        return parse(path.read_text(), filename=path.name)
    return load_op(text)


class CompiledKernel:
    """A kernel for one op, target and config; call it with tensors by input name."""

    def __init__(self, op: Op, shapes, target, backend: str, config):
        self.op, self.target = op, resolve_target(target)
        self._backend = get_backend(backend, self.target)
        self.backend = self._backend.name
        self._config_request = config
        self._built: dict[tuple, tuple] = {}
        self._by_shapes: dict[tuple, dict[str, int]] = {}
        self._fast: dict[tuple, tuple] = {}  # shapes -> (source, native kernel, output shapes)
        self.sizes: dict[str, int] | None = None
        if shapes:
            self._specialise(bind_sizes(op, shapes))

    def _specialise(self, sizes: dict[str, int]):
        key = tuple(sorted(sizes.items()))
        if key not in self._built:
            check_memory(self.op, sizes)
            backend = self._backend
            plan = backend.plan(self.op, sizes, self.target)
            choice = backend.choose(plan, as_request(self._config_request, plan, backend.name))
            src = backend.emit(plan, choice.config)
            native = backend.load(src, plan)
            self._built[key] = (choice.config, src, native, choice.space, choice.model)
        self.sizes = sizes
        return self._built[key]

    def _current(self):
        if self.sizes is None:
            raise ShapeError(f"{self.op.name} has no shapes yet: pass shapes= to compile or call "
                             "it once with tensors")
        return self._specialise(self.sizes)

    @property
    def config(self) -> dict:
        return dict(as_mapping(self._current()[0]))

    @property
    def kernel(self):
        """The loaded kernel at the current shapes (NativeKernel, CKernel, a Triton kernel...)."""
        return self._current()[2]

    @property
    def kernel_source(self) -> KernelSource:
        return self._current()[1]

    @property
    def source(self) -> str:
        return self._current()[1].text

    def explain(self, measured: dict | None = None):
        """Why this kernel looks as it does (binding constraints, roofline, HFL facts, picture)."""
        # here, not at the top: this module's own `explain` (below) takes that name
        from uol_core.backends.c.gemm.explain import explain
        cfg, src, _, space, model = self._current()
        if model is None and space.family == "pattern":  # fusion plan, pattern space, bytes
            return explain_pattern(space, cfg, src, measured)
        if model is None:  # any other space: its rules and the op's roofline
            return explain_space(self.op, self.sizes, self.target, space, cfg,
                                 src.meta.get("fusion", ""), measured)
        rank = None
        if measured is None:
            measured, rank = recorded(self.op, self.sizes, self.target, cfg)
        return explain(space, model, cfg, measured=measured, measured_rank=rank)

    def native_for(self, shapes: Mapping[str, tuple]):
        """The loaded kernel (NativeKernel or CKernel) for these input shapes."""
        return self._specialise(bind_sizes(self.op, dict(shapes)))[2]

    def __call__(self, out=None, **tensors: torch.Tensor):
        """Run on named input tensors; returns the output (or a dict for several outputs)."""
        shapes = tuple((n, t.shape) for n, t in tensors.items())  # torch.Size hashes as a tuple
        fast = self._fast.get(shapes)
        if fast is None:  # first call at these shapes: bind sizes, build, remember the outputs
            if set(tensors) != {d.name for d in self.op.inputs}:
                raise ShapeError(f"{self.op.name} takes inputs "
                                 f"{', '.join(d.name for d in self.op.inputs)}")
            sizes = self._by_shapes.get(shapes) or bind_sizes(self.op, dict(shapes))
            self._by_shapes[shapes] = sizes
            _, src, native, _, _ = self._specialise(sizes)
            dtypes = {n: dtype for n, dtype, _ in getattr(native, "_outputs", ())}
            out_shapes = [(n, shape_of(self.op, n, sizes), dtypes.get(n, torch.float32))
                          for n in src.meta["outputs"]]
            fast = (src, native, out_shapes, sizes,
                    isinstance(native, NATIVE) and len(out_shapes) == 1)
            self._fast[shapes] = fast
        # sizes: what _specialise would set, without its sort
        src, native, out_shapes, self.sizes, one_native_output = fast
        if one_native_output and (out is None or isinstance(out, torch.Tensor)):
            # the common call, kept short: a small GEMM's whole call is a few microseconds
            name, shape, dtype = out_shapes[0]
            result = fresh_output(shape, dtype) if out is None else out
            tensors[name] = result
            native(tensors)  # checks every dtype, shape and device
            return result
        if not isinstance(native, NATIVE):
            outs = native.run_with(tensors, out)
            return outs[src.meta["outputs"][0]] if len(outs) == 1 else outs
        outs = {}
        for name, shape, dtype in out_shapes:
            given = out.get(name) if isinstance(out, Mapping) else out
            outs[name] = fresh_output(shape, dtype) if given is None else given
        native({**tensors, **outs})
        return outs[out_shapes[0][0]] if len(outs) == 1 else outs


def choose_config(op: Op, sizes: dict, target, request):
    """The C config to build, its space and cost model (None for non-GEMM kernels): model
    top-1, user overrides on top of it, or the tuned best ('tuned')."""
    backend = get_backend("c")
    plan = backend.plan(op, sizes, target)
    choice = backend.choose(plan, as_request(request, plan, backend.name))
    return choice.config, choice.space, choice.model


def as_request(config, plan, backend: str):
    """A user's config as the backend's request: 'tuned' becomes a `Tuned` lookup over the tuning
    session (which the API may import: it sits above the registry the session asks)."""
    if config != "tuned":
        return config

    def lookup(budget: int):
        return tuned(plan.op, plan.sizes, plan.target, backend, budget)

    return Tuned(lookup)


def tuned_config(op: Op, sizes: dict, target) -> TileConfig | None:
    """The best recorded GEMM config, tuning with a small budget when none is recorded."""
    return tuned(op, sizes, resolve_target(target), "c", DEFAULT_TUNE_BUDGET)


def compile(op_or_path, shapes: Mapping | None = None, target="host", backend: str = "c",
            config=None) -> CompiledKernel:
    """Compile an ODL op (object, ODL text, path or library name) into a callable kernel.

    backend: "c", "triton" (interpreted where there is no GPU), "reference", or "auto"
    (Triton on a GPU target, else C)."""
    return CompiledKernel(load_any(op_or_path), shapes, target, backend, config)


def run(op_or_path, target="host", backend: str = "c", config=None, **tensors: torch.Tensor):
    """Compile for the tensors' shapes and run once: the output (a dict for several)."""
    kernel = compile(op_or_path, {n: tuple(t.shape) for n, t in tensors.items()}, target,
                     backend, config)
    return kernel(**tensors)


def explain(op_or_path, shapes: Mapping, target="host", backend: str = "c", config=None):
    """Why the kernel for these shapes looks as it does (see CompiledKernel.explain)."""
    return compile(op_or_path, shapes, target, backend, config).explain()


def tune(op_or_path, shapes: Mapping, target="host", budget: int = 12,
         seconds: float | None = None, db=None, replay: bool = False, backend: str = "c"):
    """Tune an op's kernel at `shapes` on `backend` (C: the GEMM tuner for contractions it
    lowers, the pattern tuner for the rest; Triton: its own space, verified and, on a GPU,
    timed); every measurement lands in the tuning database."""

    op = load_any(op_or_path)
    session = open_session(op, bind_sizes(op, dict(shapes)), target, backend, db=db,
                           replay=replay)
    try:
        return session.tune(budget=budget, seconds=seconds)
    finally:
        session.close()
