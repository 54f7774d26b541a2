"""Operator-graph figures: the layered graph with its boxes filled by measured time, per-group
bars against the reference evaluator, and the run beside the deployment runtimes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import networkx as nx
import plotly.graph_objects as go
from plotly.colors import sample_colorscale

from profilers.figures.charts import PALETTE, WIDTH
from profilers.figures.graph_layout import FONT_PX, Layout, layered_layout

GROUP_COLOURS = ("#2457c5", "#1b7f3b", "#b3261e", "#c88c00", "#7a3cb4", "#008c96")
# light to mid orange only: the labels are dark text on the fill and stay readable on the hottest
TIME_SCALE = [[0.0, "#ffffcc"], [0.5, "#fed976"], [1.0, "#fd8d3c"]]
MONOSPACE = "DejaVu Sans Mono, Menlo, Consolas, monospace"  # the layout counts 0.6 em a glyph
HIT_STEP = 14  # pixels between the click targets across a box
MIN_WIDTH = 420  # room for the title over a narrow graph


def operator_graph(g: nx.DiGraph, times_ms: Mapping[str, float] | None = None,
                   groups: Mapping[str, str] | None = None, labels: Mapping[str, str] | None = None,
                   selected: str | None = None, title: str = "Operator graph") -> go.Figure:
    """The graph in layers, top to bottom (graph_layout), one pixel per unit so the labels
    inside the boxes keep the widths the layout gave them: box fill by measured time, box
    border by fused group (a dashed outline around a group of several nodes). `labels` are
    hover texts; a box shows its node's name. Wider or taller than its panel, it scrolls."""
    layout = layered_layout(g)
    times = dict(times_ms or {})
    groups = dict(groups or {})
    labels = dict(labels or {})
    fig = go.Figure(_edge_trace(layout))
    colour_of = _group_colours(groups, layout.boxes)
    top = max(times.values(), default=0.0) or 1.0
    for node, box in layout.boxes.items():
        t = times.get(node)
        fill = sample_colorscale(TIME_SCALE, min(1.0, t / top))[0] if t is not None else "#f3f5f9"
        fig.add_shape(type="rect", x0=box.x - box.width / 2, x1=box.x + box.width / 2,
                      y0=box.y - box.height / 2, y1=box.y + box.height / 2, layer="below",
                      fillcolor=fill, line=dict(width=3 if node == selected else 1.5,
                                                color="#111" if node == selected
                                                else colour_of.get(node, "#8a93a3")))
    _outline_groups(fig, layout, groups, colour_of)
    fig.add_traces(_node_traces(layout, times, groups, labels))
    if times:  # the colour key of the box fills
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", showlegend=False,
                                 hoverinfo="skip", marker=dict(
                                     colorscale=TIME_SCALE, cmin=0, cmax=top, color=[0],
                                     showscale=True, colorbar=dict(title="ms", thickness=12))))
    margin = dict(l=12, r=70 if times else 12, t=48, b=12)
    # the axes span as many units as the plot area has pixels (a narrow graph gets room to
    # its right for the title): the labels are as wide as the layout counted
    plot_width = max(MIN_WIDTH - margin["l"] - margin["r"], layout.width + 8)
    fig.update_xaxes(range=[-4, plot_width - 4], visible=False)
    fig.update_yaxes(range=[layout.height + 4, -4], visible=False)
    fig.update_layout(title=dict(text=title, x=0, xanchor="left", font=dict(size=14)),
                      template="plotly_white", clickmode="event", showlegend=False,
                      width=plot_width + margin["l"] + margin["r"],
                      height=layout.height + 8 + margin["t"] + margin["b"], margin=margin,
                      hoverlabel=dict(align="left"))
    return fig


