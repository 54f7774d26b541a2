"""Profiler callbacks: profile in the worker, draw flame / hotspots / timeline / roofline, compare runs.

Deferred imports: a page's services load when it is first used, so the server starts fast.
"""

from __future__ import annotations

import json

from dash import Input, Output, State, callback, no_update

from app.background import through_broker
from app.components.source_view import annotated_html, register_painter
from app.figures.studio import empty_figure
from profilers.report_render import hotspot_event

register_painter("line-hotspots")
register_painter("odl-hotspots")
MAX_TIMELINE_EVENTS = 400  # a torch trace has hundreds of tiny ops; the first ones tell the story


def hotspot_source_text(rep: dict) -> str:
    """Where the kernel's line costs came from (callgrind, or the cycle-counter build and why),
    or why there are none: the words the flame graph and hotspot panes show."""
    hot = rep.get("hotspots")
    if not hot:
        return "no per-line profile: " + (rep.get("hotspots_missing")
                                          or "; ".join(rep.get("notes", [])[-1:]) or "unknown")
    meta = hot.get("meta") or {}
    if meta.get("source", "callgrind") == "callgrind":
        return "source: callgrind instruction counts"
    why = f", because {meta['why']}" if meta.get("why") else ""
    return f"source: cycle counters in an instrumented build{why}"


@callback(Output("profile-current", "data"), Output("profile-status", "children"),
          Input("profile-run", "n_clicks"), State("profile-op", "value"),
          State("profile-sizes", "value"), State("current-target", "data"),
          running=[(Output("profile-run", "disabled"), True, False)],
          background=through_broker(),  # `uol serve --broker`: in the IDE's job worker
          prevent_initial_call=True)
def run_profile(_n, op, sizes, target):
    """Profile one op in the worker (the server never runs the kernel); errors shown in the page."""
    from app.services.profiling import op_to_profile, profile_op
    from app.services.system import activity
    from uol_core.odl.shapes import parse_shape_spec

    try:
        with activity(f"profile {op}"):
            res = profile_op(op_to_profile(op), parse_shape_spec(sizes or ""), target or "host")
    except Exception as exc:  # bad sizes and the like
        return no_update, f"✗ {exc}"
    if not res.get("ok"):
        return no_update, f"✗ {res.get('error')}"
    rep = res["report"]
    k = rep["runs"]["kernel"]
    ok = "verified" if rep["verification"]["ok"] else "WRONG RESULT"
    sizes_text = ",".join(f"{n}={v}" for n, v in rep["op"]["sizes"].items())
    return ({"id": res["id"], "has_last": True},
            f"✓ profiled run #{res['id']}: {rep['op']['name']} {sizes_text} on "
            f"{rep['target']['name']} {ok}, {k['median_s'] * 1e6:.1f} µs, "
            f"{k['gflops'] or 0:.3g} GFLOP/s ({rep['comparison']['verdict']}; "
            f"{hotspot_source_text(rep)})")


def _report(current: dict | None) -> dict | None:
    from app.services.profiling import load_profile

    if not current or not (current.get("id") or current.get("has_last")):
        return None
    return load_profile(current.get("id"))


@callback(Output("flame-graph", "figure"), Output("flame-matches", "children"),
          Output("flame-function", "options"), Output("flame-function", "value"),
          Output("flame-function", "style"),
          Input("profile-current", "data"), Input("flame-source", "value"),
          Input("flame-search", "value"), Input("flame-view", "value"),
          Input("speedscope-import", "data"), Input("import-profile", "value"),
          Input("flame-function", "value"), State("flame-function", "style"))
def draw_flame(current, source, search, view, imported, profile_index, function, style):
    """Icicle of compile + run, of the kernel's lines or of an imported speedscope file, in
    time order, left heavy, or as a sandwich cut at one function (its callers above, its
    callees below); frames matching the search in red."""
    from app.callbacks.profiler_flame import sandwich_choices, shown_tree
    from profilers.figures.charts import flame_icicle
    from profilers.figures.sandwich_chart import sandwich_figure

    style = {**(style or {}), "display": "block" if view == "sandwich" else "none"}
    tree, title = shown_tree(_report(current), source, imported, profile_index)
    if tree is None:
        return empty_figure(title), "", [], None, style
    options, function = sandwich_choices(tree, function)
    if view == "sandwich" and function:
        fig = sandwich_figure(tree, tuple(json.loads(function)), title=title)
        fig.update_layout(width=None)
        return fig, "", options, function, style
    if view == "left-heavy":
        tree.sort()
        title += " · left heavy"
    fig = flame_icicle(tree, title=title)
    fig.update_layout(width=None)
    if not search:
        return fig, "", options, function, style
    labels = list(fig.data[0].labels)
    hit = [search.lower() in (lab or "").lower() for lab in labels]
    fig.data[0].marker.colors = ["#d62728" if h else "#c7d4e8" for h in hit]
    return fig, f"{sum(hit)} frame(s) match '{search}'", options, function, style


