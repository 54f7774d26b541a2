"""Studio panels built from service results: knob panel, run result, run history with diff."""

from __future__ import annotations

import difflib

from dash import dcc, html


def knob_panel(knobs: list[dict], hidden: list[dict] | None = None) -> list:
    """One dropdown per knob; values a constraint forbids are disabled and say which constraint.
    Knobs of the space that change nothing in this kernel (`hidden`) are named, with why."""
    note = html.Div([html.Div("Not offered (they change nothing in this kernel):"),
                     html.Ul([html.Li(f"{h['name']}: {h['reason']}") for h in hidden])],
                    className="muted knob-hidden", id="knobs-hidden") if hidden else None
    if not knobs:
        return [html.Div("This kernel has no knobs with a choice on this target.",
                         className="muted"), note]
    rows = []
    for knob in knobs:
        options = [{"label": f"{o['value']}" + ("  ✕ " + o["reason"].split(":")[0]
                                                 if o["disabled"] else ""),
                    "value": o["value"], "disabled": o["disabled"],
                    "title": o["reason"] or "legal with the other knobs"}
                   for o in knob["options"]]
        forbidden = [f"{o['value']}: {o['reason']}" for o in knob["options"] if o["disabled"]]
        rows.append(html.Div([
            html.Label(knob["name"], className="field-label"),
            dcc.Dropdown(id={"type": "knob", "name": knob["name"]}, options=options,
                         value=knob["value"], clearable=False, searchable=False),
            html.Details([html.Summary(f"{len(forbidden)} forbidden with the other knobs"),
                          html.Ul([html.Li(f) for f in forbidden[:12]])],
                         className="knob-forbidden") if forbidden else None,
        ], className="knob", **{"data-knob": knob["name"]}))
    return [*rows, note]


def _fmt_time(seconds: float | None) -> str:
    if not seconds:
        return "-"
    return f"{seconds * 1e3:.3f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.1f} us"


def _fmt_rate(value: float | None) -> str:
    """A rate to four significant digits: a tiny kernel's 0.0013 GFLOP/s must not read 0.00."""
    return f"{value:.4g}" if value else "-"


def _fmt_error(error) -> str:
    """The largest deviation from the reference: absolute and relative, three digits each
    (the worker reports a dict; older runs a bare number)."""
    if isinstance(error, dict):
        return " · ".join(f"{k} {v:.2e}" for k, v in error.items() if isinstance(v, (int, float)))
    return "-" if error is None else (f"{error:.2e}" if isinstance(error, float) else str(error))


def run_result(res: dict) -> list:
    """Correctness, time, GFLOP/s, GB/s and roofline position of one run (or its error)."""
    if res.get("error") and not res.get("ok"):
        return [html.Div("✗ failed", className="result-bad", id="run-verdict"),
                html.Pre(res["error"], className="odl-error", id="run-error"),
                html.Div(f"run #{res.get('id', '?')} recorded; the server keeps serving.",
                         className="muted")]
    verdict = "✓ correct" if res.get("ok") else "✗ wrong result"
    roof = res.get("roofline") or {}
    frac = roof.get("fraction_of_roofline")
    rows = [("time (median)", _fmt_time(res.get("median_s"))),
            ("IQR", _fmt_time(res.get("iqr_s"))),
            ("GFLOP/s", _fmt_rate(res.get("gflops"))),
            ("GB/s", _fmt_rate(res.get("gbs"))),
            ("roofline", f"{roof.get('bound', '?')}-bound, attainable "
                         f"{roof.get('attainable_gflops', 0):.1f} GFLOP/s"
                         + (f" ({roof['dtype']} peak)" if roof.get("dtype", "fp32") != "fp32"
                            else "")
                         + (f", achieved {100 * frac:.1f}%" if frac else "")
                         + (" (over the memory roof, DRAM's: the data stayed in a cache "
                            "between the timed calls)"
                            if frac and frac > 1 and roof.get("bound") == "memory" else "")),
            ("mode", res.get("mode", "")), ("max error", _fmt_error(res.get("max_error")))]
    return [html.Div(verdict, className="result-ok" if res.get("ok") else "result-bad",
                     id="run-verdict"),
            html.Div([item for k, v in rows for item in (html.Span(k, className="muted"),
                                                         html.Span(v))], className="metrics"),
            html.Div([html.Span(f"run #{res.get('id')} · "),
                      dcc.Link("permalink", href=f"/run/{res.get('id')}", id="run-permalink")],
                     className="muted")]


def history_panel(runs: list[dict]) -> list:
    """The runs of this op (newest first) and a before/after diff of the last two."""
    if not runs:
        return [html.Div("No runs of this op yet.", className="muted")]
    from app.services.history import describe

    # each run named fully (sizes, backend/target, mode): runs of other sizes are told apart
    table = html.Table([html.Tr([html.Th(h) for h in ("run", "ok", "GFLOP/s")])]
                       + [html.Tr([html.Td(dcc.Link(describe(r), href=f"/run/{r['id']}")),
                                   html.Td("✓" if r["ok"] else "✗"),
                                   html.Td(_fmt_rate(r["gflops"]))])
                          for r in runs[:8]], className="simple", id="history-table")
    out = [table]
    if len(runs) >= 2:
        out.append(run_diff(runs[1], runs[0]))
    return out


def run_diff(before: dict, after: dict) -> html.Div:
    """Knob changes, time change and the kernel text diff between two runs."""
    from app.services.history import diff_configs

    changes = diff_configs(before["config"], after["config"])
    knob_text = ", ".join(f"{k}: {a} → {b}" for k, a, b in changes) or "no knob changed"
    speed = ""
    alike = all(before.get(k) == after.get(k) for k in ("sizes", "target", "mode", "machine"))
    if not alike:
        speed = "; not timed alike (sizes, target, mode or machine differ): times not compared"
    elif before.get("median_s") and after.get("median_s"):
        speed = f"; time {_fmt_time(before['median_s'])} → {_fmt_time(after['median_s'])} " \
                f"({before['median_s'] / after['median_s']:.2f}x)"
    lines = list(difflib.unified_diff(before.get("kernel", "").splitlines(),
                                      after.get("kernel", "").splitlines(),
                                      f"run {before['id']}", f"run {after['id']}", n=1,
                                      lineterm=""))
    body = [html.Span(line + "\n", className="add" if line.startswith("+") else
                      "del" if line.startswith("-") else "") for line in lines[:200]]
    return html.Div([html.H3(f"Diff: run #{before['id']} → #{after['id']}"),
                     html.Div(knob_text + speed, id="diff-summary"),
                     html.Div(body or "kernels identical", className="diff")], id="run-diff")
