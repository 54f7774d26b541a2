"""Training page: start a real pipeline-parallel run, watch every rank's timeline live beside the simulator's.

Deferred imports: a page's services load when it is first drawn, so the server starts fast.
"""

from __future__ import annotations

import dash
from dash import dcc, html

from app.callbacks import kernel_training as _kernel_callbacks  # noqa: F401  (registers them)
from app.callbacks import training as _callbacks  # noqa: F401  (registers callbacks)
from app.figures.studio import empty_figure

dash.register_page(__name__, path="/training", name="Training", title="UOL Studio: Training", order=4.5)

SCHEDULES = [("1F1B", "1f1b"), ("GPipe", "gpipe"), ("interleaved 1F1B (2 chunks per rank)", "interleaved")]


def layout(**_query) -> html.Div:
    """Knobs and Start on top; status and progress; measured | simulated timelines; the report."""
    from app.services.training import MAX_STAGES, MAX_STEPS

    field = lambda label, comp: html.Div([html.Label(label), comp])  # noqa: E731
    graph = lambda gid, msg: dcc.Graph(id=gid, figure=empty_figure(msg),  # noqa: E731
                                       config={"displaylogo": False}, style={"width": "100%"})
    knobs = html.Div([
        field(f"Stages (2-{MAX_STAGES} processes)", dcc.Input(id="train-stages", type="number", value=2,
                                                              style={"width": "70px"})),
        field("Micro-batches", dcc.Input(id="train-microbatches", type="number", value=4,
                                         style={"width": "70px"})),
        field("Schedule", dcc.Dropdown(id="train-schedule", options=[{"label": a, "value": b} for a, b in SCHEDULES],
                                       value="1f1b", clearable=False, className="dropdown")),
        field(f"Steps (4-{MAX_STEPS})", dcc.Input(id="train-steps", type="number", value=8, style={"width": "70px"})),
        dcc.Checklist(id="train-straggler", options=[{"label": " last stage 2x slow, rebalance mid-run",
                                                      "value": "on"}], value=[]),
        html.Button("Start training run", id="train-start"),
    ], className="toolbar")
    return html.Div([
        _kernel_panel(field, graph),
        html.H3("Pipeline-parallel training"),
        dcc.Store(id="train-run"), dcc.Interval(id="train-tick", interval=700, disabled=True),
        html.P("A small transformer split into stages with torch.distributed.pipelining, one gloo process per "
               "stage on this machine. Every rank streams its forward, backward, send and recv times; the "
               "timelines show the latest finished step and the simulator's step for the stage times measured "
               "so far.", className="muted"),
        knobs,
        html.Div(id="train-status", className="muted"),
        html.Progress(id="train-progress", value="0", max="1", style={"width": "100%"}),
        html.Div([html.Div(graph("train-measured", "measured per-rank timeline"), className="panel"),
                  html.Div(graph("train-simulated", "simulated timeline"), className="panel")],
                 className="two-col"),
        html.Div(id="train-report", className="findings"),
    ])


def _kernel_panel(field, graph) -> html.Div:
    """Train on UOL kernels: the digits MLP and its twin with UOL's layers, live, side by side."""
    from app.services.kernel_training import (
        MAX_STEPS,
        MIN_STEPS,
        MODEL_CHOICES,
        OPTIMIZER_CHOICES,
        backend_choices,
    )

    knobs = html.Div([
        field("Model", dcc.Dropdown(
            id="ktrain-model", options=[{"label": a, "value": b} for a, b in MODEL_CHOICES],
            value="mlp", clearable=False, className="dropdown", style={"minWidth": "210px"})),
        field(f"Steps ({MIN_STEPS}-{MAX_STEPS})", dcc.Input(id="ktrain-steps", type="number",
                                                           value=150, style={"width": "80px"})),
        field("Backend", dcc.Dropdown(id="ktrain-backend", options=list(backend_choices()),
                                      value="auto", clearable=False, className="dropdown")),
        field("Optimizer of the UOL model", dcc.Dropdown(
            id="ktrain-optimizer", options=[{"label": a, "value": b} for a, b in OPTIMIZER_CHOICES],
            value="uol", clearable=False, className="dropdown", style={"minWidth": "220px"})),
        html.Button("Train both", id="ktrain-start"),
    ], className="toolbar")
    return html.Div([
        html.H3("Train on UOL kernels"),
        dcc.Store(id="ktrain-run"), dcc.Interval(id="ktrain-tick", interval=700, disabled=True),
        html.P("A model trained twice from the same weights on the same batches, in lockstep: "
               "with torch's modules and optimizer, and with UOL's generated kernels for its "
               "layers (forward and derived backward) and, by choice, UOL's optimizer. The "
               "digits MLP (64 -> 256 GELU -> LayerNorm -> 256 ReLU -> 10, SGD; `uol "
               "train-demo` on the command line) or a nanoGPT block (pre-norm, fused qkv, causal "
               "flash attention, tanh-GELU MLP; AdamW on a fixed regression). The losses must "
               "agree; the step times say what the kernels buy. Without a GPU the triton "
               "backend runs interpreted: correct, and a hundred times slower.",
               className="muted"),
        knobs,
        html.Div(id="ktrain-status", className="muted"),
        html.Progress(id="ktrain-progress", value="0", max="1", style={"width": "100%"}),
        html.Div([html.Div(graph("ktrain-loss", "loss per step"), className="panel"),
                  html.Div(graph("ktrain-times", "step time"), className="panel")],
                 className="two-col"),
        html.Div(id="ktrain-report", className="findings"),
    ])