@callback(Output("line-hotspots-html", "data"), Output("odl-hotspots-html", "data"),
          Output("hotspot-summary", "children"), Output("profile-timeline", "figure"),
          Input("profile-current", "data"))
def draw_hotspots(current):
    """Heat-coloured C source and ODL lines (share of Ir), and the reference timeline."""
    from profilers.figures.charts import timeline_chart
    from profilers.traces import Timeline

    rep = _report(current)
    if not rep:
        note = {"note": "Profile an operator to see per-line costs."}
        return note, note, "", empty_figure("timeline of the torch reference")
    hot = rep.get("hotspots")
    if rep.get("timeline"):
        tl = Timeline.from_dict(rep["timeline"])
        tl.events = tl.events[:MAX_TIMELINE_EVENTS]
        tfig = timeline_chart(tl)
        tfig.update_layout(width=None)
    else:
        tfig = empty_figure("no timeline: " + "; ".join(rep.get("notes", [])[-1:]))
    if not hot:
        note = {"note": hotspot_source_text(rep)}
        return note, note, "", tfig
    event, _ = hotspot_event(hot)
    what = "instructions" if event == "Ir" else event
    total = hot["total"].get(event) or 1
    blobs = []
    for rows, text, pane in ((hot["odl_lines"], rep["op"]["odl"], "hodl"),
                             (hot["kernel_lines"], rep.get("kernel_source", ""), "hc")):
        share = {r["line"]: r["costs"].get(event, 0) / total for r in rows if r["line"]}
        top = max(share.values(), default=0) or 1
        heat = {line: s / top for line, s in share.items()}
        notes = {line: f"{s:.1%} of {what}" for line, s in share.items()}
        lang = "odl" if pane == "hodl" else "c"
        blobs.append({"html": annotated_html(text, lang, pane, heat=heat, notes=notes)}
                     if text else {"note": "source not in the report"})
    best = max(hot["kernel_lines"], key=lambda r: r["costs"].get(event, 0), default=None)
    summary = (f"{total:,} {what} ({hotspot_source_text(rep)}); hottest C line {best['line']} "
               f"({best['costs'].get(event, 0) / total:.0%}, ODL line {best.get('odl_line')})"
               if best else "")
    return blobs[1], blobs[0], summary, tfig


@callback(Output("profile-roofline", "figure"), Output("compare-a", "options"),
          Output("compare-b", "options"), Output("compare-a", "value"),
          Output("compare-b", "value"), Input("profile-current", "data"))
def list_runs(_current):
    """Roofline of every timed run (profiled ones are not timed points); compare candidates
    named with op, sizes, target and mode, the newest like-with-like pair preselected."""
    from app.services.history import describe
    from app.services.profiling import comparable_runs, measured_runs, roofline_figure

    timed, rows = measured_runs(), comparable_runs()
    fig = roofline_figure(timed)  # the roofs even with no timed run yet
    fig.update_layout(width=None)
    if not rows:
        return fig, [], [], None, None
    opts = [{"label": describe(r), "value": r["id"]} for r in rows]
    newest = rows[0]
    alike = [r for r in rows[1:] if (r["op"], r["sizes"], r.get("mode")) ==
             (newest["op"], newest["sizes"], newest.get("mode"))]
    # the pinned baseline of the newest run's kind first, else the newest like run
    pinned = [r for r in alike if r.get("pinned") and (r["backend"], r["target"]) ==
              (newest["backend"], newest["target"])]
    a = (pinned or alike or rows[1:] or rows)[0]["id"]
    return fig, opts, opts, a, newest["id"]


@callback(Output("compare-graph", "figure"), Output("compare-text", "children"),
          Input("compare-a", "value"), Input("compare-b", "value"), prevent_initial_call=True)
def compare_runs(a, b):
    """Side-by-side time, GFLOP/s and per-ODL-line share of two runs."""
    from app.services import history
    from app.services.profiling import run_of
    from profilers.compare import compare
    from profilers.figures.charts import comparison_bars

    ra, rb = (history.get(a) if a else None), (history.get(b) if b else None)
    if not ra or not rb:
        return empty_figure("Pick two runs"), ""
    c = compare(run_of(ra), run_of(rb))
    fig = comparison_bars(c)
    fig.update_layout(width=None)
    return fig, c.verdict
