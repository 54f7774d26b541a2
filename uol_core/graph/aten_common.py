"""What the ATen mapping rules share: scalar arguments as ODL text, constants, and the
elementwise rule that picks the form (flat or nd) its operands already have."""

from __future__ import annotations

import torch
from torch import fx

from uol_core.graph import aten_map as A
from uol_core.graph.aten_map import Unmapped
from uol_core.graph.export_import import ExportImporter


def number_text(value) -> str:
    """A scalar argument as ODL number text (Unmapped for anything else)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Unmapped(f"argument {value!r} is not a number")
    return repr(float(value))


def elementwise(imp: ExportImporter, n: fx.Node, expr: str, operands: dict[str, fx.Node]) -> None:
    """`n` = expr over tensor operands (broadcast), in the form its operands already have."""
    out = imp.shape(n)
    flat_ok = len(out) >= 2 and all(flat_broadcasts(imp.shape(a), out) for a in operands.values())
    live = [a for a in operands.values() if a.name not in imp.consts]
    if flat_ok and (not live or all("flat" in imp.forms[a.name] for a in live)
                    or not all("nd" in imp.forms[a.name] for a in live)):
        form = "flat"
    else:
        form = "nd"
    shape_of = (lambda s: ExportImporter.flat_shape(s)) if form == "flat" else (lambda s: s)
    shapes = {k: shape_of(imp.shape(a)) for k, a in operands.items()}
    text = A.elementwise(f"ew_{n.name}", expr, shape_of(out), shapes)
    imp.odl(n, text, {k: imp.tensor(a, form) for k, a in operands.items()}, form)


def flat_broadcasts(shape: tuple[int, ...], out: tuple[int, ...]) -> bool:
    padded = (1,) * (len(out) - len(shape)) + tuple(shape)
    lead_ok = padded[:-1] == out[:-1] or all(s == 1 for s in padded[:-1])
    return lead_ok and padded[-1] in (out[-1], 1)


def constant(imp: ExportImporter, n, what: str) -> torch.Tensor | None:
    """The value of a parameter or folded constant (None for an absent argument)."""
    if n is None:
        return None
    if n.name not in imp.consts:
        raise Unmapped(f"the {what} is computed at run time, not a parameter")
    return imp.consts[n.name].float()
