"""The reference evaluator: Op IR + torch tensors -> torch tensors (the ground truth for kernels)."""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
import torch.nn.functional as F

from uol_core.odl.check import stmt_extents
from uol_core.odl.ir import (
    Access,
    Binary,
    Call,
    Cast,
    Const,
    DType,
    Expr,
    Op,
    Reduce,
    Scan,
    Unary,
    Var,
)
from uol_core.odl.shapes import ShapeError, bind_sizes, shape_of

# Largest broadcast intermediate the evaluator builds (elements); beyond it we refuse clearly.
MAX_ELEMENTS = 1 << 28

TORCH_DTYPES = {
    DType.f16: torch.float16, DType.bf16: torch.bfloat16, DType.f32: torch.float32,
    DType.f64: torch.float64, DType.i32: torch.int32, DType.i8: torch.int8, DType.bool: torch.bool,
}

# Rule tables: one row per IR operation (autodidax style), shared by every evaluation.
UNARY_RULES = {
    "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
    "tanh": torch.tanh, "sigmoid": torch.sigmoid, "relu": torch.relu, "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu, "abs": torch.abs, "erf": torch.erf, "sin": torch.sin, "cos": torch.cos,
    "floor": torch.floor, "ceil": torch.ceil,
}
BINARY_RULES = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.true_divide,
    "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge, "eq": torch.eq, "ne": torch.ne,
    "and": torch.logical_and, "or": torch.logical_or,
    "pow": torch.pow, "max": torch.maximum, "min": torch.minimum,
}
REDUCE_RULES = {
    "sum": lambda t, dims: t.sum(dim=dims),
    "mean": lambda t, dims: t.mean(dim=dims),
    "prod": lambda t, dims: _prod(t, dims),
    "max": lambda t, dims: t.amax(dim=dims),
    "min": lambda t, dims: t.amin(dim=dims),
}
SCAN_RULES = {
    "cumsum": lambda t, d: torch.cumsum(t, d),
    "cumprod": lambda t, d: torch.cumprod(t, d),
    "cummax": lambda t, d: torch.cummax(t, d).values,
}


def _prod(t: torch.Tensor, dims: list[int]) -> torch.Tensor:
    for d in sorted(dims, reverse=True):
        t = t.prod(dim=d)
    return t


def evaluate(op: Op, **tensors: torch.Tensor) -> torch.Tensor | dict[str, torch.Tensor]:
    """Run the op on torch tensors: the output for a one-output op, else a dict name -> tensor."""
    outs = evaluate_all(op, tensors)
    if len(op.outputs) == 1:
        return outs[op.outputs[0].name]
    return outs


