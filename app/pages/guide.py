"""Guide page: the optimisation guide (HFL targets x operator families) to browse and filter;
each case opens its kernel in the Studio.

Deferred imports: a page's services load when it is first drawn, so the server starts fast.
"""

from __future__ import annotations

import dash
from dash import dcc, html

from app.callbacks import guide as _callbacks  # noqa: F401  (registers callbacks)
from app.callbacks import guide_measure
from app.components.grids import grid

dash.register_page(__name__, path="/guide", name="Guide", title="UOL Studio: Guide", order=5.5)

DEFAULT_TARGETS = ["host"]  # the machine the IDE runs on: its cases can be measured here
COLUMNS = [("target", "Target"), ("family", "Family"), ("op", "Op"), ("backend", "Backend"),
           ("config", "ACG config"), ("bound", "Bound"), ("intensity", "FLOP/B"),
           ("predicted", "Predicted"), ("measured", "Measured"), ("kernel", "Kernel")]


def _options() -> tuple[list[str], list[str]]:
    from uol_core.guide.families import FAMILIES
    from uol_core.guide.generate import shipped_targets

    return [*shipped_targets(), "host"], [f.name for f in FAMILIES]


def _chosen(raw: str | None, known: list[str], default: list[str] | None) -> list[str] | None:
    """The known names of a comma-separated query value (a link to chosen targets or
    families), else `default`."""
    picked = [name for name in (raw or "").split(",") if name in known]
    return picked or default


def layout(targets: str | None = None, families: str | None = None, **_query) -> html.Div:
    """Filters, the case table, and the selected case's constraints and knob moves;
    `?targets=a,b&families=x,y` opens the page on those."""
    target_names, family_names = _options()
    chosen_targets = _chosen(targets, target_names, DEFAULT_TARGETS)
    chosen_families = _chosen(families, family_names, None)
    field = lambda label, comp: html.Div([html.Label(label), comp])  # noqa: E731
    filters = html.Div([
        field("Targets", dcc.Dropdown(id="guide-targets", options=target_names, multi=True,
                                      value=chosen_targets, style={"minWidth": "320px"})),
        field("Families (blank: all)", dcc.Dropdown(
            id="guide-families", options=family_names, multi=True, value=chosen_families,
            style={"minWidth": "260px"})),
        field("Bound", dcc.Dropdown(id="guide-bound", options=["compute", "memory"],
                                    style={"width": "130px"})),
        html.Button("Download HTML", id="guide-download-button", className="secondary"),
        dcc.Download(id="guide-download"),
    ], className="toolbar")
    measure = html.Div([
        html.Button("Measure cases", id="guide-measure-button"),
        field("Cases per target", dcc.Input(id="guide-measure-limit", type="number", min=1,
                                            max=guide_measure.MAX_LIMIT, step=1,
                                            value=guide_measure.DEFAULT_LIMIT,
                                            style={"width": "70px"})),
        html.Progress(id="guide-measure-progress", value="0", max="1"),
        html.Span(guide_measure.measuring_where(), id="guide-measure-status",
                  className="muted"),
    ], className="toolbar")
    table = grid("guide-table", [], list(COLUMNS), selection="single", page_size=25,
                 links=("kernel",), height=640)
    return html.Div([
        html.H2("Optimisation guide"),
        html.Div("For every target and operator family: the config the ACG picks at typical "
                 "sizes, the constraints that bind, the roofline position, the predicted time "
                 "(model-predicted, labelled) and the measured time where the case ran: on "
                 "this host, or on a live worker of its target when the IDE runs with a "
                 "broker. A target's cases are built once (about 10 s) and then cached.",
                 className="muted"),
        html.Div([filters, measure], className="panel"),
        html.Div([html.Div(id="guide-summary", className="muted"),
                  dcc.Loading(table, delay_show=300)], className="panel"),
        html.Div([html.H3("Case"), html.Div(id="guide-detail", children=html.Div(
            "Select a row to see its binding constraints and one-knob moves.",
            className="muted"))], className="panel"),
        dcc.Store(id="guide-cases"),
        dcc.Store(id="guide-meta"),  # the loaded guide's target count and errors, for the summary
        dcc.Store(id="guide-measured", data={}),  # case id -> times measured from this page
    ])
