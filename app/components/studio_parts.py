"""Studio panels built from service results: knob panel, run result, run history with diff.

Deferred imports: what a panel or figure reads loads when first drawn, so the server starts fast.
"""

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
    # no time: say why (an emulated run is verified, never timed), never a bare "-"
    untimed = f"not timed: {res.get('error') or res.get('mode') or 'no measurement'}"
    rows = [("time (median)", _time_with_ci(res) if res.get("median_s") else untimed),
            ("IQR", _fmt_time(res.get("iqr_s"))),
            ("noise", _noise_badge(res)),
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
                                                         html.Span(v) if isinstance(v, str)
                                                         else v)], className="metrics"),
            html.Div([html.Span(f"run #{res.get('id')} · "),
                      dcc.Link("permalink", href=f"/run/{res.get('id')}", id="run-permalink"),
                      html.Span(" · "),
                      html.Button("Pin as baseline", id={"type": "pin-run", "run": res.get("id")},
                                  className="secondary", title="Later runs of this op, sizes, "
                                  "backend and target are compared with this one")
                      if res.get("median_s") else None,
                      ],
                     className="muted")]


def _time_with_ci(res: dict) -> str:
    """'1.234 ms (95% CI 1.201-1.262, n=57)': the median with its bootstrap interval."""
    text = _fmt_time(res.get("median_s"))
    if res.get("ci_low_s") and res.get("ci_high_s"):
        text += (f" (95% CI {_fmt_time(res['ci_low_s'])}-{_fmt_time(res['ci_high_s'])}, "
                 f"n={res.get('n', '?')})")
    elif res.get("median_s"):
        text += f" (n={res.get('n') or res.get('repeats') or res.get('reps') or '?'})"
    return text


def _noise_badge(res: dict):
    """'noisy' or 'quiet'; the tooltip gives the thresholds and the values (spread, load per
    core, CPU steal) that decided it."""
    if "noisy" not in res:
        return "-"
    return html.Span("⚠ noisy" if res["noisy"] else "quiet", title=res.get("noise_reason", ""),
                     id="run-noise", className="result-bad" if res["noisy"] else "")


def history_panel(runs: list[dict]) -> list:
    """The runs of this op (newest first) and a before/after diff of the last two."""
    if not runs:
        return [html.Div("No runs of this op yet.", className="muted")]
    from app.services.history import baseline_for, describe, timing

    def noise(r: dict):
        t = timing(r) if r.get("median_s") else {}
        if "noisy" not in t:
            return ""
        return html.Span("⚠ noisy" if t["noisy"] else "quiet", title=t.get("noise_reason", ""))

    # each run named fully (sizes, backend/target, mode): runs of other sizes are told apart
    table = html.Table([html.Tr([html.Th(h) for h in ("run", "ok", "GFLOP/s", "noise")])]
                       + [html.Tr([html.Td([dcc.Link(describe(r), href=f"/run/{r['id']}"),
                                            " 📌 baseline" if r.get("pinned") else ""]),
                                   html.Td("✓" if r["ok"] else "✗"),
                                   html.Td(_fmt_rate(r["gflops"])), html.Td(noise(r))])
                          for r in runs[:8]], className="simple", id="history-table")
    out = [table]
    try:  # the pinned baseline of the newest run's kind, else the run before it
        pinned = baseline_for(runs[0]) if "result" in runs[0] else None
    except Exception:  # an unreadable history must not hide the table
        pinned = None
    before = pinned or previous_alike(runs)
    if before is not None:
        out.append(run_diff(before, runs[0]))
    return out


def previous_alike(runs: list[dict]) -> dict | None:
    """The run to diff the newest against: the newest earlier run of the same sizes, backend
    and target (a knob diff between a C and a Triton kernel says nothing), else the run before
    it, else None."""
    if len(runs) < 2:
        return None
    newest = runs[0]
    for row in runs[1:]:
        if all(row.get(k) == newest.get(k) for k in ("sizes", "backend", "target")):
            return row
    return runs[1]


def run_diff(before: dict, after: dict) -> html.Div:
    """Knob changes, time change and the kernel text diff between two runs."""
    from app.services.history import diff_configs

    changes = diff_configs(before["config"], after["config"])
    knob_text = ", ".join(f"{k}: {a} → {b}" for k, a, b in changes) or "no knob changed"
    from app.services.history import compare_rows

    speed = ""
    alike = all(before.get(k) == after.get(k) for k in ("sizes", "target", "mode", "machine"))
    if not alike:
        speed = "; not timed alike (sizes, target, mode or machine differ): times not compared"
    elif before.get("median_s") and after.get("median_s"):
        # never a bare ratio of medians: the bootstrap says whether it is a difference at all
        speed = f"; time {_fmt_time(before['median_s'])} → {_fmt_time(after['median_s'])}: " \
                f"{compare_rows(before, after)}"
    lines = list(difflib.unified_diff(before.get("kernel", "").splitlines(),
                                      after.get("kernel", "").splitlines(),
                                      f"run {before['id']}", f"run {after['id']}", n=1,
                                      lineterm=""))
    body = [html.Span(line + "\n", className="add" if line.startswith("+") else
                      "del" if line.startswith("-") else "") for line in lines[:200]]
    base = " (pinned baseline)" if before.get("pinned") else ""
    return html.Div([html.H3(f"Diff: run #{before['id']}{base} → #{after['id']}"),
                     html.Div(knob_text + speed, id="diff-summary"),
                     html.Div(body or "kernels identical", className="diff")], id="run-diff")
