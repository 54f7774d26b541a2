"""Reports page: run history with filters, export of a run or a comparison (HTML, PDF, MD, JSON).

Deferred imports: a page's services load when it is first drawn, so the server starts fast.
"""

from __future__ import annotations

import dash
from dash import Input, Output, State, callback, dcc, html

from app.components.grids import grid, selected_ids

dash.register_page(__name__, path="/reports", name="Reports", title="UOL Studio: Reports",
                   order=6)

RUN_COLUMNS = [("id", "#"), ("open", "permalink"), ("when", "when"), ("kind", "kind"),
               ("op", "op"), ("sizes", "sizes"), ("backend", "backend"), ("target", "target"),
               ("mode", "mode"), ("ok", "ok"), ("time_ms", "time (ms)"),
               ("ci_ms", "95% CI (ms)"), ("noisy", "noisy"), ("gflops", "GFLOP/s"),
               ("config", "config"), ("machine", "machine"), ("pinned", "baseline")]


def _rows(op=None, backend=None, target=None, ok=None) -> list[dict]:
    import time

    from app.services import history

    out = []
    for r in history.runs(op or None, backend or None, target or None,
                          None if ok in (None, "any") else ok == "ok"):
        t = history.timing(r)
        out.append({"ci_ms": (f"{t['ci_low_s'] * 1e3:.4g}-{t['ci_high_s'] * 1e3:.4g}"
                              if t.get("ci_low_s") else "no samples" if t else ""),
                    "noisy": "" if "noisy" not in t else "⚠ yes" if t["noisy"] else "no",
                    "noise_reason": t.get("noise_reason", ""),
                    "pinned": "📌 pinned" if r.get("pinned") else "",
                    "id": r["id"], "open": f"[/run/{r['id']}](/run/{r['id']})",
                    "when": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["created"])),
                    "kind": r["kind"], "op": r["op"], "sizes": history.sizes_text(r["sizes"]),
                    "backend": r["backend"], "target": r["target"], "mode": r["mode"],
                    "machine": r["machine"], "ok": "✓" if r["ok"] else "✗",
                    "time_ms": round(r["median_s"] * 1e3, 4) if r["median_s"] else None,
                    "gflops": round(r["gflops"], 3) if r["gflops"] else None,
                    "config": ", ".join(f"{k}={v}" for k, v in r["config"].items())})
    return out


TUNING_COLUMNS = [("id", "#"), ("when", "when"), ("op", "op"), ("sizes", "sizes"),
                  ("target", "target"), ("config", "config"), ("status", "status"),
                  ("reason", "reason"), ("time_ms", "time (ms)"), ("gflops", "GFLOP/s")]


def _tuning_rows(rows: list[dict]) -> list[dict]:
    """The tuning database's rows as people read them: a date, sizes as M=..,N=.., a time in ms
    and GFLOP/s to four significant digits (the raw row has epoch seconds and JSON)."""
    import json
    import time

    def sizes(text: str) -> str:
        try:
            return ",".join(f"{k}={v}" for k, v in json.loads(text).items())
        except (TypeError, ValueError, AttributeError):
            return str(text)

    return [{"id": r["id"], "when": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["ts"])),
             "op": r["op_name"], "sizes": sizes(r["shapes"]), "target": r["target"],
             "config": r["config"], "status": r["status"], "reason": r["reason"],
             "time_ms": float(f"{r['median_s'] * 1e3:.4g}") if r["median_s"] else None,
             "gflops": float(f"{r['gflops']:.4g}") if r["gflops"] else None} for r in rows]


