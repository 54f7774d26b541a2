"""Guide page: the optimisation guide (HFL targets x operator families) to browse and filter;
each case opens its kernel in the Studio."""

from __future__ import annotations

import dash
from dash import dash_table, dcc, html

from app.callbacks import guide as _callbacks  # noqa: F401  (registers callbacks)

dash.register_page(__name__, path="/guide", name="Guide", title="UOL Studio: Guide", order=5.5)

DEFAULT_TARGETS = ["graviton3"]
COLUMNS = [("target", "Target"), ("family", "Family"), ("op", "Op"), ("backend", "Backend"),
           ("config", "ACG config"), ("bound", "Bound"), ("intensity", "FLOP/B"),
           ("predicted", "Predicted"), ("measured", "Measured"), ("kernel", "Kernel")]


def _options() -> tuple[list[str], list[str]]:
    from uol_core.guide.families import FAMILIES
    from uol_core.guide.generate import shipped_targets

    return [*shipped_targets(), "host"], [f.name for f in FAMILIES]


def layout(**_query) -> html.Div:
    """Filters, the case table, and the selected case's constraints and knob moves."""
    targets, families = _options()
    field = lambda label, comp: html.Div([html.Label(label), comp])  # noqa: E731
    filters = html.Div([
        field("Targets", dcc.Dropdown(id="guide-targets", options=targets, multi=True,
                                      value=DEFAULT_TARGETS, style={"minWidth": "320px"})),
        field("Families (blank: all)", dcc.Dropdown(id="guide-families", options=families,
                                                    multi=True, style={"minWidth": "260px"})),
        field("Bound", dcc.Dropdown(id="guide-bound", options=["compute", "memory"],
                                    style={"width": "130px"})),
        html.Button("Download HTML", id="guide-download-button", className="secondary"),
        dcc.Download(id="guide-download"),
    ], className="toolbar")
    table = dash_table.DataTable(
        id="guide-table", columns=[{"name": label, "id": cid, **(
            {"presentation": "markdown"} if cid == "kernel" else {})} for cid, label in COLUMNS],
        data=[], sort_action="native", filter_action="native", page_size=25,
        row_selectable="single", markdown_options={"link_target": "_self"},
        style_table={"overflowX": "auto"}, style_cell={"fontSize": 12, "padding": "3px 6px",
                                                       "whiteSpace": "normal"},
        style_header={"fontWeight": 600})
    return html.Div([
        html.H2("Optimisation guide"),
        html.Div("For every target and operator family: the config the ACG picks at typical "
                 "sizes, the constraints that bind, the roofline position, the predicted time "
                 "(model-predicted, labelled) and the measured time where the case ran on this "
                 "host. A target's cases are built once (about 10 s) and then cached.",
                 className="muted"),
        html.Div(filters, className="panel"),
        html.Div([html.Div(id="guide-summary", className="muted"),
                  dcc.Loading(table, delay_show=300)], className="panel"),
        html.Div([html.H3("Case"), html.Div(id="guide-detail", children=html.Div(
            "Select a row to see its binding constraints and one-knob moves.",
            className="muted"))], className="panel"),
        dcc.Store(id="guide-cases"),
    ])
