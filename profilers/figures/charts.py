"""The five profiler figures: roofline, flame icicle, line-hotspot heat table, timeline, comparison."""

from __future__ import annotations

import math
from collections.abc import Sequence

import plotly.graph_objects as go

from profilers.flame import FlameNode
from profilers.roofline_points import RoofCurve, RooflinePoint

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b")
# Figures carry an explicit size: printed pages keep the width a chart had at load time.
WIDTH, HEIGHT = 900, 460


def _layout(fig: go.Figure, title: str, height: int = HEIGHT) -> go.Figure:
    fig.update_layout(title=title, width=WIDTH, height=height, template="plotly_white",
                      margin=dict(l=60, r=20, t=50, b=50))
    return fig


def roofline_chart(curves: Sequence[RoofCurve], points: Sequence[RooflinePoint] = (),
                   title: str = "Roofline") -> go.Figure:
    """Log-log roofline of one or more targets, with measured runs as points."""
    fig = go.Figure()
    lo, hi = 1e-2, 1e3
    for p in points:
        if p.intensity > 0 and math.isfinite(p.intensity):
            lo, hi = min(lo, p.intensity / 4), max(hi, p.intensity * 4)
    xs = [lo * (hi / lo) ** (i / 199) for i in range(200)]
    colour = {}
    for c in curves:
        colour.setdefault(c.target, PALETTE[len(colour) % len(PALETTE)])
        # a roof of other units than the f32 vectors (bf16, fp16) is dashed, in its target's
        # colour: beside the target's fp32 roof it reads as the same machine's second roof
        second = c.dtype != "fp32"
        peak = "" if c.dtype == "fp32" else f"{c.dtype} "
        fig.add_trace(go.Scatter(x=xs, y=[c.attainable(x) for x in xs], mode="lines",
                                 name=f"{c.target} ({peak}{c.peak_gflops:,.0f} GFLOP/s, "
                                      f"{c.bandwidth_gbps:,.0f} GB/s)",
                                 line=dict(color=colour[c.target], width=2,
                                           dash="dash" if second else "solid")))
        # annotations on log axes take log10 coordinates (plotly pitfall)
        fig.add_annotation(x=math.log10(c.ridge), y=math.log10(c.peak_gflops), text="ridge",
                           showarrow=False, yshift=10, font=dict(size=10,
                                                                 color=colour[c.target]))
    for p in points:
        fig.add_trace(go.Scatter(
            x=[p.intensity], y=[max(p.achieved_gflops, 1e-6)], mode="markers+text",
            text=[p.label], textposition="bottom center", name=p.label,
            marker=dict(size=11, symbol="diamond", color=colour.get(p.target, "#333")),
            hovertemplate=(f"<b>{p.label}</b><br>{p.target}<br>%{{x:.2f}} FLOP/B<br>"
                           f"%{{y:.2f}} GFLOP/s<br>{p.fraction * 100:.1f}% of roofline "
                           f"({p.bound}-bound)<extra></extra>")))
    fig.update_xaxes(type="log", title="arithmetic intensity (FLOP/byte)")
    fig.update_yaxes(type="log", title="GFLOP/s")
    return _layout(fig, title)


def flame_icicle(tree: FlameNode, title: str = "Flame graph", max_nodes: int = 2000) -> go.Figure:
    """Icicle of a flame tree (root at the bottom, as a flame graph); hover shows self and total."""
    return _layout(go.Figure(icicle_trace(tree, max_nodes)), title, height=520)


def icicle_trace(tree: FlameNode, max_nodes: int = 2000, root_at_bottom: bool = True,
                 domain: dict | None = None) -> go.Icicle:
    """The icicle of a flame tree: boxes as wide as their total; hover shows self and total."""
    ids: list[str] = []
    labels: list[str] = []
    parents: list[str] = []
    values: list[float] = []
    custom: list[list] = []

    def visit(node: FlameNode, parent: str) -> float:
        idx = str(len(ids))  # opaque ids: frame names repeat and may hold any character
        ids.append(idx)
        labels.append(node.name[:80])
        parents.append(parent)
        values.append(node.total)
        custom.append([node.location, node.self_cost])
        child_sum = 0.0
        for c in node.children:
            if len(ids) < max_nodes:
                child_sum += visit(c, idx)
        # branchvalues="total" needs parent >= sum(children)
        values[int(idx)] = max(values[int(idx)], child_sum)
        return values[int(idx)]

    visit(tree, "")
    unit = "s" if tree.unit == "seconds" else f" {tree.unit}"
    fmt = ".4f" if tree.unit == "seconds" else ",.0f"
    return go.Icicle(
        ids=ids, labels=labels, parents=parents, values=values, customdata=custom,
        branchvalues="total", domain=domain or {},
        root=dict(color="#fbb4ae"),  # plotly leaves the root box blank; it is a frame here
        tiling=dict(orientation="v", **({"flip": "y"} if root_at_bottom else {})),
        hovertemplate=(f"<b>%{{label}}</b><br>%{{customdata[0]}}<br>total %{{value:{fmt}}}{unit}"
                       f"<br>self %{{customdata[1]:{fmt}}}{unit}<br>%{{percentRoot:.1%}} of root"
                       "<extra></extra>"))