def _edge_trace(layout: Layout) -> go.Scatter:
    """Every edge as one polyline (its bends where it passes layers), ending in an arrow head."""
    xs: list = []
    ys: list = []
    for _u, _v, points in layout.edges:
        xs += [p[0] for p in points] + [None]
        ys += [p[1] for p in points] + [None]
    return go.Scatter(x=xs, y=ys, mode="lines+markers", hoverinfo="skip", showlegend=False,
                      line=dict(width=1.2, color="#9aa3b2"),
                      marker=dict(symbol="arrow", angleref="previous", size=7, color="#9aa3b2",
                                  opacity=[1 if i + 1 < len(xs) and xs[i + 1] is None else 0
                                           for i in range(len(xs))]))


def _node_traces(layout: Layout, times: Mapping[str, float], groups: Mapping[str, str],
                 labels: Mapping[str, str]) -> list[go.Scatter]:
    """The boxes' labels (one point at each centre) and their click targets (a point every
    HIT_STEP pixels across each box, so a click anywhere on it picks the node). Two traces:
    a trace mixing empty and non-empty texts loses labels when plotly updates it in place."""
    hover = ("<b>%{customdata[0]}</b> %{customdata[1]}<br>fused group %{customdata[3]}<br>"
             "%{customdata[2]:.3f} ms (-1: not run)<br>click: open its fused group in the "
             "Studio<extra></extra>")
    centre: dict[str, list] = {"x": [], "y": [], "text": [], "data": []}
    across: dict[str, list] = {"x": [], "y": [], "data": []}
    for node, box in layout.boxes.items():
        t = times.get(node)
        row = [node, labels.get(node, ""), t if t is not None else -1, groups.get(node, node)]
        centre["x"].append(box.x)
        centre["y"].append(box.y)
        centre["text"].append(node)
        centre["data"].append(row)
        half = int((box.width / 2 - 4) // HIT_STEP)
        for k in (s * i for i in range(1, half + 1) for s in (-1, 1)):
            across["x"].append(box.x + k * HIT_STEP)
            across["y"].append(box.y)
            across["data"].append(row)
    target = dict(size=HIT_STEP, symbol="square", color="rgba(0,0,0,0)")
    return [go.Scatter(x=across["x"], y=across["y"], mode="markers", customdata=across["data"],
                       marker=target, hovertemplate=hover, showlegend=False),
            go.Scatter(x=centre["x"], y=centre["y"], mode="markers+text", text=centre["text"],
                       textposition="middle center", customdata=centre["data"], marker=target,
                       textfont=dict(family=MONOSPACE, size=FONT_PX, color="#1d2330"),
                       hovertemplate=hover, showlegend=False)]


def _group_colours(groups: Mapping[str, str], boxes: Mapping) -> dict[str, str]:
    """Border colour per node: its fused group's colour for groups of several nodes."""
    members: dict[str, list[str]] = {}
    for node, group in groups.items():
        if node in boxes:
            members.setdefault(group, []).append(node)
    fused = [ns for ns in members.values() if len(ns) > 1]
    return {n: GROUP_COLOURS[i % len(GROUP_COLOURS)] for i, ns in enumerate(fused) for n in ns}


def _outline_groups(fig: go.Figure, layout: Layout, groups: Mapping[str, str],
                    colour_of: Mapping[str, str]) -> None:
    """A dashed outline around the boxes of every group of more than one node (one kernel)."""
    members: dict[str, list[str]] = {}
    for node, group in groups.items():
        if node in colour_of:
            members.setdefault(group, []).append(node)
    for ns in members.values():
        bs = [layout.boxes[n] for n in ns]
        fig.add_shape(type="rect", layer="below", line=dict(color=colour_of[ns[0]], width=1.5,
                                                            dash="dash"),
                      x0=min(b.x - b.width / 2 for b in bs) - 4,
                      x1=max(b.x + b.width / 2 for b in bs) + 4,
                      y0=min(b.y - b.height / 2 for b in bs) - 4,
                      y1=max(b.y + b.height / 2 for b in bs) + 4)


def node_time_bars(rows: Sequence[Mapping],
                   title: str = "Per fused group: UOL vs the reference evaluator<br><sub>"
                                "baseline: the reference evaluator, not torch eager</sub>"
                   ) -> go.Figure:
    """Grouped bars: each group's kernel time beside the same nodes run one by one in the
    reference evaluator (ODL interpreted with torch ops), ms. Not torch's own kernels: the
    whole-graph time against the torch module is the report's `total_ms` line."""
    names = [r["group"] for r in rows]
    warm = [r.get("warm_ms") for r in rows]
    fig = go.Figure([
        go.Bar(x=names, y=[r.get("ms") or 0 for r in rows], name="UOL kernel, in the model",
               marker_color=PALETTE[0],
               customdata=[[r.get("engine", ""), r.get("speedup") or 0] for r in rows],
               hovertemplate="%{x}: %{y:.3f} ms (%{customdata[0]})<br>%{customdata[1]:.2f}x "
                             "vs the reference evaluator<extra></extra>"),
        # the same kernel repeated on its own: the gap to the bar before is what running
        # after the other kernels costs it (its data and filter no longer in cache)
        *([go.Bar(x=names, y=[w or 0 for w in warm], name="same kernel repeated, caches warm",
                  marker_color=PALETTE[2],
                  hovertemplate="%{x}: %{y:.3f} ms repeated on its own<extra></extra>")]
          if any(warm) else []),
        go.Bar(x=names, y=[r.get("reference_ms") or 0 for r in rows],
               name="reference evaluator (baseline)", marker_color=PALETTE[1],
               hovertemplate="%{x}: %{y:.3f} ms, nodes one by one in the reference evaluator"
                             "<extra></extra>"),
    ])
    # the title on two short lines at the top, the legend under it and over the plot: nothing
    # cut or covered in a half-width panel, whatever room the groups' names take below
    # many groups' names stand upright under the bars: room for them, not taken from the bars
    names_px = 7 * max((len(n) for n in names), default=0) if len(names) > 8 else 0
    fig.update_layout(barmode="group", template="plotly_white", height=420 + names_px,
                      width=WIDTH,
                      title=dict(text=title, x=0, xanchor="left"),
                      margin=dict(l=60, r=20, t=124, b=80), yaxis_title="ms",
                      legend=dict(orientation="h", x=0, y=1.02, yanchor="bottom"))
    fig.update_xaxes(automargin=True)
    values = [v for r in rows for v in (r.get("ms"), r.get("warm_ms"), r.get("reference_ms")) if v]
    if values and max(values) > 30 * min(values):  # a kernel 300x under the reference: both bars seen
        fig.update_yaxes(type="log", title="ms (log)")
    return fig


PEER_LABELS = {"uol": "UOL", "eager": "torch eager", "compile": "torch.compile",
               "onnxruntime": "ONNX Runtime", "openvino": "OpenVINO"}


def peer_bars(rows: Sequence[Mapping], baseline: str = "eager",
              title: str = "ms per call beside the deployment runtimes") -> go.Figure:
    """Horizontal bars: each contender's median ms (UOL first, in the accent colour), the
    baseline named in its label; a contender without a time (not available, wrong result) is
    left out here and keeps its row with the reason in the table beside the chart."""
    timed = [r for r in rows if r.get("ms")]
    names = [PEER_LABELS.get(r["contender"], r["contender"])
             + (" (baseline)" if r["contender"] == baseline else "") for r in timed]
    colours = [PALETTE[0] if r["contender"] == "uol" else "#9aa3b2" for r in timed]
    fig = go.Figure(go.Bar(
        y=names, x=[r["ms"] for r in timed], orientation="h", marker_color=colours,
        text=[f"{r['ms']:.2f} ms" for r in timed], textposition="auto",
        hovertemplate="%{y}: %{x:.3f} ms<extra></extra>"))
    fig.update_layout(title=title, template="plotly_white", width=WIDTH,
                      height=90 + 42 * max(1, len(timed)), xaxis_title="ms (median, calls alternated)",
                      margin=dict(l=150, r=20, t=50, b=50), yaxis=dict(autorange="reversed"))
    return fig
