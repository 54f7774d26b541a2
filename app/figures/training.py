"""Training page figures: a real run's per-rank timeline beside the simulator's (pure: rows in, figure out).

Deferred imports: what a panel or figure reads loads when first drawn, so the server starts fast.
"""

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


# torch eager and the UOL twin, in the order run_demo's lockstep runs them
TWIN_NAMES = ("torch eager", "UOL kernels")
TWIN_COLOURS = ("#7f7f7f", "#1f77b4")


def twin_loss(losses: list[list[float]], title: str = "Loss per step",
              loss_name: str = "loss") -> go.Figure:
    """Both models' training loss, step by step: the curves lie on each other when the
    kernels compute what torch computes."""
    fig = go.Figure()
    for name, colour, ys, dash in zip(TWIN_NAMES, TWIN_COLOURS, losses, ("solid", "dot")):
        fig.add_trace(go.Scatter(y=ys, mode="lines", name=name,
                                 line={"color": colour, "width": 2, "dash": dash}))
    fig.update_layout(title=title, template="plotly_white", height=320,
                      margin={"l": 60, "r": 10, "t": 40, "b": 40}, legend={"x": 0.7, "y": 0.95})
    fig.update_xaxes(title="step")
    fig.update_yaxes(title=loss_name, type="log")
    return fig


def twin_step_times(step_ms: list[list[float]], title: str = "Step time") -> go.Figure:
    """Both models' step times (forward, backward and optimizer), step by step, with their
    medians as dashed lines: the speedup is their ratio. The axis stops at three times the
    larger median; the steps above it (the first: UOL builds its kernels there) are named."""
    import statistics

    fig = go.Figure()
    medians = [statistics.median(ys) for ys in step_ms if ys]
    top = 3 * max(medians) if medians else None
    above = []
    for name, colour, ys in zip(TWIN_NAMES, TWIN_COLOURS, step_ms):
        fig.add_trace(go.Scatter(y=ys, mode="markers", name=name,
                                 marker={"color": colour, "size": 4}))
        if ys:
            fig.add_hline(y=statistics.median(ys), line={"color": colour, "dash": "dash",
                                                         "width": 1})
        above += [f"{name} step {i + 1}: {_ms(y)}" for i, y in enumerate(ys) if top and y > top]
    if above:
        fig.add_annotation(text="off the chart: " + "; ".join(above[:3])
                           + (f" and {len(above) - 3} more" if len(above) > 3 else ""),
                           xref="paper", yref="paper", x=0, y=1.0, xanchor="left",
                           yanchor="bottom", showarrow=False, font={"size": 11})
    fig.update_layout(title=title, template="plotly_white", height=320,
                      margin={"l": 60, "r": 10, "t": 60, "b": 40}, legend={"x": 0.7, "y": 0.95})
    fig.update_xaxes(title="step")
    fig.update_yaxes(title="ms", range=[0, top] if top else None)
    return fig


def _ms(value: float) -> str:
    return f"{value / 1e3:.1f} s" if value >= 1e3 else f"{value:.2f} ms"
