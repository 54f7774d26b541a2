"""Depthwise convolutions on the conv template's direct path (entry points `depthwise_plan`,
`depthwise_config`).

    Y[b, m, y, x] = epi(sum[r, s](X[b, m, y + r + o1, x + s + o2] * F[m, 0, r, s]), reads)

Each channel is a convolution of one input plane with one filter: the direct path of
c_conv_tiles.py with one channel reduced (CDIM = 1) and one filter row per tile (MR = 1), work
items (image, channel, block of output rows). Its micro-kernel keeps NV vectors of output pixels
(the platform file's `conv_depthwise` tile) in registers over the R x S window. The generic loop
nests accumulated each output row in memory instead: a load and a store per vector and tap, and
a chain of R x S dependent updates through the store buffer.
"""

from __future__ import annotations

from collections.abc import Mapping

from uol_core.backends.c_conv_plan import ConvPlan, window, window_product
from uol_core.backends.c_platforms import platform
from uol_core.odl.ir import Op

DEPTHWISE_CHANNEL = "dw_c"  # the plan's reduced channel: extent 1, not an index of the source


def depthwise_plan(op: Op) -> ConvPlan | None:
    """The plan of a stride-1 NCHW depthwise convolution (one statement: a window sum of X's
    own channel times that channel's filter, any epilogue), or None."""
    product = window_product(op)
    if product is None:
        return None
    stmt, red, body = product
    windowed = [a for a in (body.lhs, body.rhs) if any(len(i.terms) > 1 for i in a.indices)]
    if len(windowed) != 1 or len(set(stmt.indices)) != 4 or DEPTHWISE_CHANNEL in op.dims:
        return None
    x = windowed[0]
    f = body.rhs if x is body.lhs else body.lhs
    b, m, y, xw = stmt.indices
    if len(x.indices) != 4 or x.tensor == f.tensor or f.pad is not None:
        return None
    if x.indices[0].pure_symbol != b or x.indices[1].pure_symbol != m:
        return None  # X's channel is the output's: nothing is summed across channels
    win = window(x.indices[2], x.indices[3], y, xw)
    if win is None:
        return None
    (r, off_y), (s, off_x) = win
    if set(red.indices) != {r, s} or r == s:
        return None
    # F[m, 0, r, s]: each of m, r, s once, every other index the constant 0
    names = [i.pure_symbol for i in f.indices if i.terms]
    if sorted(names) != sorted([m, r, s]) or any(not i.terms and i.const != 0 for i in f.indices):
        return None
    return ConvPlan(x, f, stmt.target, b, m, y, xw, DEPTHWISE_CHANNEL, r, s, off_y, off_x, red,
                    depthwise=True)


def depthwise_config(isa: str, cfg: Mapping, target, oh: int, vpr: int) -> dict:
    """The direct path's knobs for a depthwise plan (`oh` output rows of `vpr` vectors each),
    where the config leaves them open: one filter row (mr 1); a whole plane per work item
    (chunk = oh: a channel's plane is a few KiB, and a block of RB rows copies R - 1 extra
    rows, twice the block at RB = 6 for a 7x7 window); and the vector count `nv` between the
    FMA chains that hide the FMA latency (the HFL's fma_latency_cycles x fma_units) and the
    platform file's `conv_depthwise` register bound that leaves the fewest idle vectors in a
    plane's last tile (56 vectors: 8, not 12, which would compute 4 of its last 12 twice)."""
    _, most = platform(isa).tiles["conv_depthwise"]
    chains = int(target.fma_latency_cycles or 1) * int(target.fma_units or 1)
    rows = min(oh, int(cfg.get("chunk") or oh))
    nvec = rows * vpr
    fewest = min(chains, most)
    nv = min(range(fewest, most + 1), key=lambda n: (-(-nvec // n) * n, -n))
    return {**cfg, "mr": 1, "nv": int(cfg.get("nv") or nv), "chunk": rows}
