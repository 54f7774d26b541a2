"""Communication page: topology builder, collective knobs, link heat, algorithm curves, overlap, faults.

Deferred imports: a page's services load when it is first drawn, so the server starts fast.
"""

from __future__ import annotations

import dash
from dash import dcc, html

from app.callbacks import communication as _callbacks  # noqa: F401  (registers callbacks)
from app.figures.studio import empty_figure

dash.register_page(__name__, path="/communication", name="Communication",
                   title="UOL Studio: Communication", order=4)

TOPOLOGIES = [("fat-tree", "fat-tree"), ("2D torus", "torus2d"), ("3D torus", "torus3d"),
              ("dragonfly", "dragonfly"), ("rail-optimised (8 GPU servers)", "rail"),
              ("ring", "ring"), ("fully connected", "full"), ("custom JSON (upload)", "custom")]
LINKS = ["default", "nvlink4", "ib_ndr", "roce_200g", "tcp_100g", "pcie_gen5"]
COLLECTIVES = ["allreduce", "allgather", "reducescatter", "alltoall", "broadcast"]
OVERLAP = [("DDP buckets (2 ranks)", "ddp"), ("pipeline 1F1B", "1f1b"),
           ("pipeline GPipe", "gpipe"), ("pipeline interleaved", "interleaved")]


def layout(**_query) -> html.Div:
    """Knobs on top; topology with link heat | results; curves | per-rank timeline; measure."""
    from app.services.comm import CODECS, MAX_DRAW_GPUS, MAX_OVERSUBSCRIPTION, MIN_GPUS

    field = lambda label, comp: html.Div([html.Label(label), comp])  # noqa: E731
    # the topology inputs are kept in the browser's local storage: a reload restores them
    keep = {"persistence": True, "persistence_type": "local"}
    dd = lambda i, opts, v: dcc.Dropdown(id=i, options=opts, value=v, clearable=False,  # noqa: E731
                                         className="dropdown", **keep)
    graph = lambda gid, msg: dcc.Graph(id=gid, figure=empty_figure(msg),  # noqa: E731
                                       config={"displaylogo": False}, style={"width": "100%"})
    knobs = html.Div([
        field("Topology", dd("topology-select", [{"label": a, "value": b} for a, b in TOPOLOGIES],
                             "fat-tree")),
        # no min/max here: the browser would send None for a value out of range and the page
        # could not say which limit it crossed; the callback checks it and names the limit
        field(f"GPUs ({MIN_GPUS}-{MAX_DRAW_GPUS})",
              dcc.Input(id="nodes-input", type="number", value=16, debounce=True,
                        style={"width": "80px"}, **keep)),
        field("Link", dd("link-select", LINKS, "default")),
        field(f"Oversubscription (1-{MAX_OVERSUBSCRIPTION:g})",
              dcc.Input(id="oversub-input", type="number", value=1, step=0.5,
                        style={"width": "70px"}, **keep)),
        field("Collective", dd("collective-select", COLLECTIVES, "allreduce")),
        field("Algorithm", dd("algorithm-select", ["auto"], "auto")),
        field("Message size", dcc.Input(id="size-input", value="64MiB", debounce=True,
                                        style={"width": "90px"}, **keep)),
        field("Compression", dd("codec-select", list(CODECS), "none")),
        html.Button("Simulate", id="simulate-button"),
        dcc.Upload(html.Button("Upload topology JSON", className="secondary"), id="comm-upload",
                   max_size=256 * 1024, accept=".json"),
    ], className="toolbar")
    topo = html.Div([
        html.P("Link colour = utilisation in the last simulation (flow-level, flows split over "
               "equal-cost paths). Click a link or a node to fail it: the collective is rerouted "
               "and re-planned, and every panel shows the faulted fabric until Clear fault.",
               className="muted"),
        graph("link-heatmap", "Simulate to draw the topology"),
        html.Button("Clear fault", id="fault-clear", className="secondary"),
        html.Div(id="comm-fault", className="findings"),
    ], className="panel")
    result = html.Div([html.H3("Result"), dcc.Loading(html.Div(id="comm-result"), delay_show=300),
                       graph("comm-curves", "algorithms over message size")], className="panel")
    overlap = html.Div([
        html.Div([field("Overlap timeline", dd("overlap-kind",
                                               [{"label": a, "value": b} for a, b in OVERLAP],
                                               "ddp"))], className="toolbar"),
        html.Div(id="overlap-summary", className="muted"),
        graph("overlap-timeline", "per-rank timeline"),
    ], className="panel")
    measure = html.Div([
        html.H3("Measure on this machine"),
        html.P("Runs a real all-reduce on 2 gloo processes over 127.0.0.1 at 3 sizes, fits "
               "alpha-beta on the smallest and largest, and checks the one between.",
               className="muted"),
        html.Button("Measure (gloo, 2 processes)", id="comm-measure"),
        dcc.Loading(html.Span(id="comm-measure-status", className="muted"), delay_show=200),
        graph("comm-measure-graph", "measured vs predicted"),
    ], className="panel")
    return html.Div([
        dcc.Store(id="comm-custom"), dcc.Store(id="comm-state"),
        knobs, html.Div(id="comm-upload-status", className="muted"),
        html.Div([topo, result], className="two-col"),
        html.Div([overlap, measure], className="two-col"),
    ])
