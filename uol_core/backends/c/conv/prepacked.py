"""The filter packed once: the convolution variant whose filter argument already holds the
MR-row panels the micro-kernel reads.

Why: a graph's convolution filters are constant at inference (batch norms folded in), yet the
conv template packs its filter on every call: MPAD / MR panels of KDIM x MR floats, read row by
row from F and written column by column. At batch 1 the late layers of a CNN are small in
pixels and large in filters (a 1x1 conv 320 -> 1280 at 7x7: 49 pixels, 410 K filter floats), so
the packing took 30-55% of such a call on an AVX-512 host (measured per kernel, minimum of 200
calls: 650 -> 270 us, 260 -> 115 us). Packing when the graph is planned removes that copy.

The layout is the one `uol_pack_filter` writes (c/conv/emitter.py): panel p holds output
channels p * MR .. p * MR + MR - 1 (rows past MDIM zero), reduction position q = (c, r, s) in
that order, floats at p * MR * KDIM + q * MR + i. It depends on the filter's shape and roles,
MR and MPAD only: `layout_key` names it.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from uol_core.backends.base import KernelSource
from uol_core.odl.ir import Access, Op, Reduce, walk

ROLE_ORDER = ("m", "c", "r", "s")  # the packed reduction runs over c, then r, then s


def panels_of(source: KernelSource) -> dict | None:
    """The filter panel geometry the conv template recorded in a kernel's meta, or None when
    the kernel is not the conv template's (generic loop nests, another template)."""
    return source.meta.get("filter_panels")


def prepack_refusal(op: Op, source: KernelSource) -> str | None:
    """Why the filter of the conv kernel `source` cannot be packed ahead, or None when it can."""
    panels = panels_of(source)
    if panels is None and "matrix-vector" in source.meta.get("fusion", ""):
        return "one pixel per image: the kernel reads its filter in place (nothing is packed)"
    if panels is None:
        return "not the conv template's kernel (no packed filter)"
    if source.meta.get("cross"):
        return "a kernel built for another architecture runs under emulation"
    name = panels["filter"]
    if name not in {d.name for d in op.inputs}:
        return f"the filter {name} is not an input of the op"
    reads = [n for n in _outside_sum(op) if isinstance(n, Access) and n.tensor == name]
    if reads:
        return f"the epilogue reads the filter {name} as well"
    return None


def _outside_sum(op: Op):
    """Every node of the op's statements that is not inside a sum (the epilogue's reads)."""
    inside = {id(n) for stmt in op.stmts for r in walk(stmt.expr) if isinstance(r, Reduce)
              for n in walk(r.body)}
    return [n for stmt in op.stmts for n in walk(stmt.expr) if id(n) not in inside]


def layout_key(source: KernelSource) -> tuple:
    """What the packed tensor depends on: the filter's roles, MR, MPAD and KDIM."""
    p = panels_of(source) or {}
    return ("conv", tuple(p.get("axes", ())), p.get("mr"), p.get("mpad"), p.get("kdim"))


def packed_numel(source: KernelSource) -> int:
    """Floats of the packed filter: MPAD rows of KDIM."""
    p = panels_of(source)
    return int(p["mpad"]) * int(p["kdim"])


def pack_filter(weight: torch.Tensor, source: KernelSource) -> torch.Tensor:
    """The filter as the op declares it, in the panel layout of the module docstring."""
    p = panels_of(source)
    if p is None:
        raise ValueError(f"{source.op_name}: not a conv template kernel, no filter panels")
    axes: list = list(p["axes"])
    if weight.dim() != len(axes):
        raise ValueError(f"{source.op_name}: the filter has {weight.dim()} axes, the kernel "
                         f"reads {len(axes)}")
    f = weight.detach()
    for d in reversed(range(len(axes))):  # a constant index (a depthwise filter's 0) selects
        if axes[d] is None:
            f = f.select(d, 0)
            del axes[d]
    f = f.permute([axes.index(r) for r in ROLE_ORDER if r in axes])
    mr, mpad, kdim = int(p["mr"]), int(p["mpad"]), int(p["kdim"])
    rows = f.reshape(f.shape[0], -1)
    if rows.shape[1] != kdim:
        raise ValueError(f"{source.op_name}: the filter has {rows.shape[1]} reduction positions "
                         f"per output channel, the kernel reads {kdim}")
    padded = torch.zeros(mpad, kdim, dtype=torch.float32)
    padded[:rows.shape[0]] = rows
    return padded.view(mpad // mr, mr, kdim).transpose(1, 2).contiguous().view(-1)


def emit_prepacked(op: Op, sizes: Mapping[str, int], target, config: Mapping) -> KernelSource:
    """The conv kernel of `op` reading its filter argument as `pack_filter`'s output (same entry
    and arguments)."""
    # a circle: emitter.py imports this module at its top, so this import waits for the call
    from uol_core.backends.c.conv.emitter import emit

    src = emit(op, sizes, target, config, prepacked_filter=True)
    if src is None or not (panels_of(src) or {}).get("prepacked"):
        # (a scalable-vector target's conv packs its own filter: its kernel has no panels)
        raise ValueError(f"{op.name}: the conv template has no prepacked-filter kernel for it")
    return src


__all__ = ["emit_prepacked", "layout_key", "pack_filter", "packed_numel", "panels_of",
           "prepack_refusal"]
