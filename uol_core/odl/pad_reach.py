"""Where padded reads (`pad(X[...], v)`) leave their tensor at concrete sizes.

A pad() read may index outside its tensor; the value there is the pad value. Only a kernel
that tests (or buffers) every such axis may take the op: the generic C path and the conv
template's spatial axes do; the GEMM, row, flash and scan templates read memory directly.
The routers ask `padded_escapes` and send an op to the generic path when a template cannot
honour an escaping axis.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

from uol_core.odl.check import index_range, stmt_extents
from uol_core.odl.ir import Access, Affine, Op, walk


@dataclass(frozen=True)
class PadEscape:
    """One axis of a padded read that reaches outside its tensor: indices [low, high] vs extent."""

    access: Access
    statement: int
    axis: int
    low: int
    high: int
    extent: int

    def describe(self) -> str:
        return (f"pad({self.access.tensor}[...]) reads axis {self.axis} at [{self.low}, "
                f"{self.high}] but the axis has extent {self.extent}")


def padded_escapes(op: Op, sizes: Mapping[str, int]) -> tuple[PadEscape, ...]:
    """Every (padded read, axis) of `op` whose indices may leave the tensor at `sizes`.

    Conservative: an index name bound in several places (a reduction index shadowing another)
    is taken at its largest extent, so an escape may be reported that never happens, never
    the reverse."""
    return _escapes(op, tuple(sorted((k, int(v)) for k, v in sizes.items())))


@functools.lru_cache(maxsize=1024)
def _escapes(op: Op, items: tuple[tuple[str, int], ...]) -> tuple[PadEscape, ...]:
    sizes = dict(items)
    found: list[PadEscape] = []
    for index, stmt in enumerate(op.stmts):
        padded = [n for n in walk(stmt.expr) if isinstance(n, Access) and n.pad is not None]
        if not padded:
            continue
        extents = stmt_extents(op, index)
        largest: dict[str, int] = {}
        for binding in (extents.free, *extents.reductions.values()):
            for name, form in binding.items():
                largest[name] = max(largest.get(name, 0), form.evaluate(sizes))
        env = {name: Affine.constant(value) for name, value in largest.items()}
        for access in padded:
            shape = [form.evaluate(sizes) for form in op.tensor(access.tensor).shape]
            for axis, form in enumerate(access.indices):
                low, high = index_range(form, {k: v for k, v in env.items() if k in form.symbols})
                low_v, high_v = low.evaluate(sizes), high.evaluate(sizes)
                if low_v < 0 or high_v >= shape[axis]:
                    found.append(PadEscape(access, index, axis, low_v, high_v, shape[axis]))
    return tuple(found)