def evaluate_all(op: Op, tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Run the op and return every output by name."""
    missing = [d.name for d in op.inputs if d.name not in tensors]
    if missing:
        raise ShapeError(f"{op.name} needs inputs {', '.join(missing)}")
    extra = [n for n in tensors if n not in {d.name for d in op.inputs}]
    if extra:
        raise ShapeError(f"{op.name} has no input named {', '.join(extra)}")
    sizes = bind_sizes(op, {n: tuple(t.shape) for n, t in tensors.items()})
    compute = _compute_dtype(op)
    env: dict[str, torch.Tensor] = {}
    for decl in op.inputs:
        value = torch.as_tensor(tensors[decl.name])
        env[decl.name] = value.to(compute) if decl.dtype.is_float else value
    for index, stmt in enumerate(op.stmts):
        extents = stmt_extents(op, index)
        free = [extents.free[name].evaluate(sizes) for name in stmt.indices]
        scope = _Scope(list(stmt.indices), free)
        value = _Evaluator(op, env, sizes, extents.reductions, compute).value(stmt.expr, scope)
        value = torch.as_tensor(value)
        target_dtype = TORCH_DTYPES[op.tensor(stmt.target).dtype]
        keep = compute if op.tensor(stmt.target).dtype.is_float else target_dtype
        env[stmt.target] = value.to(keep).expand(*free).contiguous() if free else value.to(keep).reshape(())
    return {d.name: env[d.name].to(TORCH_DTYPES[d.dtype]).reshape(shape_of(op, d.name, sizes))
            for d in op.outputs}


def _compute_dtype(op: Op) -> torch.dtype:
    """f64 if any tensor is f64, else f32: half types are computed in f32 and rounded at the store."""
    types = {d.dtype for d in op.inputs + op.outputs + op.locals}
    return torch.float64 if DType.f64 in types else torch.float32


class _Scope:
    """The axes of the iteration space in effect: names (innermost binding wins) and extents."""

    def __init__(self, names: list[str], extents: list[int]) -> None:
        self.names = names
        self.extents = extents

    def extend(self, names: list[str], extents: list[int]) -> _Scope:
        return _Scope(self.names + names, self.extents + extents)

    def axis(self, name: str) -> int | None:
        for position in range(len(self.names) - 1, -1, -1):
            if self.names[position] == name:
                return position
        return None

    def arange(self, name: str) -> torch.Tensor:
        axis = self.axis(name)
        shape = [1] * len(self.names)
        shape[axis] = self.extents[axis]
        return torch.arange(self.extents[axis]).reshape(shape)


class _Evaluator:
    def __init__(self, op: Op, env: dict[str, torch.Tensor], sizes: dict[str, int],
                 reductions: dict[Reduce, dict], compute: torch.dtype) -> None:
        self.op = op
        self.env = env
        self.sizes = sizes
        self.reductions = reductions
        self.compute = compute

    def value(self, expr: Expr, scope: _Scope) -> torch.Tensor | float:
        if isinstance(expr, Const):
            return int(expr.value) if expr.is_int else expr.value
        if isinstance(expr, Var):
            if scope.axis(expr.name) is not None:
                return scope.arange(expr.name)
            return self.sizes[expr.name]
        if isinstance(expr, Access):
            return self.access(expr, scope)
        if isinstance(expr, Unary):
            value = self.value(expr.operand, scope)
            if expr.op == "neg":
                return -value
            return torch.logical_not(torch.as_tensor(value))
        if isinstance(expr, Binary):
            lhs, rhs = self.value(expr.lhs, scope), self.value(expr.rhs, scope)
            return BINARY_RULES[expr.op](*_tensors(lhs, rhs, self.compute))
        if isinstance(expr, Call):
            return self.call(expr, scope)
        if isinstance(expr, Cast):
            return torch.as_tensor(self.value(expr.operand, scope)).to(TORCH_DTYPES[expr.dtype])
        if isinstance(expr, Reduce):
            return self.reduce(expr, scope)
        if isinstance(expr, Scan):
            body = torch.as_tensor(self.value(expr.body, scope))
            axis = scope.axis(expr.index)
            body = body.reshape(_padded_shape(body, scope))
            shape = list(body.shape)
            shape[axis] = scope.extents[axis]
            body = body.expand(shape)
            return SCAN_RULES[expr.op](_floatify(body, self.compute), axis)
        raise TypeError(f"unknown IR node {type(expr).__name__}")

    def call(self, expr: Call, scope: _Scope) -> torch.Tensor:
        if expr.fn == "where":
            cond, a, b = (self.value(arg, scope) for arg in expr.args)
            a, b = _tensors(a, b, self.compute)
            return torch.where(torch.as_tensor(cond).bool(), a, b)
        args = [self.value(arg, scope) for arg in expr.args]
        if expr.fn in UNARY_RULES:
            return UNARY_RULES[expr.fn](_floatify(torch.as_tensor(args[0]), self.compute))
        return BINARY_RULES[expr.fn](*_tensors(args[0], args[1], self.compute))

    def reduce(self, expr: Reduce, scope: _Scope) -> torch.Tensor:
        extents = self.reductions[expr]
        names = list(expr.indices)
        inner = scope.extend(names, [extents[n].evaluate(self.sizes) for n in names])
        dims = list(range(len(scope.names), len(inner.names)))
        if expr.op == "sum":
            factors = _product_factors(expr.body)
            if len(factors) >= 2:
                return self.contract(factors, inner, len(scope.names))
        body = torch.as_tensor(self.value(expr.body, inner))
        body = body.reshape(_padded_shape(body, inner))
        full = [inner.extents[d] for d in dims]
        body = body.expand(*body.shape[: len(scope.names)], *full)
        _guard(body.shape, "reduction body")
        return REDUCE_RULES[expr.op](_floatify(body, self.compute) if expr.op == "mean" else body, dims)

    def contract(self, factors: list[Expr], inner: _Scope, outer_rank: int) -> torch.Tensor:
        """Sum of a product over the inner axes with einsum, never building the full product."""
        letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
        operands, specs = [], []
        scalar = 1.0
        used: set[int] = set()
        for factor in factors:
            value = self.value(factor, inner)
            if not isinstance(value, torch.Tensor) or value.dim() == 0:
                scalar = scalar * (value.item() if isinstance(value, torch.Tensor) else value)
                continue
            value = _floatify(value.reshape(_padded_shape(value, inner)), self.compute)
            axes = [a for a in range(len(inner.names)) if value.shape[a] != 1]
            operands.append(value.reshape([value.shape[a] for a in axes]))
            specs.append("".join(letters[a] for a in axes))
            used.update(axes)
        out_axes = [a for a in range(outer_rank) if a in used]
        missing_inner = [a for a in range(outer_rank, len(inner.names)) if a not in used]
        result = torch.einsum(",".join(specs) + "->" + "".join(letters[a] for a in out_axes),
                              *operands) if operands else torch.tensor(1.0, dtype=self.compute)
        count = math.prod(inner.extents[a] for a in missing_inner)
        shape = [inner.extents[a] if a in used else 1 for a in range(outer_rank)]
        return result.reshape(shape) * (scalar * count)

    def access(self, expr: Access, scope: _Scope) -> torch.Tensor:
        tensor = self.env[expr.tensor]
        rank = len(scope.names)
        pures = [form.pure_symbol for form in expr.indices]
        axes = [scope.axis(p) if p is not None else None for p in pures]
        if expr.pad is None and all(a is not None for a in axes) and len(set(axes)) == len(axes):
            # A plain permutation of scope axes: a view, no gather.
            order = sorted(range(len(axes)), key=lambda i: axes[i])
            view = tensor.permute(order) if tensor.dim() else tensor
            shape = [1] * rank
            for position, i in enumerate(order):
                extent = scope.extents[axes[i]]
                if tensor.shape[i] > extent:  # a prefix of a longer axis (Y: f32[N - 2] reads X[i])
                    view = view.narrow(position, 0, extent)
                shape[axes[i]] = view.shape[position]
            return view.reshape(shape)
        index_tensors = []
        for form in expr.indices:
            idx = torch.zeros([1] * rank, dtype=torch.long) + form.const
            for name, coeff in form.terms:
                idx = idx + coeff * (scope.arange(name) if scope.axis(name) is not None
                                     else torch.tensor(self.sizes[name]))
            index_tensors.append(idx)
        index_tensors = list(torch.broadcast_tensors(*index_tensors)) if index_tensors else []
        if index_tensors:
            _guard(index_tensors[0].shape, f"gather from {expr.tensor}")
        if expr.pad is None:
            return tensor[tuple(index_tensors)] if index_tensors else tensor
        inside = torch.ones_like(index_tensors[0], dtype=torch.bool)
        clamped = []
        for axis, idx in enumerate(index_tensors):
            inside &= (idx >= 0) & (idx < tensor.shape[axis])
            clamped.append(idx.clamp(0, tensor.shape[axis] - 1))
        values = tensor[tuple(clamped)]
        return torch.where(inside, values, torch.tensor(expr.pad, dtype=values.dtype))


def _product_factors(expr: Expr) -> list[Expr]:
    """Flatten a tree of multiplications into its factors."""
    if isinstance(expr, Binary) and expr.op == "mul":
        return _product_factors(expr.lhs) + _product_factors(expr.rhs)
    return [expr]


def _padded_shape(value: torch.Tensor, scope: _Scope) -> list[int]:
    """Shape of a value seen in a (possibly larger) scope: missing trailing axes have size 1."""
    shape = list(value.shape) if value.dim() else []
    return shape + [1] * (len(scope.names) - len(shape))


def _floatify(value: torch.Tensor, compute: torch.dtype) -> torch.Tensor:
    return value if value.is_floating_point() else value.to(compute)


def _tensors(a, b, compute: torch.dtype):
    """Bring two operands to tensors: Python floats and any int/float mix meet in the compute
    type (a float32 literal would cost f64 ops their precision); ints stay exact."""
    ta, tb = _scalar_tensor(a, compute), _scalar_tensor(b, compute)
    if ta.is_floating_point() != tb.is_floating_point():
        ta, tb = _floatify(ta, compute), _floatify(tb, compute)
    if ta.dtype != tb.dtype and ta.dim() and tb.dim():
        common = torch.promote_types(ta.dtype, tb.dtype)
        ta, tb = ta.to(common), tb.to(common)
    elif ta.dim() == 0 and tb.dim():
        ta = ta.to(tb.dtype)
    elif tb.dim() == 0 and ta.dim():
        tb = tb.to(ta.dtype)
    elif not ta.is_floating_point() and not tb.is_floating_point() and ta.dtype != torch.bool:
        ta, tb = ta.to(compute), tb.to(compute)  # int / int is a true division in ODL
    return ta, tb


def _scalar_tensor(value, compute: torch.dtype) -> torch.Tensor:
    if isinstance(value, float):
        return torch.tensor(value, dtype=compute)
    return torch.as_tensor(value)


def _guard(shape, what: str) -> None:
    count = math.prod(shape)
    if count > MAX_ELEMENTS:
        raise ShapeError(f"the reference evaluator would build {count:,} elements for the {what}, "
                         f"over its limit of {MAX_ELEMENTS:,}: use smaller sizes")
