"""One way to get a callable for an op on a backend: compiled C, Triton, or the reference."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch

from uol_core.api import compile as compile_op
from uol_core.backends import AUTO, REFERENCE, backend_choices, get_backend, resolve_name
from uol_core.odl.check import check_op, stmt_extents
from uol_core.odl.derivatives import substitute
from uol_core.odl.ir import Access, Affine, DType, Op, Reduce, Stmt, Var, walk
from uol_core.odl.patterns import classify
from uol_core.runtime.reference import TORCH_DTYPES, evaluate_all

BACKENDS = backend_choices()  # "auto" and every registered backend


@dataclass
class OpRunner:
    """Runs one op on named tensors and returns every output by name.

    `backend` is what was asked; `used` says what actually runs (auto picks the registry's
    backend for the target, C on a CPU, when it can emit the op for these sizes and dtypes,
    else the reference evaluator, and says why in `reason`).
    """

    op: Op
    backend: str = "auto"
    target: str = "host"
    used: dict[tuple, str] = field(default_factory=dict)
    reason: dict[tuple, str] = field(default_factory=dict)
    _kernels: dict[tuple, Callable] = field(default_factory=dict)
    _steps: dict[tuple, Callable] = field(default_factory=dict)  # key -> shapes -> kernel steps

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

    def kernel_steps(self, tensors: Mapping[str, torch.Tensor]) -> list | None:
        """The loaded C kernels that one call runs, in order (None when a step is not C)."""
        key = tuple((n, tuple(t.shape), t.dtype) for n, t in sorted(tensors.items()))
        if key not in self._kernels:
            self._kernels[key] = self._build(key, tensors)
        steps = self._steps.get(key)
        return steps({n: tuple(t.shape) for n, t in tensors.items()}) if steps else None

    def _build(self, key: tuple, tensors: Mapping[str, torch.Tensor]) -> Callable:
        name = resolve_name(self.backend, self.target)
        if name != REFERENCE:
            backend = get_backend(name)
            # an op writing over its inputs runs whole: its checked order of reads and writes
            # holds inside one kernel, not across sub-ops
            splits = getattr(backend, "splits_contractions", False) and not self.op.aliases
            groups = statement_groups(self.op) if splits else []
            if len(groups) > 1 and _all_f32(tensors) and not backend.whole_op(self.op):
                return self._grouped(key, groups)
            try:
                return self._kernel(key, tensors, backend)
            except Exception as err:  # unsupported pattern or dtype: auto falls back, others report
                if self.backend != AUTO:
                    raise
                self.reason[key] = f"{name} backend declined: {err}"
        self.used[key] = REFERENCE
        return lambda ts: evaluate_all(self.op, ts)

    def _kernel(self, key: tuple, tensors: Mapping[str, torch.Tensor], backend) -> Callable:
        dtypes = getattr(backend, "float_dtypes", None)
        allowed = {TORCH_DTYPES[DType(t)] for t in dtypes or ()}
        floats = {d.name for d in self.op.inputs if d.dtype.is_float}
        if dtypes and any(tensors[n].dtype not in allowed for n in floats):
            raise ValueError(f"the {backend.name} backend computes {', '.join(dtypes)} floats only")
        declined = backend.declines(self.op, tensors) if hasattr(backend, "declines") else None
        if declined:  # a dtype the backend takes only for some ops (C: bf16 GEMMs)
            raise ValueError(declined)
        kernel = compile_op(self.op, shapes={n: tuple(t.shape) for n, t in tensors.items()},
                            target=self.target, backend=backend.name)
        _ = kernel.source  # builds now, so an unsupported op is found here, not mid-run
        self.used[key] = backend.name
        outputs = [d.name for d in self.op.outputs]
        if getattr(backend, "native_steps", False):
            self._steps[key] = lambda shapes: [kernel.native_for(shapes)]

        def run(ts: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            result = kernel(**{n: t.contiguous() for n, t in ts.items()})
            return result if isinstance(result, dict) else {outputs[0]: result}

        return run

    def _grouped(self, key: tuple, groups: list[tuple[int, ...]]) -> Callable:
        """Run the op as a sequence of sub-ops: each contraction (with the maps that consume it
        right after) goes to the GEMM template, each run of other statements to one fused
        kernel; a group the C backend declines runs on the reference."""
        runners = [OpRunner(group_op(self.op, g), self.backend, self.target) for g in groups]
        self.used[key] = f"{resolve_name(self.backend, self.target)} (" + " | ".join(
            ",".join(self.op.stmts[i].target for i in g) for g in groups) + ")"
        outputs = [d.name for d in self.op.outputs]
        self._steps[key] = lambda shapes: _group_steps(runners, shapes)

        def run(ts: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            env = dict(ts)
            for runner in runners:
                env.update(runner({d.name: env[d.name] for d in runner.op.inputs}))
            return {name: env[name] for name in outputs}

        return run


def _group_steps(runners: list[OpRunner], shapes: Mapping[str, tuple]) -> list | None:
    """Kernel steps of a grouped op: each group's, with the shapes earlier groups produce."""
    env = dict(shapes)
    steps: list = []
    for runner in runners:
        sub = {d.name: torch.empty(env[d.name], dtype=TORCH_DTYPES[d.dtype], device="meta")
               for d in runner.op.inputs}
        got = runner.kernel_steps(sub)
        if got is None:
            return None
        for native in got:
            env.update({name: shape for name, shape, _ in native.launch_args()})
        steps.extend(got)
    return steps


def _all_f32(tensors: Mapping[str, torch.Tensor]) -> bool:
    return all(t.dtype == torch.float32 for t in tensors.values() if t.is_floating_point())


