"""Debugger figures from a kernel trace: per-tensor access heatmaps and masked-lane ratios per line."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from profilers.figures.charts import PALETTE

MAX_CELLS = 65536  # a bigger tensor is shown through its first rows (the browser stays quick)
ROW_1D = 32  # a 1-D tensor wraps at this many elements per row, so blocks line up visibly


def as_grid(counts: np.ndarray) -> np.ndarray:
    """2-D view of any tensor: 1-D wraps into rows of ROW_1D, N-D folds its leading dims into rows."""
    a = np.asarray(counts)
    if a.ndim == 0:
        a = a.reshape(1, 1)
    elif a.ndim == 1:
        width = min(max(a.size, 1), ROW_1D)
        rows = -(-a.size // width)
        a = np.concatenate([a, np.zeros(rows * width - a.size, a.dtype)]).reshape(rows, width)
    elif a.ndim > 2:
        a = a.reshape(-1, a.shape[-1])
    rows = max(1, MAX_CELLS // max(a.shape[1], 1))
    return a[:rows]


def access_heatmap(loads: np.ndarray, stores: np.ndarray, tensor: str, shape: Sequence[int],
                   oob_offsets: Sequence[int] = (), title: str = "") -> go.Figure:
    """Two panels, loads and stores, of per-element access counts; masked-off elements stay blank."""
    from plotly.subplots import make_subplots

    grids = [as_grid(loads), as_grid(stores)]
    cols = grids[0].shape[1]
    fig = make_subplots(rows=1, cols=2, subplot_titles=["loads", "stores"], horizontal_spacing=0.08)
    top = max(1, int(max(g.max() if g.size else 0 for g in grids)))
    for i, grid in enumerate(grids, 1):
        # zero counts as NaN: an element no active lane touched shows as empty (masked / unused)
        z = np.where(grid > 0, grid, np.nan)
        fig.add_trace(go.Heatmap(z=z, zmin=0, zmax=top, colorscale="Blues" if i == 1 else "Greens",
                                 showscale=i == 2, xgap=1, ygap=1,
                                 hovertemplate="row %{y}, col %{x}: %{z} access(es)"
                                               "<extra></extra>"), 1, i)
    if oob_offsets:
        # out-of-bounds offsets fall past the tensor: mark them to the right of the last row
        rows = grids[0].shape[0]
        xs = [o % cols for o in oob_offsets]
        ys = [min(o // cols, rows) for o in oob_offsets]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name="out of bounds",
                                 marker=dict(symbol="x", size=10, color="#d62728"),
                                 hovertemplate="OOB offset (col %{x}, row %{y})<extra></extra>"),
                      1, 1)
    for i in (1, 2):
        fig.update_yaxes(autorange="reversed", title="row" if i == 1 else None, row=1, col=i)
        fig.update_xaxes(title="column", row=1, col=i)
    shape_txt = "x".join(str(s) for s in shape) or "scalar"
    fig.update_layout(title=title or f"{tensor} [{shape_txt}]: accesses per element",
                      template="plotly_white", height=max(260, min(560, 160 + 14 * len(grids[0]))),
                      margin=dict(l=50, r=20, t=60, b=40), showlegend=bool(oob_offsets))
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
