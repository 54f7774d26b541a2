"""Operator-graph figures: a layered DAG coloured and sized by measured time, and time vs eager bars."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import networkx as nx
import plotly.graph_objects as go

from profilers.figures.charts import PALETTE, WIDTH

GROUP_COLOURS = ("#2457c5", "#1b7f3b", "#b3261e", "#c88c00", "#7a3cb4", "#008c96")


def layered_positions(g: nx.DiGraph) -> dict[str, tuple[float, float]]:
    """Left-to-right layers by topological generation (no graphviz needed)."""
    layers = {n: i for i, gen in enumerate(nx.topological_generations(g)) for n in gen}
    h = nx.DiGraph()
    h.add_nodes_from((n, {"layer": layers[n]}) for n in g.nodes)
    pos = nx.multipartite_layout(h, subset_key="layer", align="vertical")
    return {n: (float(x), float(y)) for n, (x, y) in pos.items()}


def operator_graph(g: nx.DiGraph, times_ms: Mapping[str, float] | None = None,
                   groups: Mapping[str, str] | None = None, labels: Mapping[str, str] | None = None,
                   selected: str | None = None, title: str = "Operator graph") -> go.Figure:
    """The graph as layers; node colour and size follow time, fused groups get an outline."""
    pos = layered_positions(g)
    times = dict(times_ms or {})
    groups = dict(groups or {})
    labels = dict(labels or {})
    ex: list = []
    ey: list = []
    for u, v in g.edges:
        ex += [pos[u][0], pos[v][0], None]
        ey += [pos[u][1], pos[v][1], None]
    fig = go.Figure(go.Scatter(x=ex, y=ey, mode="lines", hoverinfo="skip", showlegend=False,
                               line=dict(width=1.2, color="#9aa3b2")))
    # arrow heads: one annotation per edge, short, ending at the consumer's marker
    for u, v in g.edges:
        fig.add_annotation(x=pos[v][0], y=pos[v][1], ax=pos[u][0], ay=pos[u][1], xref="x",
                           yref="y", axref="x", ayref="y", showarrow=True, arrowhead=2,
                           arrowsize=1, arrowwidth=1, arrowcolor="#9aa3b2", standoff=12, text="")
    _outline_groups(fig, pos, groups)
    nodes = list(g.nodes)
    top = max(times.values(), default=0.0) or 1.0
    ms = [times.get(n) for n in nodes]
    fig.add_trace(go.Scatter(
        x=[pos[n][0] for n in nodes], y=[pos[n][1] for n in nodes], mode="markers+text",
        text=nodes, textposition="top center", showlegend=False,
        customdata=[[n, labels.get(n, ""), t if t is not None else -1, groups.get(n, n)]
                    for n, t in zip(nodes, ms, strict=True)],
        hovertemplate=("<b>%{customdata[0]}</b> %{customdata[1]}<br>group %{customdata[3]}"
                       "<br>%{customdata[2]:.3f} ms (-1: not run)<br>click: open in the Studio"
                       "<extra></extra>"),
        marker=dict(
            size=[14 + 26 * ((t or 0.0) / top) ** 0.5 for t in ms],
            color=[t or 0.0 for t in ms], colorscale="YlOrRd", cmin=0, cmax=top,
            showscale=bool(times), colorbar=dict(title="ms", thickness=12),
            line=dict(width=[3 if n == selected else 1 for n in nodes],
                      color=["#111" if n == selected else "#555" for n in nodes]))))
    # a graph of one row (a chain) would otherwise be stretched by the group outlines
    ys = [y for _, y in pos.values()] or [0.0]
    mid, half = (max(ys) + min(ys)) / 2, max((max(ys) - min(ys)) / 2 + 0.2, 0.45)
    fig.update_yaxes(range=[mid - half, mid + half])
    fig.update_layout(title=title, template="plotly_white", height=460, width=None,
                      margin=dict(l=10, r=10, t=40, b=10), clickmode="event",
                      xaxis=dict(visible=False), yaxis=dict(visible=False))
    return fig


def _outline_groups(fig: go.Figure, pos: Mapping, groups: Mapping[str, str]) -> None:
    """A dashed rectangle around every group of more than one node (a fused kernel)."""
    members: dict[str, list[str]] = {}
    for node, group in groups.items():
        if node in pos:
            members.setdefault(group, []).append(node)
    fused = [(g, ns) for g, ns in members.items() if len(ns) > 1]
    for i, (name, ns) in enumerate(fused):
        xs = [pos[n][0] for n in ns]
        ys = [pos[n][1] for n in ns]
        colour = GROUP_COLOURS[i % len(GROUP_COLOURS)]
        fig.add_shape(type="rect", x0=min(xs) - 0.06, x1=max(xs) + 0.06, y0=min(ys) - 0.08,
                      y1=max(ys) + 0.1, line=dict(color=colour, width=2, dash="dash"),
                      fillcolor=colour, opacity=0.08, layer="below")
        fig.add_annotation(x=min(xs) - 0.06, y=max(ys) + 0.1, text=f"fused: {name}",
                           showarrow=False, xanchor="left", yanchor="bottom",
                           font=dict(size=10, color=colour))


def node_time_bars(rows: Sequence[Mapping],
                   title: str = "Per-group time vs the reference evaluator (nodes one by one)"
                   ) -> go.Figure:
    """Grouped bars: each group's kernel time beside the same nodes run one by one in the
    reference evaluator (ODL interpreted with torch ops), ms. Not torch's own kernels: the
    whole-graph time against the torch module is the report's `total_ms` line."""
    names = [r["group"] for r in rows]
    fig = go.Figure([
        go.Bar(x=names, y=[r.get("ms") or 0 for r in rows], name="UOL", marker_color=PALETTE[0],
               customdata=[[r.get("engine", ""), r.get("speedup") or 0] for r in rows],
               hovertemplate="%{x}: %{y:.3f} ms (%{customdata[0]})<br>%{customdata[1]:.2f}x "
                             "vs the reference<extra></extra>"),
        go.Bar(x=names, y=[r.get("reference_ms") or 0 for r in rows], name="reference evaluator",
               marker_color=PALETTE[1]),
    ])
    fig.update_layout(barmode="group", title=title, template="plotly_white", height=340,
                      width=WIDTH, margin=dict(l=60, r=20, t=50, b=80), yaxis_title="ms")
    values = [v for r in rows for v in (r.get("ms"), r.get("reference_ms")) if v]
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
