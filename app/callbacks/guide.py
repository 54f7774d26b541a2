"""Callbacks of the Guide page: build (or read cached) cases for the chosen targets, filter
them, show one case's constraints and knob moves, measure cases (this host's here, other
targets' on their live workers when the IDE runs with a broker), and export the shown cases
as HTML.

Deferred imports: a page's services load when it is first used, so the server starts fast.
"""

from __future__ import annotations

from dash import Input, Output, State, callback, html, no_update

from app.callbacks.guide_measure import not_measured


def _seconds(value: float | None) -> str:
    if not value:
        return "-"
    return f"{value * 1e3:.3g} ms" if value >= 1e-3 else f"{value * 1e6:.3g} µs"


def _where_short(label: str) -> str:
    """'here' or 'on worker NODE' from a measured label (the full label is in the detail)."""
    if label.startswith("measured on worker "):
        return "on worker " + label.split()[3]
    return "here" if label.startswith("measured on this host") else label


def case_row(case: dict) -> dict:
    """One table row of a case (the predicted time says it is a prediction, the measured one
    where it was measured)."""
    roof = case.get("roofline", {})
    intensity = roof.get("intensity")
    return {"id": case["id"], "target": case["target"], "family": case["family"],
            "op": case["op"], "backend": case["backend"],
            "config": ", ".join(f"{k}={v}" for k, v in case["config"].items()),
            "bound": str(roof.get("bound", "")),
            "intensity": f"{intensity:.3g}" if intensity is not None else "",
            "predicted": f"{_seconds(case['predicted_s'])} (predicted)",
            "measured": (f"{_seconds(case['measured_s'])} "
                         f"(measured {_where_short(case.get('measured_label', ''))})"
                         if case.get("measured_s") else "not measured"),
            "kernel": f"[open in Studio]({case['studio_link']})"}


@callback(Output("guide-cases", "data"), Output("guide-meta", "data"),
          Input("guide-targets", "value"), Input("guide-families", "value"))
def load_cases(targets, families):
    """The cases of the chosen targets and families (built on first use, then cached), and
    what the summary says of the guide beside them (targets, errors)."""
    from uol_core.guide.families import family
    from uol_core.guide.generate import generate

    if not targets:
        return [], {"message": "Choose one or more targets."}
    try:
        fams = [family(name) for name in families] if families else None
        guide = generate(list(targets), fams)
    except Exception as exc:  # a broken HFL record or target: say which, keep the page
        return [], {"error": f"Could not build the guide: {exc}"}
    return [c.to_dict() for c in guide.cases], {"targets": len(guide.targets),
                                                "errors": len(guide.errors)}


@callback(Output("guide-summary", "children"), Input("guide-cases", "data"),
          Input("guide-meta", "data"), Input("guide-measured", "data"))
def summarise(cases, meta, measured):
    """How many cases and how many measured: those of the tuning database and those measured
    from this page since it opened (the count follows each Measure)."""
    meta = meta or {}
    if meta.get("error"):
        return html.Span(meta["error"], className="odl-error")
    if meta.get("message"):
        return meta["message"]
    shown = with_measured(cases, measured)
    done = sum(1 for c in shown if c.get("measured_s"))
    illegal = sum(1 for c in shown if not c["legal"])
    return html.Span(
        f"{len(shown)} case{'s' if len(shown) != 1 else ''} ({meta.get('targets', 0)} "
        f"target{'s' if meta.get('targets', 0) != 1 else ''}); {done} measured (tuning "
        f"database and this page), the rest model-predicted"
        + (f"; {illegal} NOT LEGAL" if illegal else "")
        + (f"; {meta['errors']} could not be planned" if meta.get("errors") else ""),
        id="guide-summary-text")


def with_measured(cases: list[dict] | None, measured: dict | None) -> list[dict]:
    """The cases with the times measured from this page (case id -> measured fields)."""
    return [{**c, **(measured or {}).get(c["id"], {})} for c in cases or []]


@callback(Output("guide-table", "rowData"), Output("guide-table", "selectedRows"),
          Input("guide-cases", "data"), Input("guide-bound", "value"),
          Input("guide-measured", "data"))
def show_rows(cases, bound, measured):
    """Rows of the cases that pass the bound filter."""
    shown = [c for c in with_measured(cases, measured)
             if not bound or c["roofline"].get("bound") == bound]
    return [case_row(c) for c in shown], []


@callback(Output("guide-detail", "children"), Input("guide-table", "selectedRows"),
          State("guide-cases", "data"), State("guide-measured", "data"))
def show_case(selected, cases, measured):
    """The selected case: binding constraints, one-knob moves, roofline and time labels."""
    if not isinstance(selected, list) or not selected or not isinstance(selected[0], dict):
        return no_update
    case_id = selected[0].get("id")
    case = next((c for c in with_measured(cases, measured) if c["id"] == case_id), None)
    if case is None:
        return no_update
    roof = case["roofline"]
    moves = [html.Li(f"{m['knob']} {m['from']} → {m['to']}: "
                     + (f"×{m['ratio']:.2f} time (predicted)" if m.get("legal")
                        else f"illegal, {m.get('why', '')}"),
                     className="" if m.get("legal") else "odl-error")
             for m in case["knob_changes"]]
    return html.Div([
        html.H4(f"{case['family']} on {case['target']}", id="guide-detail-title"),
        html.Div(f"{case['op']} at " + ", ".join(f"{k}={v}" for k, v in case["sizes"].items())
                 + f"; {case['backend']} backend, {case['pattern']} pattern"),
        html.Div("config: " + ", ".join(f"{k}={v}" for k, v in case["config"].items())
                 + ("" if case["legal"] else "  (NOT LEGAL: " + "; ".join(case["violated"]) + ")")),
        html.Div(f"roofline: {roof.get('bound')}-bound"
                 + (f", {roof['intensity']:.3g} FLOP/B against a ridge of "
                    f"{roof['ridge_intensity']:.3g}" if roof.get("intensity") is not None else "")),
        html.Div(f"predicted {_seconds(case['predicted_s'])}: {case['prediction_label']}"),
        html.Div(f"measured {_seconds(case['measured_s'])}: {case['measured_label']}"
                 if case.get("measured_s") else not_measured(case),
                 id="guide-detail-measured"),
        html.H4("Binding constraints"),
        html.Ul([html.Li(b) for b in case["binding"]] or [html.Li("none: every knob can grow")]),
        html.H4("One-knob moves"),
        html.Ul(moves or [html.Li("no one-step move")]),
        html.A("Open this kernel in the Studio", href=case["studio_link"], id="guide-open-studio"),
    ])


@callback(Output("guide-download", "data"), Input("guide-download-button", "n_clicks"),
          State("guide-cases", "data"), State("guide-targets", "value"),
          State("guide-families", "value"), State("guide-measured", "data"),
          prevent_initial_call=True)
def download_html(_clicks, cases, targets, families, measured):
    """The shown cases as the offline HTML guide."""
    from profilers.guide_html import render_guide_html
    from uol_core.guide.families import FAMILIES

    fams = [{"name": f.name, "op": f.op, "sizes": f.sizes, "why": f.why} for f in FAMILIES
            if not families or f.name in families]
    text = render_guide_html({"cases": with_measured(cases, measured), "families": fams,
                              "targets": targets or []})
    return {"content": text, "filename": "uol-guide.html"}
