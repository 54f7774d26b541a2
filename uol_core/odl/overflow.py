"""Index and size arithmetic stays inside the kernels' integer type at the bound sizes.

Kernels compute in machine integers: index expressions (`X[2*i + 1]`, the bounds test of a
`pad()` read), flattened offsets (index x stride), tensor sizes, flattened loop spaces, and
integer values made of indices, sizes and integer literals (`where(j <= i + 1, ...)`,
`sum[j](i * j)`). C kernels and the reference evaluator use int64, the Triton kernels int32.
A value past the range is undefined behaviour in C (gcc may end a loop early and leave an
output half written) and wraps elsewhere, so the backends would give different wrong answers.

With the sizes bound, each such quantity has an interval: an index runs over [0, extent - 1],
a dimension is its size, a literal is itself, and arithmetic combines intervals. A sum is
bounded by the sum of the magnitudes of its terms, so every partial sum, in any order a kernel
computes it, is bounded too. Anything that can leave the range is refused with the line and
column of the expression (IndexOverflowError). Values read from integer tensors are data:
they are not known here, and arithmetic on them is not checked.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass

from uol_core.odl.check import stmt_extents
from uol_core.odl.errors import IndexOverflowError
from uol_core.odl.ir import (
    Access,
    Affine,
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
    walk,
)
from uol_core.odl.literals import INT_RANGES
from uol_core.odl.printer import format_expr

Interval = tuple[int, int]


@dataclass(frozen=True)
class IntegerModel:
    """How a family of kernels computes integers.

    `values`: the largest magnitude of an index value, offset or integer value (the type's
    range). `spaces`: the largest tensor (in bytes when `in_bytes`: C offsets become byte
    addresses) and the largest flattened loop space, below the range by a margin so that a
    loop's last vector step or a Triton block's tail lanes stay inside it."""

    name: str
    values: int
    spaces: int
    spaces_text: str
    in_bytes: bool
    who: str


INT64 = IntegerModel("int64", 2**63 - 1, 2**62, "2**62", True,
                     "C kernels and the reference evaluator compute indices in int64")
INT32 = IntegerModel("int32", 2**31 - 1, 2**31 - 2**16, "2**31 - 2**16", False,
                     "the Triton kernels compute indices in int32; the C backend takes int64")


def check_index_arithmetic(op: Op, sizes: Mapping[str, int], model: IntegerModel = INT64) -> None:
    """Raise IndexOverflowError at the first quantity of `op` that can leave `model`'s range
    at `sizes` (every dimension bound)."""
    _check_once(op, tuple(sorted((k, int(v)) for k, v in sizes.items())), model)


@functools.lru_cache(maxsize=4096)
def _check_once(op: Op, items: tuple[tuple[str, int], ...], model: IntegerModel) -> None:
    checker = _Checker(op, dict(items), model)
    checker.tensors()
    for index in range(len(op.stmts)):
        checker.statement(index)


def magnitude(form: Affine, ranges: Mapping[str, Interval]) -> int:
    """The largest |value| of any partial sum of `form` when each name lies in its range."""
    return abs(form.const) + sum(abs(c) * max(abs(ranges[n][0]), abs(ranges[n][1]))
                                 for n, c in form.terms)


class _Checker:
    """One op at one set of sizes: walks declarations and statements, refusing at the first
    quantity out of range."""

    def __init__(self, op: Op, sizes: dict[str, int], model: IntegerModel) -> None:
        self.op, self.sizes, self.model = op, sizes, model
        self.dims: dict[str, Interval] = {d: (v, v) for d, v in sizes.items()}
        self.line = op.line
        self.reductions: dict[Reduce, dict[str, Affine]] = {}

    def refuse(self, what: str, value: int, loc: tuple[int, int], limit: str) -> None:
        sizes = ", ".join(f"{k}={v}" for k, v in self.sizes.items())
        line, column = loc if loc[0] else (self.line, 1)
        raise IndexOverflowError(
            f"{what} can reach {value:,} with {sizes}, beyond {limit} ({self.model.who})",
            line, column, "use smaller coefficients, offsets or sizes")

    def value_fits(self, what: str, value: int, loc: tuple[int, int]) -> None:
        if value > self.model.values:
            self.refuse(what, value, loc, f"{self.model.name} (largest {self.model.values:,})")

    def space_fits(self, what: str, amount: int, loc: tuple[int, int], unit: str) -> None:
        if amount > self.model.spaces:
            self.refuse(f"{what} ({unit})", amount, loc, f"{self.model.spaces_text} {unit}")

    # ------------------------------------------------------------------ declarations

    def tensors(self) -> None:
        """Each extent's arithmetic and each tensor's size (what offsets range over)."""
        for decl in self.op.inputs + self.op.outputs + self.op.locals:
            count = 1
            for axis, form in enumerate(decl.shape):
                loc = decl.shape_locs[axis] if axis < len(decl.shape_locs) else (decl.line, 1)
                self.value_fits(f"extent {form} of {decl.name}", magnitude(form, self.dims), loc)
                count *= max(form.evaluate(self.sizes), 0)
            loc = decl.shape_locs[0] if decl.shape_locs else (decl.line, 1)
            if self.model.in_bytes:
                self.space_fits(f"{decl.name} of {count:,} elements", count * decl.dtype.itemsize,
                                loc, "bytes")
            else:
                self.space_fits(f"{decl.name}", count, loc, "elements")

    # ------------------------------------------------------------------ statements

    def statement(self, index: int) -> None:
        stmt = self.op.stmts[index]
        extents = stmt_extents(self.op, index)
        self.line, self.reductions = stmt.line, extents.reductions
        env = {name: (0, form.evaluate(self.sizes) - 1) for name, form in extents.free.items()}
        self.value(stmt.expr, env)

    def ranges(self, env: dict[str, Interval]) -> dict[str, Interval]:
        return {**self.dims, **env}

    def access(self, access: Access, env: dict[str, Interval]) -> None:
        """Each index expression, and the flattened offset sum(index x stride) a kernel forms
        from them (a padded read's offset is formed before its lanes are masked)."""
        shape = [max(f.evaluate(self.sizes), 1) for f in self.op.tensor(access.tensor).shape]
        ranges = self.ranges(env)
        offset = 0
        for axis, form in enumerate(access.indices):
            loc = access.index_locs[axis] if axis < len(access.index_locs) else access.loc
            size = magnitude(form, ranges)
            self.value_fits(f"index {form} of {access.tensor}", size, loc)
            offset += size * math.prod(shape[axis + 1:])
        self.value_fits(f"the offset of {access.tensor}[...] (index x stride)", offset, access.loc)

    def fits(self, interval: Interval, node: Expr) -> Interval:
        self.value_fits(f"integer expression `{format_expr(node)}`", max(map(abs, interval)),
                        _first_loc(node))
        return interval

    def value(self, expr: Expr, env: dict[str, Interval]) -> Interval | None:
        """The interval of an integer value made of indices, sizes and literals (checked), or
        None when it is not one (a float, a truth value, a tensor element); sub-expressions are
        checked either way."""
        if isinstance(expr, Const):
            return (int(expr.value), int(expr.value)) if expr.is_int else None
        if isinstance(expr, Var):
            return env[expr.name] if expr.name in env else self.dims[expr.name]
        if isinstance(expr, Access):
            self.access(expr, env)
            return None
        if isinstance(expr, Unary):
            inner = self.value(expr.operand, env)
            if expr.op != "neg" or inner is None:
                return None
            return self.fits((-inner[1], -inner[0]), expr)
        if isinstance(expr, Binary):
            lhs, rhs = self.value(expr.lhs, env), self.value(expr.rhs, env)
            if lhs is None or rhs is None or expr.op not in _ARITHMETIC:
                return None
            return self.fits(_ARITHMETIC[expr.op](lhs, rhs), expr)
        if isinstance(expr, Call):
            return self.call(expr, env)
        if isinstance(expr, Cast):
            return _cast(self.value(expr.operand, env), expr.dtype)
        if isinstance(expr, Reduce):
            return self.reduce(expr, env)
        if isinstance(expr, Scan):
            body = self.value(expr.body, env)
            if body is None:
                return None
            count = env[expr.index][1] + 1
            return self.fits(_accumulate(_SCAN_AS_REDUCE[expr.op], body, count), expr)
        return None

    def call(self, expr: Call, env: dict[str, Interval]) -> Interval | None:
        args = [self.value(arg, env) for arg in expr.args]
        if expr.fn == "where":
            args = args[1:]
        if expr.fn not in ("where", "max", "min") or None in args:
            return None  # math functions compute in floating point
        lows, highs = [a[0] for a in args], [a[1] for a in args]
        if expr.fn == "where":
            return (min(lows), max(highs))
        pick = max if expr.fn == "max" else min
        return (pick(lows), pick(highs))

    def reduce(self, expr: Reduce, env: dict[str, Interval]) -> Interval | None:
        """The flattened loop space (the Triton kernels flatten a reduction's indices into one
        counter), then the accumulated value of an integer body."""
        extents = self.reductions.get(expr, {})
        inner = dict(env)
        count = 1
        for name, form in extents.items():
            self.value_fits(f"extent {form} of {expr.op}[{name}]", magnitude(form, self.dims),
                            expr.loc)
            extent = form.evaluate(self.sizes)
            inner[name] = (0, extent - 1)
            count *= max(extent, 0)
        self.space_fits(f"{expr.op}[{', '.join(expr.indices)}] over {count:,} iterations", count,
                        expr.loc, "iterations")
        body = self.value(expr.body, inner)
        if body is None or expr.op == "mean":  # a mean accumulates in floating point
            return None
        return self.fits(_accumulate(expr.op, body, count), expr)


def _add(a: Interval, b: Interval) -> Interval:
    return (a[0] + b[0], a[1] + b[1])


def _sub(a: Interval, b: Interval) -> Interval:
    return (a[0] - b[1], a[1] - b[0])


def _mul(a: Interval, b: Interval) -> Interval:
    products = [x * y for x in a for y in b]
    return (min(products), max(products))


_ARITHMETIC = {"add": _add, "sub": _sub, "mul": _mul}
_SCAN_AS_REDUCE = {"cumsum": "sum", "cumprod": "prod", "cummax": "max"}
_BEYOND = 2**64  # stands for any magnitude past every model's range


def _accumulate(op: str, body: Interval, count: int) -> Interval:
    """Bounds of every partial result of `count` terms in `body` combined by `op` (the
    accumulator starts at the operation's identity)."""
    low, high = body
    if op == "sum":
        return (min(0, count * low), max(0, count * high))
    if op == "prod":
        largest = max(abs(low), abs(high))
        if largest <= 1:
            return (-1 if low < 0 else 0, 1)
        power = largest ** count if count * largest.bit_length() <= 80 else _BEYOND
        return (-power if low < 0 else 0, power)
    return body  # max, min: a value of the body


def _cast(inner: Interval | None, dtype: DType) -> Interval | None:
    """An integer cast keeps an interval that fits the type (else the wrapped value is
    anywhere in the type's range); float and bool casts leave integer arithmetic."""
    if inner is None or dtype not in INT_RANGES:
        return None
    low, high = INT_RANGES[dtype]
    return inner if low <= inner[0] and inner[1] <= high else (low, high)


def _first_loc(expr: Expr) -> tuple[int, int]:
    """Where the text wrote the first located part of an expression, (0, 0) when nowhere."""
    for node in walk(expr):
        loc = getattr(node, "loc", None)
        if isinstance(loc, tuple) and len(loc) == 2 and loc[0]:
            return loc
    return (0, 0)

