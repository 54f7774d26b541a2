"""The sandwich figure: the functions table beside one function's callers (above it) and its
callees (below it), as speedscope draws its sandwich view."""

from __future__ import annotations

import plotly.graph_objects as go

from profilers.figures.charts import _layout, icicle_trace
from profilers.flame import FlameNode
from profilers.sandwich import FrameKey, callees, callers, function_table

TABLE_ROWS = 25  # the heaviest functions by self cost; the dropdown lists every one


def sandwich_figure(tree: FlameNode, key: FrameKey, title: str = "Sandwich") -> go.Figure:
    """Functions by self cost (left); for `key`, its callers above and its callees below."""
    rows = function_table(tree)[:TABLE_ROWS]
    seconds = tree.unit == "seconds"
    scale, unit = (1e3, "ms") if seconds else (1.0, tree.unit)
    cell = (lambda v: f"{v * scale:,.3f}") if seconds else (lambda v: f"{v:,.4g}")
    share = (lambda v: f"{v / tree.total * 100:.1f}%") if tree.total else (lambda v: "-")
    highlight = ["#fde0dd" if r.key == key else "white" for r in rows]
    # stacked, full width: the table on top, then the callers (the function at their foot)
    # and the callees (the function at their head), so the function sits between the two
    table_top = 1.0 - min(0.36, 0.06 + 0.03 * len(rows))
    table = go.Table(
        domain=dict(x=[0.0, 1.0], y=[table_top, 1.0]), columnwidth=[260, 70, 60, 70, 60],
        header=dict(values=["function", "self", "self %", "total", "total %"], align="left",
                    fill_color="#eef2f7"),
        cells=dict(values=[[r.label[:70] for r in rows], [cell(r.self_cost) for r in rows],
                           [share(r.self_cost) for r in rows], [cell(r.total) for r in rows],
                           [share(r.total) for r in rows]],
                   align="left", fill_color=[highlight] * 5, height=22))
    middle = (table_top - 0.04) / 2
    fig = go.Figure([table,
                     icicle_trace(callers(tree, key), root_at_bottom=True,
                                  domain=dict(x=[0.0, 1.0], y=[middle + 0.02, table_top - 0.05])),
                     icicle_trace(callees(tree, key), root_at_bottom=False,
                                  domain=dict(x=[0.0, 1.0], y=[0.0, middle - 0.02]))])
    fig.add_annotation(x=0.0, y=table_top - 0.045, xref="paper", yref="paper", xanchor="left",
                       yanchor="bottom", showarrow=False, text="callers ↑")
    fig.add_annotation(x=0.0, y=middle - 0.015, xref="paper", yref="paper", xanchor="left",
                       yanchor="bottom", showarrow=False, text="callees ↓")
    title = f"{title} · sandwich of {key[0]} (costs in {unit})"
    return _layout(fig, title, height=760)
