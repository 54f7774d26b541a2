"""Profiler page: flame graph of the last profile, per-line hotspots (C and ODL), timeline, roofline, compare.

Deferred imports: a page's services load when it is first drawn, so the server starts fast.
"""

from __future__ import annotations

import dash
from dash import dcc, html

from app.callbacks import profiler as _callbacks  # noqa: F401  (registers callbacks)
from app.callbacks import profiler_flame as _flame_callbacks
from app.components.source_view import source_pane
from app.figures.studio import empty_figure

dash.register_page(__name__, path="/profiler", name="Profiler", title="UOL Studio: Profiler",
                   order=3)

def layout(**_query) -> html.Div:
    """Profile toolbar, then flame | hotspots, timeline | roofline, and the run comparison."""
    from app.services.profiling import load_profile, profilable_ops

    last = load_profile()
    field = lambda label, comp: html.Div([html.Label(label), comp])  # noqa: E731
    graph = lambda gid, msg: dcc.Graph(id=gid, figure=empty_figure(msg),  # noqa: E731
                                       config={"displaylogo": False}, style={"width": "100%"})
    ops = profilable_ops()  # every library op, then the user's own ops from Studio runs
    first = next((o["value"] for o in ops if o["value"] == "matmul"), ops[0]["value"])
    toolbar = html.Div([
        field("Operator (library or yours, C kernel)",
              dcc.Dropdown(id="profile-op", options=ops, value=first, clearable=False,
                           className="dropdown")),
        field("Sizes", dcc.Input(id="profile-sizes", value="M=32,N=32,K=32", debounce=True,
                                 style={"width": "170px"})),
        html.Button("Profile (compile + time + per-line costs)", id="profile-run"),
        dcc.Loading(html.Span(id="profile-status", className="muted"), delay_show=200),
    ], className="toolbar")
    flame = html.Div([
        html.H3("Flame graph"),
        html.Div([
            dcc.RadioItems(id="flame-source", value="python", inline=True,
                           options=_flame_callbacks.SOURCES),
            dcc.RadioItems(id="flame-view", value="time", inline=True, options=[
                {"label": " time order", "value": "time"},
                {"label": " left heavy", "value": "left-heavy"},
                {"label": " sandwich", "value": "sandwich"}]),
            # the function the sandwich view is cut at (shown in that view only)
            dcc.Dropdown(id="flame-function", options=[], placeholder="function",
                         clearable=False, className="dropdown",
                         style={"minWidth": "260px", "display": "none"}),
        ], className="toolbar"),
        html.Div([
            dcc.Input(id="flame-search", placeholder="search frames", debounce=True,
                      style={"width": "160px"}),
            html.Span(id="flame-matches", className="muted"),
            dcc.Upload(html.Button("Import speedscope JSON", className="secondary"),
                       id="speedscope-upload", accept=".json", max_size=8 << 20),
            dcc.Dropdown(id="import-profile", options=[], placeholder="imported profile",
                         clearable=False, className="dropdown", style={"minWidth": "160px"}),
            html.Button("Export speedscope", id="speedscope-export", className="secondary"),
            dcc.Download(id="speedscope-download"),
        ], className="toolbar"),
        html.Div(id="import-status", className="muted"),
        dcc.Store(id="speedscope-import"),
        html.P("Click a box to zoom into it, the bottom bar to zoom out.", className="muted"),
        graph("flame-graph", "Profile an operator to see where the time goes"),
    ], className="panel")
    hot = html.Div([
        html.H3("Per-line hotspots (callgrind instructions, or cycles where valgrind cannot run)"),
        html.Div(id="hotspot-summary", className="muted"),
        html.H4("ODL lines (rolled up)"), source_pane("odl-hotspots", "hodl"),
        html.H4("Generated C"), source_pane("line-hotspots", "hc"),
    ], className="panel")
    compare = html.Div([
        html.H3("Compare two runs"),
        html.Div([field("Run A (baseline)", dcc.Dropdown(id="compare-a", className="dropdown")),
                  field("Run B", dcc.Dropdown(id="compare-b", className="dropdown"))],
                 className="toolbar"),
        html.Div(id="compare-text", className="muted"),
        graph("compare-graph", "Pick two runs"),
    ], className="panel")
    return html.Div([
        dcc.Store(id="profile-current", data={"id": None, "has_last": last is not None}),
        toolbar,
        html.Div([flame, hot], className="two-col"),
        html.Div([html.Div(graph("profile-timeline", "timeline of the torch reference"),
                           className="panel"),
                  html.Div(graph("profile-roofline", "roofline of all runs"), className="panel")],
                 className="two-col"),
        compare,
    ])
