"""Reads of part of an axis: where an index runs over fewer (or more) elements than the axis
it indexes.

ODL gives each index one extent (docs/odl.md, "Extents"): the extent of the axes it indexes
alone, or the extent written for it (`Y: f32[R, C]` on the left, `sum[c: C](...)`), which may
be smaller than an axis it reads. `mx[r] = max[c](X[r, c])` with `X: f32[R, C + 999]` reduces
over all C + 999 columns, whatever the output's width. A kernel template that derives its
loop counts and row strides from one tensor's shape is right only where every read covers
its axes exactly; the templates' plans (plans/) ask `prefix_reads` and leave any other op
to the generic paths, which take each index's extent from the checker.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from uol_core.odl.check import stmt_extents
from uol_core.odl.ir import Access, Affine, Expr, Op, Reduce, children


@dataclass(frozen=True)
class PrefixRead:
    """One axis of one read whose index runs over `extent` elements of an axis of `axis_extent`."""

    statement: int
    access: Access
    axis: int
    extent: Affine
    axis_extent: Affine

    def describe(self) -> str:
        return (f"{self.access.tensor} axis {self.axis} has extent {self.axis_extent} but is read "
                f"over {self.extent} (line {self.access.loc[0]})")


@functools.lru_cache(maxsize=1024)
def prefix_reads(op: Op) -> tuple[PrefixRead, ...]:
    """Every (read, axis) of a checked op indexed by a plain index name whose extent is not
    the axis's own extent (a prefix read, or a padded read past the end)."""
    found: list[PrefixRead] = []
    for index in range(len(op.stmts)):
        extents = stmt_extents(op, index)
        _visit(op, index, op.stmts[index].expr, dict(extents.free), extents.reductions, found)
    return tuple(found)


def _visit(op: Op, index: int, expr: Expr, env: dict[str, Affine],
           reductions: dict[Reduce, dict[str, Affine]], found: list[PrefixRead]) -> None:
    if isinstance(expr, Access):
        shape = op.tensor(expr.tensor).shape
        for axis, form in enumerate(expr.indices):
            name = form.pure_symbol
            if name in env and env[name] != shape[axis]:
                found.append(PrefixRead(index, expr, axis, env[name], shape[axis]))
        return
    if isinstance(expr, Reduce):  # its indices shadow names bound outside it
        env = {**env, **reductions.get(expr, {})}
    for child in children(expr):
        _visit(op, index, child, env, reductions, found)
