"""Training page figures: a real run's per-rank timeline beside the simulator's (pure: rows in, figure out)."""

from __future__ import annotations

import plotly.graph_objects as go

# one colour per kind in both charts, so measured and simulated bars read alike
KIND_COLOURS = {"compute": "#1f77b4", "comm": "#ff7f0e", "bubble": "#c7c7c7"}
KIND_NAMES = {"compute": "forward / backward", "comm": "send / recv wait", "bubble": "idle (bubble)"}


def pipeline_timeline(rows: list[dict], title: str, x_max_ms: float | None = None) -> go.Figure:
    """Gantt of one pipeline step: a lane per rank, bars per micro-batch forward (F) / backward (B)."""
    fig = go.Figure()
    for kind, colour in KIND_COLOURS.items():
        mine = [r for r in rows if r["kind"] == kind]
        if not mine:
            continue
        fig.add_trace(go.Bar(
            y=[r["rank"] for r in mine], x=[r["duration"] * 1e3 for r in mine],
            base=[r["start"] * 1e3 for r in mine], orientation="h", name=KIND_NAMES[kind],
            marker_color=colour, text=[r["name"] if kind != "bubble" else "" for r in mine],
            textposition="inside", insidetextanchor="middle",
            hovertemplate="<b>%{text}</b> %{y}<br>start %{base:.2f} ms<br>%{x:.2f} ms<extra></extra>"))
    lanes = sorted({r["rank"] for r in rows})
    fig.update_layout(barmode="overlay", bargap=0.3, title=title, template="plotly_white",
                      height=max(250, 120 + 45 * len(lanes)), margin={"l": 60, "r": 10, "t": 40, "b": 75},
                      # the legend at the foot of the figure, below the axis title (not over it)
                      legend={"orientation": "h", "yref": "container", "y": 0.01, "yanchor": "bottom"})
    fig.update_xaxes(title="time in the step (ms)", range=[0, x_max_ms] if x_max_ms else None)
    fig.update_yaxes(autorange="reversed", type="category", categoryorder="array", categoryarray=lanes)
    return fig


def measured_and_simulated(measured: list[dict], simulated: list[dict], measured_ms: float,
                           simulated_ms: float | None, step: int) -> tuple[go.Figure, go.Figure]:
    """The measured step and the simulator's step for the measured stage times, on one time axis."""
    ends = [r["start"] + r["duration"] for r in (*measured, *simulated)]
    x_max = 1e3 * max(ends) * 1.02 if ends else None
    left = pipeline_timeline(measured, f"measured: step {step}, {measured_ms:.1f} ms", x_max)
    sim_title = f"simulated for the measured stage times: {simulated_ms:.1f} ms" if simulated_ms else "simulated"
    return left, pipeline_timeline(simulated, sim_title, x_max)
