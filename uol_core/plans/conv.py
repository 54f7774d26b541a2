"""Recognising a convolution for the C conv template (entry points `conv_plan`, `window_product`,
`window`): the roles of its tensors and indices, its window offsets and strides, from one ODL
statement."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from uol_core.odl.ir import Access, Affine, Binary, DType, Op, Reduce, Stmt, walk
from uol_core.odl.patterns import classify


@dataclass(frozen=True)
class ConvPlan:
    """Roles of a recognised convolution: tensors, index names, window offsets and strides
    (X's row is `stride_y * y + r + off_y`, its column `stride_x * xw + s + off_x`)."""

    x: Access  # the windowed input read
    f: Access  # the filter read
    out: str
    b: str  # batch index
    m: str  # output-channel index
    y: str  # output row index
    xw: str  # output column index
    c: str  # reduced channel index
    r: str  # reduced window row index
    s: str  # reduced window column index
    off_y: int
    off_x: int
    reduce: Reduce
    depthwise: bool = False  # each channel its own plane and filter (c/conv/depthwise.py)
    stride_y: int = 1
    stride_x: int = 1

    @property
    def strided(self) -> bool:
        return self.stride_y != 1 or self.stride_x != 1


def conv_plan(op: Op) -> ConvPlan | None:
    """The ConvPlan of `op`, or None when it is not a plain NCHW convolution (any stride, no
    dilation)."""
    product = window_product(op)
    if product is None:
        return None
    pattern = classify(op)
    roles = pattern.main_statement.contraction
    if pattern.kind != "contraction" or roles is None or not roles.windowed:
        return None
    stmt, red, body = product
    b, m, y, xw = stmt.indices
    windowed = [a for a in (body.lhs, body.rhs) if any(i.pure_symbol is None for i in a.indices)]
    if len(windowed) != 1:
        return None
    x = windowed[0]
    f = body.rhs if x is body.lhs else body.lhs
    if len(x.indices) != 4 or x.tensor == f.tensor or f.pad is not None:
        return None
    if any(i.pure_symbol is None for i in f.indices) or len(f.indices) != 4:
        return None
    xb, xc, xy, xx = x.indices
    if xb.pure_symbol != b or xc.pure_symbol is None:
        return None
    c = xc.pure_symbol
    win = window(xy, xx, y, xw)
    if win is None:
        return None
    (r, off_y, sy), (s, off_x, sx) = win
    if set(red.indices) != {c, r, s} or len({c, r, s}) != 3:
        return None  # depthwise (channel kept) or an unexpected reduction
    f_names = [i.pure_symbol for i in f.indices]
    if sorted(f_names) != sorted([m, c, r, s]) or len({b, m, y, xw}) != 4:
        return None
    return ConvPlan(x, f, stmt.target, b, m, y, xw, c, r, s, off_y, off_x, red,
                    stride_y=sy, stride_x=sx)


def window_product(op: Op) -> tuple[Stmt, Reduce, Binary] | None:
    """(statement, its sum, the sum's body) when `op` is one f32 statement over four indices
    holding one sum of a product of two reads, else None."""
    if len(op.stmts) != 1 or any(d.dtype != DType.f32 for d in op.inputs + op.outputs + op.locals):
        return None
    stmt = op.stmts[0]
    reduces = [n for n in walk(stmt.expr) if isinstance(n, Reduce)]
    if len(reduces) != 1 or reduces[0].op != "sum" or len(stmt.indices) != 4:
        return None
    body = reduces[0].body
    if not (isinstance(body, Binary) and body.op == "mul" and isinstance(body.lhs, Access)
            and isinstance(body.rhs, Access)):
        return None
    return stmt, reduces[0], body


def window(xy: Affine, xx: Affine, y: str, xw: str) -> list[tuple[str, int, int]] | None:
    """The window of X's two spatial reads `sy * y + r + off_y`, `sx * xw + s + off_x`:
    [(r, off_y, sy), (s, off_x, sx)] with positive strides, or None when dilated (2 * r) or
    not of that form."""
    win = []
    for form, free in ((xy, y), (xx, xw)):
        coeffs = dict(form.terms)
        stride = coeffs.get(free)
        if len(coeffs) != 2 or not isinstance(stride, int) or stride < 1:
            return None  # not this spatial index, or a reversed window
        (red_name, coeff), = [(n, k) for n, k in coeffs.items() if n != free]
        if coeff != 1:
            return None  # dilation
        win.append((red_name, form.const, stride))
    return win


def makespan(costs: Iterable[float], threads: int) -> float:
    """The busiest thread's share when work items of these costs go, in order, to the first
    free thread, as the conv drivers' `schedule(dynamic, 1)` hands them out."""
    busy = [0.0] * max(1, int(threads))
    for cost in costs:
        busy[busy.index(min(busy))] += cost
    return max(busy)
