"""Graph page: open an operator graph, draw it in layers with its fused groups, run it: the
whole graph against torch eager, each fused group against the reference evaluator (each chart
names its baseline), and a zoo model beside the deployment runtimes.

Deferred imports: a page's services load when it is first drawn, so the server starts fast.
"""

from __future__ import annotations

import dash
from dash import dcc, html

from app.callbacks import graph as _callbacks  # noqa: F401  (registers callbacks)
from app.figures.studio import empty_figure

dash.register_page(__name__, path="/graph", name="Graph", title="UOL Studio: Graph", order=1)

DEFAULT_SAMPLE = "mlp.json"


def layout(**_query) -> html.Div:
    """Source picker and Run; the graph (click a node: its fused group in the Studio) | the
    whole graph vs torch eager and per-group time vs the reference evaluator, fusion;
    the opaque nodes with their reasons | the run beside the deployment runtimes."""
    from app.services.graph_zoo import BATCHES, SIZES, zoo_options
    from app.services.graphs import MODELS, sample_names

    field = lambda label, comp: html.Div([html.Label(label), comp])  # noqa: E731
    samples = sample_names()
    toolbar = html.Div([
        field("Open", dcc.RadioItems(id="graph-kind", value="sample", inline=True, options=[
            {"label": " sample graph", "value": "sample"},
            {"label": " traced torch model", "value": "model"},
            {"label": " zoo model", "value": "zoo"},
            {"label": " uploaded JSON", "value": "upload"}])),
        field("Sample", dcc.Dropdown(id="graph-sample", options=samples, clearable=False,
                                     value=DEFAULT_SAMPLE if DEFAULT_SAMPLE in samples
                                     else (samples or [None])[0], className="dropdown")),
        field("Model (torch.export)", dcc.Dropdown(
            id="graph-model", clearable=False, value="MLP", className="dropdown",
            options=[{"label": f"{k} {list(v[1])}", "value": k} for k, v in MODELS.items()])),
        dcc.Upload(html.Button("Upload graph JSON", className="secondary"), id="graph-upload",
                   max_size=256 * 1024, accept=".json"),
        html.Button("Run whole graph (vs torch eager)", id="graph-run-button"),
        dcc.Loading(html.Span(id="graph-status", className="muted"), delay_show=200),
    ], className="toolbar")
    zoo = zoo_options()
    # the zoo's own row: a model by name (both zoos), its batch and size, and the peers
    zoo_bar = html.Div([
        field("Zoo model (hand-built blocks and transformers models)", dcc.Dropdown(
            id="graph-zoo", options=zoo, clearable=False, className="dropdown graph-zoo-dropdown",
            value=next((o["value"] for o in zoo if not o["disabled"]), None))),
        field("Batch", dcc.RadioItems(id="graph-zoo-batch", value=BATCHES[0], inline=True,
                                      options=[{"label": f" {b}", "value": b} for b in BATCHES])),
        field("Size", dcc.RadioItems(id="graph-zoo-size", value="small", inline=True,
                                     options=[{"label": f" {k}", "value": k, "title": v}
                                              for k, v in SIZES.items()])),
        field("Run", dcc.Checklist(id="graph-peers", value=[], inline=True, options=[
            {"label": " compare with deployment runtimes (torch eager, torch.compile, "
                      "ONNX Runtime, OpenVINO)", "value": "peers"}])),
    ], className="toolbar graph-zoo-bar")
    return html.Div([
        dcc.Store(id="graph-source"), dcc.Store(id="graph-upload-data"),
        dcc.Store(id="graph-structure"), dcc.Store(id="graph-report"),
        dcc.Location(id="graph-nav", refresh="callback-nav"),
        toolbar, zoo_bar,
        html.Div([
            html.Div([
                html.P("Data flows top to bottom. Fill: measured time of the node's fused group "
                       "(after Run). Coloured border and dashed outline: a fused group (one "
                       "kernel). Click a node to open its fused group (the group's op, its "
                       "kernel and nodes) in the Studio at its shapes.", className="muted"),
                # drawn one pixel per layout unit so labels never overlap: a big graph scrolls
                html.Div(dcc.Graph(id="graph-view", figure=empty_figure("Open a graph"),
                                   config={"displaylogo": False, "responsive": False}),
                         className="graph-scroll-box"),
                html.Div(id="graph-node-info", className="graph-node-info"),
            ], className="panel"),
            html.Div([
                dcc.Graph(id="graph-times", figure=empty_figure("Run the graph to time it"),
                          config={"displayModeBar": False}, style={"width": "100%"}),
                html.Div(id="graph-summary"),
                html.H3("Fusion decisions"), html.Div(id="graph-fusion", className="muted"),
            ], className="panel"),
        ], className="two-col"),
        html.Div([
            html.Div([html.H3("Opaque nodes (left in torch)"),
                      html.Div(id="graph-opaque-panel", className="muted")], className="panel"),
            html.Div([html.H3("Beside the deployment runtimes"),
                      html.Div("Tick 'compare with deployment runtimes' and run a zoo model: "
                               "each runtime is verified against torch eager and timed with "
                               "ours, calls alternated in one run.", id="graph-peers-view",
                               className="muted")], className="panel"),
        ], className="two-col"),
    ])
