"""Hardware page: HFL targets as a sortable table with provenance, rooflines, the host probe.

Deferred imports: a page's services load when it is first drawn, so the server starts fast.
"""

from __future__ import annotations

import dash
from dash import Input, Output, callback, dcc, html

from app.components.grids import grid
from app.services import hardware

dash.register_page(__name__, path="/hardware", name="Hardware", title="UOL Studio: Hardware",
                   order=5)

DEFAULT_ROOFS = ["host", "xeon-spr-8480", "epyc-genoa-9654", "h100-sxm"]
PEAKS = ("fp32", "fp64", "bf16", "fp16")  # the HFL peaks a roofline may compare


def _table() -> html.Div:
    rows, errors = hardware.target_rows(hardware.targets())
    cols = list(hardware.COLUMNS)
    return html.Div([
        grid("hardware-table", rows, [(c, c) for c in cols], page_size=None, row_id="name",
             tooltips={c: f"{c} (source)" for c in cols[2:-1]},
             numeric=tuple(c for c in cols if c not in ("name", "kind"))),
        html.Div(errors and ["Targets that failed to load: ", *errors], className="odl-error"),
        html.Div("Click a cell to see the provenance of that target's numbers "
                 "(datasheet with source, measured by the probe, or assumed).", className="muted"),
        html.Div(id="hardware-provenance"),
    ])


def layout(**_query) -> html.Div:
    """Targets table, overlaid rooflines and the host probe."""
    try:
        table = _table()
        names = [*hardware.targets(), "host"]
    except Exception as exc:  # the page shows a broken HFL instead of failing
        table, names = html.Pre(f"HFL unavailable: {exc}", className="odl-error"), ["host"]
    cached = hardware.cached_probe()
    return html.Div([
        html.H2("Hardware (HFL targets)"),
        html.Div(table, className="panel"),
        html.Div([
            html.Div([html.H3("Rooflines"),
                      dcc.Dropdown(id="hardware-roof-select", options=names, multi=True,
                                   value=[n for n in DEFAULT_ROOFS if n in names]),
                      # the peak compared: a bf16 GEMM runs on other units (AMX, VDPBF16PS,
                      # tensor cores) than f32 vector code
                      dcc.RadioItems(id="hardware-roof-dtype", options=list(PEAKS),
                                     value="fp32", inline=True, className="muted"),
                      # responsive: the shared chart's fixed export width would spill
                      # out of the panel on a narrower window
                      dcc.Graph(id="hardware-roofline",
                                config={"displayModeBar": False, "responsive": True},
                                style={"height": "440px"})],
                     className="panel"),
            html.Div([html.H3("Host probe"),
                      html.Div([html.Button("Run host probe", id="probe-button"),
                                html.Progress(id="probe-progress", value="0", max="1"),
                                html.Span(id="probe-step", className="muted")],
                               className="toolbar"),
                      html.Div(_facts(cached) if cached else "The host was not probed yet.",
                               id="probe-result")], className="panel"),
        ], className="studio-grid", style={"gridTemplateColumns": "minmax(0, 1.4fr) minmax(0, 1fr)",
                                           "marginTop": "10px"}),
    ])


def _facts(record: dict) -> html.Div:
    """A target record's numbers with provenance, as a small table."""
    rows = [html.Tr([html.Th("field"), html.Th("value"), html.Th("provenance")])]
    for name, f in record.get("fields", {}).items():
        value = ", ".join(map(str, f["value"])) if isinstance(f["value"], list) else str(f["value"])
        rows.append(html.Tr([html.Td(name), html.Td(value),
                             # long paths and manual titles may break anywhere
                             html.Td(f"{f['prov']}: {f['source']}" if f["source"] else f["prov"],
                                     style={"overflowWrap": "anywhere"})]))
    # a table wider than its panel scrolls inside it (its grid column stays put)
    return html.Div(html.Table(rows, className="simple", id="probe-facts"),
                    style={"overflowX": "auto"})


@callback(Output("hardware-roofline", "figure"), Input("hardware-roof-select", "value"),
          Input("hardware-roof-dtype", "value"))
def draw_rooflines(names, dtype):
    """One roof per selected target at the chosen peak, overlaid (the shared profilers chart)."""
    from app.figures.studio import empty_figure

    if not names:
        return empty_figure("Pick targets to compare their rooflines")
    if dtype not in PEAKS:
        dtype = "fp32"
    try:
        return hardware.roofline_for(names, dtype)
    except Exception as exc:
        return empty_figure(f"roofline unavailable: {exc}")


@callback(Output("hardware-provenance", "children"), Input("hardware-table", "cellClicked"),
          prevent_initial_call=True)
def show_provenance(cell):
    """Every number of the clicked target with its provenance."""
    from uol_core.hfl import list_targets, load_target

    name = cell.get("rowId") if isinstance(cell, dict) else None
    if name not in list_targets():  # only a row the table offered: a target's name
        return ""
    try:
        return html.Div([html.H3(f"{name}: provenance"), _facts(load_target(name).to_dict())])
    except Exception as exc:
        return html.Pre(f"{name}: {exc}", className="odl-error")


@callback(Output("probe-result", "children"), Input("probe-button", "n_clicks"),
          background=True, prevent_initial_call=True,
          running=[(Output("probe-button", "disabled"), True, False)],
          progress=[Output("probe-progress", "value"), Output("probe-step", "children")])
def run_probe(set_progress, _clicks):
    """Measure the host (quick probe) in a background job; progress shows the current step."""
    from app.services.system import activity

    def step(what: str, fraction: float) -> None:
        set_progress((f"{fraction:.2f}", what))

    try:
        with activity("host probe"):
            record = hardware.probe(refresh=True, progress=step)
    except Exception as exc:  # gcc missing, a failed measurement: shown, not raised
        return html.Pre(f"probe failed: {type(exc).__name__}: {exc}", className="odl-error")
    set_progress(("1", "done"))
    return _facts(record)
