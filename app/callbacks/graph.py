"""Graph callbacks: open a graph, draw it, run it in the worker, open a clicked node in the Studio."""

from __future__ import annotations

import base64
import json

from dash import Input, Output, State, callback, ctx, html, no_update

from app.figures.studio import empty_figure


def _figure(structure: dict, report: dict | None, selected: str | None = None):
    import networkx as nx

    from profilers.figures.graphs import operator_graph

    g = nx.DiGraph()
    g.add_nodes_from(structure["nodes"])
    g.add_edges_from(tuple(e) for e in structure["edges"])
    times = {}
    for row in (report or {}).get("rows", []):
        for n in row["nodes"]:  # a fused group's time belongs to each of its nodes
            times[n] = row["ms"]
    title = structure["name"] + (f": {report['total_ms']:.2f} ms" if report else "")
    fig = operator_graph(g, times, structure["groups"], structure["labels"], selected, title)
    return fig


@callback(Output("graph-upload-data", "data"), Output("graph-kind", "value"),
          Output("graph-status", "children", allow_duplicate=True),
          Input("graph-upload", "contents"), State("graph-upload", "filename"),
          prevent_initial_call=True)
def upload_graph(contents, filename):
    """An uploaded graph JSON (size-capped by the Upload); validation happens when opened."""
    try:
        data = json.loads(base64.b64decode((contents or ",").split(",", 1)[1]))
    except (ValueError, UnicodeDecodeError) as exc:
        return no_update, no_update, f"✗ {filename}: not JSON ({exc})"
    return data, "upload", f"uploaded {filename}"


@callback(Output("graph-source", "data"), Output("graph-structure", "data"),
          Output("graph-report", "data"), Output("graph-status", "children"),
          Input("graph-kind", "value"), Input("graph-sample", "value"),
          Input("graph-model", "value"), Input("graph-upload-data", "data"))
def open_graph(kind, sample, model, uploaded):
    """Load and validate the chosen graph and plan its fusion (no kernel runs here)."""
    from app.services.graphs import load_graph_source, structure

    source = {"kind": kind, "name": sample if kind == "sample" else model}
    if kind == "upload":
        if not uploaded:
            return no_update, no_update, no_update, "upload a graph JSON"
        source = {"kind": "upload", "data": uploaded}
    try:
        s = structure(load_graph_source(source))
    except Exception as exc:  # validation errors name node and edge: show them as they are
        return no_update, None, None, f"✗ {exc}"
    # how it was imported: torch.export or the fx fallback with export's reason, folded norms
    how = f" · {s['description'][:300]}" if s.get("description") else ""
    groups = len(set(s["groups"].values()))
    steps = (f"{s['kernels']} kernels after fusion" if s.get("kernels") == groups else
             f"{groups} steps after fusion ({s['kernels']} kernels, the rest torch)"
             if s.get("kernels") is not None else f"{groups} groups")
    return source, s, None, f"{s['name']}: {len(s['nodes'])} nodes, {steps}{how}"


@callback(Output("graph-view", "figure"), Output("graph-fusion", "children"),
          Input("graph-structure", "data"), Input("graph-report", "data"))
def draw(structure, report):
    """The layered graph, coloured by time once run; the fusion decisions as a short list."""
    if not structure:
        return empty_figure("Open a graph"), ""
    fig = _figure(structure, report)
    items = [html.Li(("✓ " if d.get("fused") else "✗ ")
                     + f"{d.get('producer', '')} ← {d.get('consumer', '')}: {d.get('reason', '')}")
             for d in structure["decisions"][:30]]
    return fig, html.Ul(items) if items else "no fusion candidates"


@callback(Output("graph-report", "data", allow_duplicate=True), Output("graph-times", "figure"),
          Output("graph-summary", "children"),
          Input("graph-run-button", "n_clicks"), State("graph-source", "data"),
          State("current-target", "data"),
          running=[(Output("graph-run-button", "disabled"), True, False)],
          prevent_initial_call=True)
def run_graph(_n, source, target):
    """Compile, run, verify and time every group in the worker, against torch eager."""
    from app.services.graphs import check_source, run
    from app.services.system import activity
    from profilers.figures.graphs import node_time_bars
    from uol_core.graph import GraphError
    from uol_core.hfl import HflError, target_name

    if not source:
        return no_update, empty_figure("open a graph first"), ""
    try:  # names from their closed sets, before the sandbox starts
        check_source(source)
        target_name(target or "host")
    except (GraphError, HflError) as exc:
        return no_update, empty_figure("run refused"), html.Div(f"✗ {exc}", className="result-bad")
    with activity("graph run"):
        res = run(source, target or "host")
    if not res.get("ok"):
        return no_update, empty_figure("run failed"), html.Div(f"✗ {res.get('error')}",
                                                               className="result-bad")
    rep = res["report"]
    fig = node_time_bars(rep["rows"])
    fig.update_layout(width=None)
    verdict = "verified" if rep["verified"] else "WRONG RESULT"
    cls = "result-ok" if rep["verified"] else "result-bad"
    summary = html.Div([
        html.Span(f"{verdict} against {rep['against']} (max rel. error "
                  f"{rep['max_rel_error']:.1e})", className=cls, id="graph-verdict"),
        html.P((f"whole graph {rep['total_ms']:.2f} ms vs torch eager "
                f"{rep['torch_eager_ms']:.2f} ms ({rep['speedup_vs_eager']:.2f}x); "
                if rep.get("torch_eager_ms") is not None else
                f"whole graph {rep['total_ms']:.2f} ms ({rep.get('speed_baseline', '')}); ")
               + f"hotspots: {', '.join(rep['hotspots'])}"),
        # where a wrong result starts (the first group, replay step or import node that differs)
        *([html.P(rep["mismatch"]["message"], className="result-bad", id="graph-mismatch")]
          if rep.get("mismatch") else []),
        *[html.P(f"opaque: {o['node']} ({o['source']}) runs in torch: {o['reason']}",
                 className="graph-opaque") for o in rep.get("opaque", [])]])
    return rep, fig, summary


@callback(Output("graph-nav", "href"), Output("graph-node-info", "children"),
          Input("graph-view", "clickData"), State("graph-source", "data"),
          prevent_initial_call=True)
def open_node(click, source):
    """Open the clicked node's operator in the Studio (a history entry: /run/<id>)."""
    from app.services.graphs import open_in_studio

    point = (click or {}).get("points", [{}])[0]
    data = point.get("customdata")
    if not source or not isinstance(data, list) or not data:
        return no_update, no_update
    try:
        rid = open_in_studio(source, str(data[0]))
    except (KeyError, ValueError) as exc:  # a torch node: nothing to open, say why
        return no_update, html.Span(str(exc), className="muted")
    if ctx.triggered_id is None:
        return no_update, no_update
    return f"/run/{rid}", f"opening {data[0]} in the Studio (run #{rid})"