def whole_op_template(op: Op) -> bool:
    """Whether the C backend has a template for the op as a whole (flash attention), which
    beats splitting it at its contractions."""
    # here, not at the top: this wrapper carries the same name
    from uol_core.backends.c.route import whole_op_template

    return whole_op_template(op)


def statement_groups(op: Op) -> list[tuple[int, ...]]:
    """Statements split at contractions, each group one kernel.

    A contraction and the maps right after it that read it form one group (the GEMM template
    fuses them as an epilogue). Every other statement joins the earliest group of
    non-contraction statements that runs after everything it reads, preferring one that
    already touches its tensors: so the bias gradient `db = sum over rows of g` rides the
    pass that makes `g` instead of costing a kernel launch and a pass of its own."""

    kinds = classify(op).statements
    groups: list[list[int]] = []
    home: dict[str, int] = {}  # tensor -> index of the group that writes it

    def is_contraction(group: list[int]) -> bool:
        return kinds[group[0]].kind == "contraction"

    for index, pattern in enumerate(kinds):
        stmt = op.stmts[index]
        reads = {n.tensor for n in walk(stmt.expr) if isinstance(n, Access)}
        ready = max((home[r] for r in reads if r in home), default=0)
        last = groups[-1] if groups else None
        if pattern.kind == "contraction":
            groups.append([index])
        elif last and is_contraction(last) and pattern.kind == "map" \
                and op.stmts[last[-1]].target in reads:
            last.append(index)
        else:
            eligible = [g for g in range(ready, len(groups)) if not is_contraction(groups[g])]
            touching = [g for g in eligible if reads & _group_tensors(op, groups[g])]
            choice = (touching or eligible or [None])[0]
            if choice is None:
                groups.append([index])
            else:
                groups[choice].append(index)
        home[stmt.target] = next(g for g, members in enumerate(groups) if index in members)
    return [tuple(g) for g in groups]


def _group_tensors(op: Op, group: list[int]) -> set[str]:
    """Tensors a group reads or writes."""
    return {op.stmts[i].target for i in group} | {
        n.tensor for i in group for n in walk(op.stmts[i].expr) if isinstance(n, Access)}


def group_op(op: Op, indices: tuple[int, ...]) -> Op:
    """Statements `indices` of `op` as an op of their own: inputs are what they read from
    outside, outputs what the op returns or later statements read."""
    return _group_op(op, tuple(indices))


@functools.lru_cache(maxsize=512)
def _group_op(op: Op, indices: tuple[int, ...]) -> Op:
    stmts = [op.stmts[i] for i in indices]
    defined = {s.target for s in stmts}
    read = list(dict.fromkeys(n.tensor for s in stmts for n in walk(s.expr)
                              if isinstance(n, Access) and n.tensor not in defined))
    # read outside the group (single assignment: any such reader runs after this group)
    later = {n.tensor for i, s in enumerate(op.stmts) if i not in indices
             for n in walk(s.expr) if isinstance(n, Access)}
    wanted = {d.name for d in op.outputs} | later
    outputs = tuple(op.tensor(s.target) for s in stmts if s.target in wanted) or \
        (op.tensor(stmts[-1].target),)
    inputs = [op.tensor(name) for name in read]
    # Every dimension the group uses must be bound by an input axis: add the parent's inputs
    # that bind the missing ones (db of a conv reads only dY, whose extents are H - R + 1).
    used = {sym for d in (*inputs, *outputs) for f in d.shape for sym in f.symbols}
    used |= {sym for s in stmts for node in walk(s.expr) if isinstance(node, Reduce)
             for _, f in node.extents for sym in f.symbols}
    used |= {sym for s in stmts for _, f in s.extents for sym in f.symbols}
    used |= {node.name for s in stmts for node in walk(s.expr)
             if isinstance(node, Var) and node.name in op.dims}
    bound = {f.pure_symbol for d in inputs for f in d.shape if f.pure_symbol}
    for decl in op.inputs:
        binds = {f.pure_symbol for f in decl.shape if f.pure_symbol} & (used - bound)
        if binds and decl not in inputs:
            inputs.append(decl)
            bound |= binds
    name = f"{op.name}_" + "_".join(s.target for s in stmts)[:40]
    return check_op(Op(name, tuple(inputs), outputs, tuple(_aligned(op, indices))))


def _aligned(op: Op, indices: tuple[int, ...]) -> list[Stmt]:
    """The group's statements, maps after a contraction renamed to its index names.

    Derived ops name each statement's indices afresh (`d_h[h0, h1] = sum[n](..)` then
    `g[m, n] = d_h[m, n] * ..`); the GEMM template fuses an epilogue only over the
    contraction's own index names, so a map over the same extents, position by position, is
    written with those names (a renaming: no value changes)."""
    stmts = [op.stmts[i] for i in indices]
    first = stmts[0]
    if not any(isinstance(n, Reduce) for n in walk(first.expr)):
        return stmts
    first_ext = stmt_extents(op, indices[0]).free
    out = [first]
    for index, stmt in zip(indices[1:], stmts[1:]):
        ext = stmt_extents(op, index).free
        if stmt.indices == first.indices or len(stmt.indices) != len(first.indices) or \
                any(isinstance(n, Reduce) for n in walk(stmt.expr)) or \
                [ext[i] for i in stmt.indices] != [first_ext[i] for i in first.indices]:
            out.append(stmt)
            continue
        mapping = {old: Affine.of(new) for old, new in zip(stmt.indices, first.indices)}
        out.append(Stmt(stmt.target, first.indices, substitute(stmt.expr, mapping), stmt.line,
                        tuple((mapping[n].pure_symbol, e) for n, e in stmt.extents)))
    return out


def output_dtypes(op: Op) -> dict[str, torch.dtype]:
    """Torch dtype of each output."""
    return {d.name: TORCH_DTYPES[d.dtype] for d in op.outputs}
