"""IDE-only figures: the live tuning plot and a placeholder chart (the roofline is profilers').

Deferred imports: what a panel or figure reads loads when first drawn, so the server starts fast.
"""

from __future__ import annotations

import plotly.graph_objects as go


def empty_figure(message: str) -> go.Figure:
    """A blank chart that says why it is blank."""
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_layout(xaxis={"visible": False}, yaxis={"visible": False}, height=300,
                      template="plotly_white", margin={"l": 10, "r": 10, "t": 10, "b": 10})
    return fig


def tune_figure(trail: list[dict]) -> go.Figure:
    """Each measured config (GFLOP/s) and the best so far, by measurement number. A config
    verified but not timed (`untimed`: Triton without a GPU) has no point: it has no rate."""
    untimed = [t for t in trail if t.get("untimed")]
    trail = [t for t in trail if not t.get("untimed")]
    if untimed and not trail:
        from uol_core.runtime.untimed import NEEDS_GPU

        return empty_figure(f"{len(untimed)} configs verified under the Triton interpreter: "
                            f"{NEEDS_GPU}")
    xs = [t["i"] for t in trail]
    ys = [t.get("gflops") or 0.0 for t in trail]
    best, top = [], 0.0
    for y in ys:
        top = max(top, y)
        best.append(top)
    fig = go.Figure([go.Scatter(x=xs, y=ys, mode="markers", name="measured"),
                     go.Scatter(x=xs, y=best, mode="lines", name="best so far",
                                line={"shape": "hv"})])
    base = next((t for t in trail if t.get("baseline") and t.get("gflops")), None)
    if base is not None:  # what the speedup is measured against
        fig.add_hline(y=base["gflops"], line_dash="dash", line_color="#888",
                      annotation_text="untuned default", annotation_position="bottom right")
    fig.update_layout(height=240, margin={"l": 40, "r": 10, "t": 10, "b": 30},
                      xaxis_title="measurement", yaxis_title="GFLOP/s", template="plotly_white")
    return fig
