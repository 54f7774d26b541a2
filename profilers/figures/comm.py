"""Communication figures: topology with link heat, algorithm curves with crossovers, measured vs predicted."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import networkx as nx
import plotly.graph_objects as go

from profilers.figures.charts import PALETTE, WIDTH

KIND_STYLE = {"gpu": ("circle", "#2457c5", 13), "nic": ("square", "#1b7f3b", 10),
              "switch": ("diamond", "#555", 14)}
HEAT_BINS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
HEAT_COLOURS = ("#c7ccd6", "#fed976", "#feb24c", "#fd8d3c", "#e31a1c", "#800026")


def topology_positions(g: nx.Graph) -> dict[str, tuple[float, float]]:
    """GPUs at the bottom, switches layered above by hop distance; switchless fabrics on a circle."""
    gpus = [n for n, d in g.nodes(data=True) if d.get("kind") == "gpu"]
    if len(gpus) == g.number_of_nodes():
        pos = nx.circular_layout(sorted(gpus, key=lambda n: g.nodes[n].get("order", 0)))
        return {n: (float(x), float(y)) for n, (x, y) in pos.items()}
    dist = nx.multi_source_dijkstra_path_length(g, gpus, weight=None) if gpus else {}
    h = nx.Graph()
    for n in sorted(g.nodes, key=lambda n: g.nodes[n].get("order", 0)):
        h.add_node(n, layer=dist.get(n, 0))
    pos = nx.multipartite_layout(h, subset_key="layer", align="horizontal")
    return {n: (float(x), float(y)) for n, (x, y) in pos.items()}


def _bin(u: float) -> int:
    return next((i for i, edge in enumerate(HEAT_BINS) if u <= edge), len(HEAT_BINS) - 1)


def topology_figure(g: nx.Graph, utilisation: Mapping[str, float] | None = None,
                    failed: Sequence[str] = (), title: str = "Topology") -> go.Figure:
    """Nodes by kind; links coloured by utilisation (key 'u->v' or 'v->u', max of both directions).

    Failed elements (link 'u,v' or a node name) are drawn red and dashed. Clicking a node or a
    link's midpoint gives customdata ['node', name] or ['link', 'u,v'].
    """
    pos = topology_positions(g)
    util = dict(utilisation or {})
    failed_set = set(failed)
    fig = go.Figure()
    # one trace per heat bin, not per link: plotly stays fast on a few hundred links
    bins: dict[int, tuple[list, list]] = {}
    mids: list[tuple[float, float, str, float, str]] = []
    for u, v, d in g.edges(data=True):
        load = max(util.get(f"{u}->{v}", 0.0), util.get(f"{v}->{u}", 0.0))
        xs, ys = bins.setdefault(_bin(load) if util else 0, ([], []))
        xs += [pos[u][0], pos[v][0], None]
        ys += [pos[u][1], pos[v][1], None]
        bw = d.get("bandwidth", 0) / 1e9
        mids.append(((pos[u][0] + pos[v][0]) / 2, (pos[u][1] + pos[v][1]) / 2, f"{u},{v}", load,
                     f"{u} - {v}<br>{d.get('preset', '')} {bw:.1f} GB/s<br>utilisation {load:.0%}"))
    for b, (xs, ys) in sorted(bins.items()):
        lo = HEAT_BINS[b - 1] if b else 0.0
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", hoverinfo="skip",
                                 name=f"links ≤{HEAT_BINS[b]:.0%}" if util else "links",
                                 line=dict(width=1.5 + 3 * lo, color=HEAT_COLOURS[b])))
    for item in failed_set:
        if "," in item:
            u, v = item.split(",", 1)
            if u in pos and v in pos:
                fig.add_trace(go.Scatter(x=[pos[u][0], pos[v][0]], y=[pos[u][1], pos[v][1]],
                                         mode="lines", name=f"failed {u}-{v}", hoverinfo="skip",
                                         line=dict(width=3, color="#d62728", dash="dot")))
    fig.add_trace(go.Scatter(
        x=[m[0] for m in mids], y=[m[1] for m in mids], mode="markers", name="link (click: fail)",
        marker=dict(size=8, color=[m[3] for m in mids], colorscale="YlOrRd", cmin=0, cmax=1,
                    opacity=0.5, showscale=bool(util),
                    colorbar=dict(title="link util", thickness=10, x=1.02)),
        customdata=[["link", m[2]] for m in mids], text=[m[4] for m in mids],
        hovertemplate="%{text}<extra></extra>", showlegend=False))
    for kind, (symbol, colour, size) in KIND_STYLE.items():
        ns = [n for n, d in g.nodes(data=True) if d.get("kind", "switch") == kind]
        if not ns:
            continue
        fig.add_trace(go.Scatter(
            x=[pos[n][0] for n in ns], y=[pos[n][1] for n in ns], mode="markers", name=kind,
            marker=dict(symbol=symbol, size=size,
                        color=["#d62728" if n in failed_set else colour for n in ns],
                        line=dict(width=1, color="#fff")),
            customdata=[["node", n] for n in ns], text=ns,
            hovertemplate="%{text} (" + kind + ")<br>click: fail it<extra></extra>"))
    fig.update_layout(title=title, template="plotly_white", height=440, clickmode="event",
                      margin=dict(l=10, r=10, t=40, b=10), legend=dict(orientation="h", y=-0.02),
                      xaxis=dict(visible=False), yaxis=dict(visible=False))
    return fig


def algorithm_curves(sizes: Sequence[float], times_s: Mapping[str, Sequence[float]],
                     crossovers: Sequence[Mapping] = (), marker: tuple[float, float] | None = None,
                     title: str = "Algorithms over message size") -> go.Figure:
    """Time (µs) of every algorithm vs message size, log-log; crossovers and the chosen point marked."""
    fig = go.Figure()
    for i, (algo, ts) in enumerate(times_s.items()):
        fig.add_trace(go.Scatter(x=list(sizes), y=[t * 1e6 for t in ts], mode="lines+markers",
                                 name=algo, line=dict(color=PALETTE[i % len(PALETTE)]),
                                 hovertemplate="%{x:.3s} B: %{y:.2f} µs<extra>" + algo + "</extra>"))
    if crossovers:
        fig.add_trace(go.Scatter(
            x=[c["size"] for c in crossovers], y=[c["time_s"] * 1e6 for c in crossovers],
            mode="markers+text", name="crossover", text=[f"→ {c['to']}" for c in crossovers],
            textposition="top left", marker=dict(symbol="x", size=12, color="#111"),
            hovertemplate="above %{x:.3s} B %{text}<extra></extra>"))
    if marker:
        fig.add_trace(go.Scatter(x=[marker[0]], y=[marker[1] * 1e6], mode="markers",
                                 name="this run", marker=dict(symbol="star", size=15,
                                                              color="#d62728")))
    fig.update_xaxes(type="log", title="message size (bytes)")
    fig.update_yaxes(type="log", title="time (µs)")
    fig.update_layout(title=title, template="plotly_white", height=400, width=WIDTH,
                      margin=dict(l=60, r=20, t=50, b=50))
    return fig


def measured_vs_predicted(rows: Sequence[Mapping], title: str = "Measured vs predicted"
                          ) -> go.Figure:
    """Measured times (markers, p10-p90 bars) over the model's predicted curve, log-log (µs)."""
    rows = sorted(rows, key=lambda r: r["size"])
    xs = [r["size"] for r in rows]
    fig = go.Figure([
        go.Scatter(x=xs, y=[r["predicted"] * 1e6 for r in rows], mode="lines+markers",
                   name="predicted", line=dict(color=PALETTE[0], dash="dash")),
        go.Scatter(x=xs, y=[r["measured"] * 1e6 for r in rows], mode="markers", name="measured",
                   marker=dict(size=11, color=PALETTE[1]),
                   error_y=dict(type="data", symmetric=False,
                                array=[(r.get("p90", r["measured"]) - r["measured"]) * 1e6
                                       for r in rows],
                                arrayminus=[(r["measured"] - r.get("p10", r["measured"])) * 1e6
                                            for r in rows]),
                   customdata=[[r.get("error", 0.0)] for r in rows],
                   hovertemplate="%{x:.3s} B: %{y:.1f} µs (error %{customdata[0]:.0%})"
                                 "<extra>measured</extra>"),
    ])
    fig.update_xaxes(type="log", title="message size (bytes)")
    fig.update_yaxes(type="log", title="time (µs)")
    fig.update_layout(title=title, template="plotly_white", height=360, width=WIDTH,
                      margin=dict(l=60, r=20, t=50, b=50))
    return fig
