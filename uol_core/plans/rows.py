"""Row plans: ops computed one row at a time, with every reduction over the row's columns.

`row_split` is the general analysis (any statements sharing their leading row indices, each
reduction over the whole trailing column space): one program per row keeps the row in a tile.
`softmax_rows` recognises the two row ops that have a hand-written three-pass template:
    softmax:      mx[P] = max[c](X[P, c])
                  e[P, c] = exp(X[P, c] - mx[P])          (optionally * or / a constant or scalar)
                  Y[P, c] = e[P, c] / sum[c](e[P, c])
    log-softmax:  mx[P] = max[c](X[P, c])
                  lse[P] = log(sum[c](exp(X[P, c] - mx[P])))
                  Y[P, c] = X[P, c] - mx[P] - lse[P]
The template's rows are X's rows and its reductions run over Y's columns, so it takes only an
op whose every read covers its axes (odl/prefix_reads.py): with `X: f32[R, C + 999]` and
`Y: f32[R, C]` the reductions run over C + 999 columns (docs/odl.md, "Extents") and the
generic path computes it.
"""

from __future__ import annotations

from dataclasses import dataclass

from uol_core.odl.check import stmt_extents
from uol_core.odl.ir import (
    Access,
    Affine,
    Binary,
    Call,
    Const,
    DType,
    Expr,
    Op,
    Reduce,
    Scan,
    Var,
    children,
    walk,
)
from uol_core.odl.prefix_reads import prefix_reads

ROW_REDUCTIONS = ("sum", "mean", "max", "min")


@dataclass(frozen=True)
class RowSplit:
    """Extents of the row indices (one program or loop iteration each) and of the column tile."""

    rows: tuple[Affine, ...]
    cols: tuple[Affine, ...]


def _free(op: Op, i: int) -> list[Affine]:
    ext = stmt_extents(op, i).free
    return [ext[n] for n in op.stmts[i].indices]


def row_split(op: Op) -> RowSplit | None:
    """The row/column split when the whole op fits one fused row kernel, else None."""
    n = len(op.stmts)
    frees = [_free(op, i) for i in range(n)]
    reduces = [[x for x in walk(s.expr) if isinstance(x, Reduce)] for s in op.stmts]
    if any(isinstance(x, Scan) for s in op.stmts for x in walk(s.expr)):
        return None
    with_red = [i for i in range(n) if reduces[i]]
    if not with_red:
        return None
    nr = min(len(frees[i]) for i in with_red)
    rows = frees[with_red[0]][:nr]
    wide = [tuple(f[nr:]) for f in frees if len(f) > nr]
    cols = wide[0] if wide else tuple(stmt_extents(op, with_red[0]).reductions[reduces[with_red[0]][0]].values())
    if not cols or any(f[:nr] != rows or (len(f) > nr and tuple(f[nr:]) != cols) for f in frees):
        return None
    defined = {s.target: len(f) for s, f in zip(op.stmts, frees)}
    for i, stmt in enumerate(op.stmts):
        for node in reduces[i]:
            ext = stmt_extents(op, i).reductions[node]
            if node.op not in ROW_REDUCTIONS or tuple(ext[k] for k in node.indices) != cols:
                return None
            if any(isinstance(x, (Reduce, Scan)) for x in walk(node.body) if x is not node):
                return None
        rnames = stmt.indices[:nr]
        own_cols = stmt.indices[nr:] if len(stmt.indices) > nr else None
        if not _reads_ok(stmt.expr, rnames, own_cols, defined, nr):
            return None
        # A wide statement whose row reduction also reads its own column index needs the
        # output column and the reduced column at once (a 2-D tile): the derived rope
        # gradient `dX[.., x2] = sum[t](where(x2 == 0, dY[.., t] ..))` is one.
        if own_cols and any(set(own_cols) & (_symbols(node.body) - set(node.indices))
                            for node in reduces[i]):
            return None
    return RowSplit(tuple(rows), tuple(cols))


def _symbols(expr) -> set[str]:
    """Index names an expression uses (in reads and as values)."""
    names: set[str] = set()
    for node in walk(expr):
        if isinstance(node, Var):
            names.add(node.name)
        elif isinstance(node, Access):
            names.update(s for f in node.indices for s in f.symbols)
    return names


def _reads_ok(expr, rnames, cnames, defined: dict[str, int], nr: int) -> bool:
    """Reads of earlier statements' tensors must be at this row and the current column lane."""
    if isinstance(expr, Access) and expr.tensor in defined:
        want = [Affine.of(r) for r in rnames]
        if defined[expr.tensor] > nr:
            if cnames is None:
                return False
            want += [Affine.of(c) for c in cnames]
        return expr.pad is None and list(expr.indices) == want
    if isinstance(expr, Reduce):
        return _reads_ok(expr.body, rnames, expr.indices, defined, nr)
    return all(_reads_ok(c, rnames, cnames, defined, nr) for c in children(expr))