def hotspot_table(rows: Sequence[dict], total: dict, event: str = "Ir",
                  title: str = "Line hotspots", columns: Sequence[str] = ("Ir", "D1mr", "DLmr"),
                  max_rows: int = 40) -> go.Figure:
    """Heat table of source lines: each line's share of `event` colours its row."""
    rows = [r for r in rows if r["costs"].get(event, 0) > 0][:max_rows]
    denom = total.get(event) or 1
    shares = [r["costs"].get(event, 0) / denom for r in rows]
    cols = [c for c in columns if c in total]
    heat = [f"rgba(214,39,40,{0.08 + 0.8 * s:.2f})" for s in shares]
    values = [[r["line"] for r in rows], [f"{s * 100:.1f}%" for s in shares]]
    values += [[f"{r['costs'].get(c, 0):,}" for r in rows] for c in cols]
    values.append([r.get("odl_line") or "" for r in rows])
    values.append([r["text"].strip()[:90] for r in rows])
    header = ["line", f"% {event}", *cols, "ODL", "source"]
    fig = go.Figure(go.Table(
        columnwidth=[40, 55] + [70] * len(cols) + [40, 420],
        header=dict(values=header, fill_color="#eee", align="left"),
        cells=dict(values=values, align="left", fill_color=[heat] * len(header),
                   font=dict(family="monospace", size=11))))
    return _layout(fig, title, height=max(240, 60 + 24 * len(rows)))


def timeline_chart(timeline, title: str = "") -> go.Figure:
    """Gantt of a timeline: one row per lane, one bar per event, coloured by category (µs)."""
    fig = go.Figure()
    cats = list(dict.fromkeys(e.category or "event" for e in timeline.events))
    for i, cat in enumerate(cats):
        evs = [e for e in timeline.events if (e.category or "event") == cat]
        fig.add_trace(go.Bar(
            y=[e.lane for e in evs], x=[e.dur_s * 1e6 for e in evs],
            base=[e.start_s * 1e6 for e in evs], orientation="h", name=cat,
            marker_color=PALETTE[i % len(PALETTE)], text=[e.name for e in evs],
            textposition="inside", insidetextanchor="middle",
            hovertemplate="<b>%{text}</b><br>%{y}<br>start %{base:.1f} µs<br>"
                          "%{x:.1f} µs<extra>" + cat + "</extra>"))
    fig.update_layout(barmode="overlay", bargap=0.3)
    fig.update_xaxes(title="time (µs)")
    fig.update_yaxes(autorange="reversed", type="category")
    lanes = len(timeline.lanes) or 1
    return _layout(fig, title or timeline.title, height=max(240, 90 + 40 * lanes))


def comparison_bars(comparison, title: str = "") -> go.Figure:
    """Two panels side by side: time and GFLOP/s of run A and run B, and per-line share change."""
    from plotly.subplots import make_subplots

    c = comparison
    has_lines = bool(c.lines)
    fig = make_subplots(rows=1, cols=3 if has_lines else 2,
                        subplot_titles=["median time (ms)", "GFLOP/s"]
                        + ([f"share of {c.event} per ODL line"] if has_lines else []))
    names = [f"A: {c.a.label}", f"B: {c.b.label}"]
    same_work = getattr(c, "basis", "time") == "time"  # times of unlike runs are not drawn
    times = [(c.a.median_s or 0) * 1e3, (c.b.median_s or 0) * 1e3] if same_work else [0, 0]
    fig.add_trace(go.Bar(x=names, y=times,
                         marker_color=PALETTE[:2], showlegend=False), 1, 1)
    if not same_work:  # say why the panel is empty rather than draw bare axes
        fig.add_annotation(text="not compared: the runs do different work<br>"
                                "(their GFLOP/s are, on the right)",
                           xref="x domain", yref="y domain", x=0.5, y=0.5, showarrow=False)
        fig.update_yaxes(visible=False, row=1, col=1)
    fig.add_trace(go.Bar(x=names, y=[c.gflops_a or 0, c.gflops_b or 0],
                         marker_color=PALETTE[:2], showlegend=False), 1, 2)
    if has_lines:
        labels = [f"L{d.odl_line}" for d in c.lines]
        fig.add_trace(go.Bar(x=labels, y=[d.share_a * 100 for d in c.lines], name="A",
                             marker_color=PALETTE[0]), 1, 3)
        fig.add_trace(go.Bar(x=labels, y=[d.share_b * 100 for d in c.lines], name="B",
                             marker_color=PALETTE[1]), 1, 3)
    return _layout(fig, title or c.verdict)
