"""Debugger figures from a kernel trace: per-tensor access heatmaps and masked-lane ratios per line."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from profilers.figures.charts import PALETTE

MAX_CELLS = 65536  # a bigger tensor is shown through its first cells (the browser stays quick)
MAX_TICKS = 10  # tick labels per axis, at a whole-number step
GAP_UP_TO = 64  # cells per row up to which cells get a visible gap (wider rows would vanish)


def as_grid(counts: np.ndarray) -> np.ndarray:
    """2-D view of any tensor, cut to MAX_CELLS: a 1-D tensor (or scalar) is one row, element i
    in column i; N-D folds its leading dims into rows."""
    a = np.asarray(counts)
    if a.ndim <= 1:
        return a.reshape(1, -1)[:, :MAX_CELLS]
    a = a.reshape(-1, a.shape[-1])[:, :MAX_CELLS]
    return a[:max(1, MAX_CELLS // max(a.shape[1], 1))]


def integer_ticks(length: int) -> dict:
    """Axis settings that label whole cells only, at most MAX_TICKS of them (1, 2, 5, 10, ...):
    an axis of two rows must not read 0, 0.5, 1."""
    step, factors = 1, itertools.cycle((2, 2.5, 2))
    while length / step > MAX_TICKS:
        step = round(step * next(factors))
    return dict(tickmode="linear", tick0=0, dtick=step)


def access_heatmap(loads: np.ndarray, stores: np.ndarray, tensor: str, shape: Sequence[int],
                   oob_offsets: Mapping[str, Sequence[int]] | None = None,
                   title: str = "") -> go.Figure:
    """Two panels, loads and stores, of per-element access counts; masked-off elements stay blank.

    `oob_offsets` maps a kind (load, store, atomic) to its out-of-bounds element offsets; each is
    marked in the panel of its kind. A 1-D tensor is drawn as one row indexed by element."""
    from plotly.subplots import make_subplots

    one_dim = len(shape) <= 1
    grids = [as_grid(loads), as_grid(stores)]
    rows, cols = grids[0].shape
    fig = make_subplots(rows=1, cols=2, subplot_titles=["loads", "stores"], horizontal_spacing=0.08)
    top = max(1, int(max(g.max() if g.size else 0 for g in grids)))
    gap = 1 if cols <= GAP_UP_TO else 0
    where = "element %{x}" if one_dim else "row %{y}, col %{x}"
    for i, grid in enumerate(grids, 1):
        # zero counts as NaN: an element no active lane touched shows as empty (masked / unused)
        z = np.where(grid > 0, grid, np.nan)
        fig.add_trace(go.Heatmap(z=z, zmin=0, zmax=top, colorscale="Blues" if i == 1 else "Greens",
                                 showscale=i == 2, xgap=gap, ygap=gap,
                                 hovertemplate=where + ": %{z} access(es)<extra></extra>"), 1, i)
    marked_x, marked_y = [], []
    for kind, offsets in (oob_offsets or {}).items():
        if not offsets:
            continue
        panel = 1 if kind == "load" else 2  # an atomic writes, so it joins the stores
        # an offset past the tensor lands right of its end (1-D) or below the last row (N-D)
        xs = list(offsets) if one_dim else [o % cols for o in offsets]
        ys = [0] * len(offsets) if one_dim else [min(o // cols, rows) for o in offsets]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name=f"out-of-bounds {kind}",
                                 marker=dict(symbol="x", size=10, color="#d62728"),
                                 hovertemplate=f"OOB {kind}, offset "
                                               + ("%{x}" if one_dim else "(col %{x}, row %{y})")
                                               + "<extra></extra>"), 1, panel)
        marked_x, marked_y = marked_x + xs, marked_y + ys
    # both panels span the whole tensor and every mark, so cells line up and a panel with
    # nothing drawn still shows the tensor's extent
    x_lo, x_hi = min([0, *marked_x]) - 0.5, max([cols - 1, *marked_x]) + 0.5
    y_lo, y_hi = min([0, *marked_y]) - 0.5, max([rows - 1, *marked_y]) + 0.5
    for i in (1, 2):
        fig.update_xaxes(title="element" if one_dim else "column", range=[x_lo, x_hi],
                         row=1, col=i, **integer_ticks(int(x_hi - x_lo)))
        if one_dim:
            fig.update_yaxes(showticklabels=False, showgrid=False, zeroline=False,
                             range=[0.5, -0.5], row=1, col=i)
        else:
            fig.update_yaxes(range=[y_hi, y_lo], title="row" if i == 1 else None, row=1, col=i,
                             **integer_ticks(int(y_hi - y_lo)))
    shape_txt = "x".join(str(s) for s in shape) or "scalar"
    shown = rows * cols
    cut = f" (first {shown} of {int(np.prod(shape))} elements)" if shown < np.prod(shape) else ""
    fig.update_layout(title=(title or f"{tensor} [{shape_txt}]: accesses per element") + cut,
                      template="plotly_white",
                      height=220 if one_dim else max(260, min(560, 160 + 14 * rows)),
                      margin=dict(l=50, r=20, t=60, b=40), showlegend=bool(marked_x))
    return fig


def mask_ratio_bars(rows: Sequence[Mapping], title: str = "Lanes per load/store line") -> go.Figure:
    """Active vs masked-off lanes of every load/store source line (stacked)."""
    labels = [f"L{r['line']} {r['kind']} {r.get('tensor') or '?'}" for r in rows]
    fig = go.Figure([
        go.Bar(y=labels, x=[r["lanes"] - r["masked"] for r in rows], orientation="h",
               name="active", marker_color=PALETTE[0]),
        go.Bar(y=labels, x=[r["masked"] for r in rows], orientation="h", name="masked off",
               marker_color="#c7ccd6", customdata=[[r["masked_ratio"], r["source"]] for r in rows],
               hovertemplate="%{customdata[0]:.0%} masked<br>%{customdata[1]}<extra></extra>"),
    ])
    fig.update_layout(barmode="stack", title=title, template="plotly_white",
                      height=max(200, 80 + 28 * len(rows)), margin=dict(l=140, r=20, t=40, b=30),
                      xaxis_title="lanes", yaxis=dict(autorange="reversed"))
    return fig