def layout(**_query) -> html.Div:
    """Filters, the runs table, export controls, and the tuning database's rows."""
    from app.services import history

    try:
        rows = _rows()
        tuning = history.tuning_rows()
    except Exception as exc:  # a damaged database: shown, the page still loads
        rows, tuning = [], []
        note = f"history unavailable: {exc}"
    else:
        note = ""
    opts = lambda key: sorted({r[key] for r in rows})  # noqa: E731
    return html.Div([
        html.H2("Reports"),
        html.Div(note, className="odl-error"),
        html.Div([
            html.Div([html.Label("op"), dcc.Dropdown(id="filter-op", options=opts("op"),
                                                     className="dropdown")]),
            html.Div([html.Label("backend"), dcc.Dropdown(id="filter-backend",
                                                          options=opts("backend"),
                                                          className="dropdown")]),
            html.Div([html.Label("target"), dcc.Dropdown(id="filter-target",
                                                         options=opts("target"),
                                                         className="dropdown")]),
            html.Div([html.Label("result"), dcc.Dropdown(id="filter-ok", value="any",
                                                         options=["any", "ok", "failed"],
                                                         clearable=False,
                                                         className="dropdown")]),
            html.Div([html.Label("format"), dcc.Dropdown(id="export-format", value="html",
                                                         clearable=False, className="dropdown",
                                                         options=[{"label": f.upper(),
                                                                   "value": f} for f in
                                                                  ("html", "pdf", "md",
                                                                   "json")])]),
            html.Button("Export selected", id="export-button"),
            html.Button("Pin selected as baseline", id="pin-button", className="secondary",
                        title="Comparisons of this op, sizes, backend and target use it"),
            dcc.Download(id="export-download"),
        ], className="toolbar"),
        html.Div("Select one run to export it (compared with its pinned baseline when one "
                 "is pinned), two to export a comparison (the older is the baseline). Runs of "
                 "the same op and sizes compare by time, with a 95% confidence interval or "
                 "'no significant difference'; others by GFLOP/s (the report says so); "
                 "profiled runs by their per-line costs only. Hover 'noisy' for why.",
                 className="muted"),
        html.Div(id="export-status", className="muted"),
        html.Div(grid("runs-table", rows, RUN_COLUMNS, selection="multi", links=("open",),
                      tooltips={"noisy": "noise_reason"}), className="panel"),
        html.H3("Tuning database (every tuner measurement)"),
        html.Div(grid("tuning-table", _tuning_rows(tuning), TUNING_COLUMNS, page_size=10,
                      height=420), className="panel"),
    ])


@callback(Output("runs-table", "rowData"), Output("runs-table", "selectedRows"),
          Input("filter-op", "value"), Input("filter-backend", "value"),
          Input("filter-target", "value"), Input("filter-ok", "value"),
          prevent_initial_call=True)
def filter_runs(op, backend, target, ok):
    """Re-query the history with the filters (the selection is cleared)."""
    return _rows(op, backend, target, ok), []


@callback(Output("runs-table", "rowData", allow_duplicate=True),
          Output("export-status", "children", allow_duplicate=True),
          Input("pin-button", "n_clicks"), State("runs-table", "selectedRows"),
          State("filter-op", "value"), State("filter-backend", "value"),
          State("filter-target", "value"), State("filter-ok", "value"),
          prevent_initial_call=True)
def pin_selected(_clicks, selected, op, backend, target, ok):
    """Pin the selected run as the baseline of its kind (op, sizes, backend, target)."""
    from app.services import history

    ids = selected_ids(selected)
    if len(ids) != 1:
        return dash.no_update, "Select one run to pin it as the baseline."
    try:
        history.pin(ids[0])
    except KeyError as exc:
        return dash.no_update, f"✗ {exc.args[0]}"
    return (_rows(op, backend, target, ok),
            f"📌 run #{ids[0]} is the baseline of its op, sizes, backend and target")


@callback(Output("export-download", "data"), Output("export-status", "children"),
          Input("export-button", "n_clicks"), State("runs-table", "selectedRows"),
          State("export-format", "value"), prevent_initial_call=True)
def export_selected(_clicks, selected, fmt):
    """Build the report of the selected run (or the comparison of two) and download it."""
    from app.services import history, reports

    ids = sorted(selected_ids(selected)[:2])
    if not ids:
        return dash.no_update, "Select a run first (tick its box)."
    try:
        runs = [history.get(i) for i in ids]
        if None in runs:
            return dash.no_update, "✗ a selected run is no longer in the history"
        # one run: compared with its pinned baseline where there is one
        other, row = (runs[0], runs[1]) if len(runs) == 2 else \
            (history.baseline_for(runs[0]), runs[0])
        data, name = reports.export(row, fmt, other)
    except Exception as exc:  # e.g. no Chromium for PDF: say so, keep serving
        return dash.no_update, f"✗ export failed: {type(exc).__name__}: {exc}"
    return dcc.send_bytes(data, name), f"✓ exported {name} ({len(data) // 1024} KiB)"
