"""Debugger page: trace a Triton kernel (a library op's or your own) per program; heatmaps, masks, OOB.

Deferred imports: a page's services load when it is first drawn, so the server starts fast.
"""

from __future__ import annotations

import dash
from dash import dcc, html

from app.callbacks import debugger as _callbacks  # noqa: F401  (registers callbacks)
from app.components.source_view import source_pane
from app.figures.studio import empty_figure

dash.register_page(__name__, path="/debugger", name="Debugger", title="UOL Studio: Debugger",
                   order=2)

DEFAULT_OP, DEFAULT_SIZES = "softmax", "R=4,C=33"


def layout(**_query) -> html.Div:
    """Source picker, Trace, program picker, heatmaps, masks, findings, source with OOB lines."""
    from uol_core.ops import list_ops

    field = lambda label, comp: html.Div([html.Label(label), comp])  # noqa: E731
    # the mode and the kernel typed or chosen are kept in the browser's local storage
    keep = {"persistence": True, "persistence_type": "local"}
    source = html.Div([
        dcc.RadioItems(id="debug-mode", value="op", inline=True, **keep, options=[
            {"label": " library operator (generated Triton)", "value": "op"},
            {"label": " your Triton kernel file", "value": "file"}]),
        html.Div([
            field("Operator", dcc.Dropdown(id="debug-op", options=list_ops(), value=DEFAULT_OP,
                                           clearable=False, className="dropdown", **keep)),
            field("Sizes", dcc.Input(id="debug-sizes", value=DEFAULT_SIZES, debounce=True,
                                     style={"width": "160px"}, **keep)),
        ], id="debug-op-panel", className="toolbar"),
        html.Div([
            html.P("Your kernel runs only when you press Trace: in a separate worker process, "
                   "under the Triton interpreter (no GPU), stopped after 2 minutes. Files up to "
                   "64 KiB.", className="muted", id="debug-file-note"),
            html.Div([
                dcc.Upload(html.Button("Upload .py", className="secondary"), id="debug-upload",
                           max_size=64 * 1024, accept=".py"),
                html.Button("Load example (missing mask)", id="debug-example",
                            className="secondary"),
                field("@triton.jit function", dcc.Input(id="debug-function", value="",
                                                         style={"width": "130px"}, **keep)),
                field("Grid", dcc.Input(id="debug-grid", value="", style={"width": "70px"}, **keep)),
                field("Arguments (tensors: randn|zeros|ones|arange:SHAPE)",
                      dcc.Input(id="debug-args", value="", style={"width": "360px"}, **keep)),
            ], className="toolbar"),
            dcc.Textarea(id="debug-kernel-text", value="", spellCheck=False,
                         className="kernel-text", placeholder="paste or upload a Triton kernel",
                         **keep),
        ], id="debug-file-panel", style={"display": "none"}),
        html.Div([html.Button("Trace", id="debug-run"),
                  dcc.Loading(html.Span(id="debug-status", className="muted"), delay_show=200)],
                 className="toolbar"),
    ], className="panel")
    views = html.Div([
        html.Div([
            html.Div([
                field("Launch", dcc.Dropdown(id="debug-launch", clearable=False,
                                             className="dropdown")),
                field("Program id (grid x, y, z)", dcc.Dropdown(
                    id="debug-program", clearable=False, className="dropdown")),
                field("Tensor", dcc.Dropdown(id="debug-tensor", clearable=False,
                                             className="dropdown")),
            ], className="toolbar"),
            dcc.Graph(id="debug-heatmap", figure=empty_figure("Trace a kernel to see its accesses"),
                      config={"displayModeBar": False}),
            dcc.Graph(id="debug-masks", figure=empty_figure("masked lanes per line"),
                      config={"displayModeBar": False}),
        ], className="panel"),
        html.Div([
            html.H3("Out-of-bounds findings"),
            html.Div(id="debug-findings", className="findings"),
            html.H3("Kernel source (findings outlined in red)"),
            source_pane("debug-source", "dbg"),
            html.H3("C kernels: CPU sanitizer"),
            html.P("Builds the library operator's C kernel with AddressSanitizer and UBSan and "
                   "runs it once; findings point at the kernel line and the ODL line.",
                   className="muted"),
            html.Button("Run the C sanitizer", id="debug-sanitize-button", className="button"),
            html.Div(id="debug-sanitizer", className="findings"),
            html.Pre(id="debug-notes", className="explanation"),
        ], className="panel"),
    ], className="two-col")
    return html.Div([dcc.Store(id="debug-trace"), source, views])