@dataclass(frozen=True)
class SoftmaxRows:
    """A recognised row softmax or log-softmax."""

    kind: str  # "softmax" | "log_softmax"
    x: str
    out: str
    rows: tuple[str, ...]  # leading (row) indices of the output
    col: str
    scale: tuple[str, Expr] | None  # ("mul" | "div", the factor: a constant or scalar input)
    dtypes: frozenset[DType]  # element types of every tensor of the op


def _pure(e: Expr, names: tuple[str, ...], tensor: str | None = None) -> bool:
    return (isinstance(e, Access) and e.pad is None
            and tuple(f.pure_symbol for f in e.indices) == tuple(names)
            and (tensor is None or e.tensor == tensor))


def _row_max(op: Op) -> tuple[str, tuple[str, ...], str] | None:
    """(X, row indices, column index) of `mx[P] = max[c](X[P, c])` with X an input."""
    st = op.stmts[0]
    e = st.expr
    if not (isinstance(e, Reduce) and e.op == "max" and len(e.indices) == 1):
        return None
    col = e.indices[0]
    if not _pure(e.body, (*st.indices, col)) or e.body.tensor not in {d.name for d in op.inputs}:
        return None
    return e.body.tensor, st.indices, col


def _shifted(e: Expr, x: str, mx: str, rows: tuple[str, ...], col: str) -> bool:
    """`X[P, c] - mx[P]`."""
    return (isinstance(e, Binary) and e.op == "sub" and _pure(e.lhs, (*rows, col), x)
            and _pure(e.rhs, rows, mx))


def _scale(e: Expr, op: Op) -> tuple[str, Expr] | bool | None:
    """The factor applied to the shifted value: None (none), (op, factor), or False (no match)."""
    if not (isinstance(e, Binary) and e.op in ("mul", "div")):
        return None
    f = e.rhs
    if isinstance(f, Const):
        return e.op, f
    scalars = {d.name for d in op.inputs if not d.shape}
    if isinstance(f, Access) and not f.indices and f.tensor in scalars:
        return e.op, f
    return False


def softmax_rows(op: Op) -> SoftmaxRows | None:
    """The plan when `op` is a row softmax or log-softmax as above (any float type), else None."""
    if len(op.stmts) != 3 or len(op.outputs) != 1 or prefix_reads(op):
        return None
    dtypes = frozenset(d.dtype for d in op.inputs + op.outputs + op.locals)
    if not all(t.is_float for t in dtypes):
        return None
    head = _row_max(op)
    if head is None:
        return None
    x, rows, col = head
    mx, mid, out = op.stmts
    if out.target != op.outputs[0].name or tuple(out.indices) != (*rows, col):
        return None
    if mx.target in {d.name for d in op.outputs} or mid.target in {d.name for d in op.outputs}:
        return None
    # softmax: e = exp(scale(X - mx)); Y = e / sum(e)
    if isinstance(mid.expr, Call) and mid.expr.fn == "exp" and tuple(mid.indices) == (*rows, col):
        arg = mid.expr.args[0]
        scale = _scale(arg, op)
        inner = arg.lhs if scale else arg
        y = out.expr
        if (scale is not False and _shifted(inner, x, mx.target, rows, col)
                and isinstance(y, Binary) and y.op == "div" and _pure(y.lhs, (*rows, col), mid.target)
                and isinstance(y.rhs, Reduce) and y.rhs.op == "sum" and y.rhs.indices == (col,)
                and _pure(y.rhs.body, (*rows, col), mid.target)):
            return SoftmaxRows("softmax", x, out.target, rows, col, scale or None, dtypes)
    # log-softmax: lse = log(sum(exp(X - mx))); Y = X - mx - lse
    e = mid.expr
    if (tuple(mid.indices) == rows and isinstance(e, Call) and e.fn == "log"
            and isinstance(e.args[0], Reduce) and e.args[0].op == "sum" and e.args[0].indices == (col,)
            and isinstance(e.args[0].body, Call) and e.args[0].body.fn == "exp"
            and _shifted(e.args[0].body.args[0], x, mx.target, rows, col)):
        y = out.expr
        if (isinstance(y, Binary) and y.op == "sub" and _shifted(y.lhs, x, mx.target, rows, col)
                and _pure(y.rhs, rows, mid.target)):
            return SoftmaxRows("log_softmax", x, out.target, rows, col, None, dtypes)
    return None
