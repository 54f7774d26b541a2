"""The scan plan: an op that is one running reduction along its only index.

`Y[i] = cumsum[i](body)` (or cumprod, cummax) over one index, the whole statement the scan
of a reduction-free float body. A template decides from the plan and the sizes whether a
parallel scan pays (the C backend's two-pass blocked scan needs enough elements per thread);
every other op keeps the generic paths' sequential scan.
"""

from __future__ import annotations

from dataclasses import dataclass

from uol_core.odl.ir import Op, Reduce, Scan, Stmt, walk


@dataclass(frozen=True)
class ScanPlan:
    """The one statement, its running reduction and the index it runs along."""

    stmt: Stmt
    scan: Scan
    index: str


def scan_plan(op: Op) -> ScanPlan | None:
    """The plan of a one-statement, one-index op whose expression is a scan of a
    reduction-free body over float tensors; None for any other op."""
    if len(op.stmts) != 1 or len(op.stmts[0].indices) != 1:
        return None
    stmt = op.stmts[0]
    expr = stmt.expr
    if not isinstance(expr, Scan) or any(isinstance(n, (Reduce, Scan)) for n in walk(expr.body)):
        return None
    if not op.tensor(stmt.target).dtype.is_float or any(not d.dtype.is_float for d in op.inputs):
        return None
    return ScanPlan(stmt, expr, stmt.indices[0])
