"""Graph callbacks: open a graph, draw it, run it in the worker, open a clicked node in the Studio.

Deferred imports: a page's services load when it is first used, so the server starts fast.
"""

from __future__ import annotations

import base64
import json

from dash import Input, Output, State, callback, ctx, html, no_update

from app.figures.studio import empty_figure


def _first_line(exc: Exception) -> str:
    """An error as the status line shows it: one line (an exporter's message can run to pages)."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:400]


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
          Input("graph-model", "value"), Input("graph-upload-data", "data"),
          Input("graph-zoo", "value"), Input("graph-zoo-size", "value"),
          Input("graph-zoo-batch", "value"))
def open_graph(kind, sample, model, uploaded, zoo, size, batch):
    """Load and validate the chosen graph and plan its fusion (no kernel runs here); a zoo
    model is built and imported in the graph worker, never in the server."""
    from app.services.graph_zoo import open_zoo, zoo_source
    from app.services.graphs import load_graph_source, structure

    zoo_field = ctx.triggered_id in ("graph-zoo", "graph-zoo-size", "graph-zoo-batch")
    if (kind == "zoo") != zoo_field and ctx.triggered_id not in (None, "graph-kind"):
        return no_update, no_update, no_update, no_update  # a field of another kind changed
    source = {"kind": kind, "name": sample if kind == "sample" else model}
    if kind == "upload":
        if not uploaded:
            return no_update, no_update, no_update, "upload a graph JSON"
        source = {"kind": "upload", "data": uploaded}
    try:
        if kind == "zoo":
            source = zoo_source(zoo, size, batch)
            s = open_zoo(source)
        else:
            s = structure(load_graph_source(source))
    except Exception as exc:  # validation errors name node and edge: show them as they are
        return no_update, None, None, f"✗ {_first_line(exc)}"
    # how it was imported: torch.export or the fx fallback with export's reason, folded norms
    how = f" · {s['description'][:300]}" if s.get("description") else ""
    groups = len(set(s["groups"].values()))
    steps = (f"{s['kernels']} kernels after fusion" if s.get("kernels") == groups else
             f"{groups} steps after fusion ({s['kernels']} kernels, the rest torch)"
             if s.get("kernels") is not None else f"{groups} groups")
    opaque = f", {len(s.get('opaque') or [])} opaque" if kind == "zoo" else ""
    return source, s, None, f"{s['name']}: {len(s['nodes'])} nodes{opaque}, {steps}{how}"


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


@callback(Output("graph-opaque-panel", "children"), Input("graph-structure", "data"))
def list_opaque(structure):
    """The import's opaque nodes (node, aten op, reason), or that there are none."""
    from app.callbacks.graph_views import opaque_panel

    if not structure:
        return "open a graph to see which of its nodes stay in torch"
    return opaque_panel(structure.get("opaque"))


@callback(Output("graph-report", "data", allow_duplicate=True), Output("graph-times", "figure"),
          Output("graph-summary", "children"), Output("graph-peers-view", "children"),
          Input("graph-run-button", "n_clicks"), State("graph-source", "data"),
          State("current-target", "data"), State("graph-peers", "value"),
          running=[(Output("graph-run-button", "disabled"), True, False)],
          prevent_initial_call=True)
def run_graph(_n, source, target, peers):
    """Compile, run, verify and time every group in the worker, against torch eager; a zoo
    model with the peers ticked also beside torch.compile, ONNX Runtime and OpenVINO."""
    from app.callbacks.graph_views import peers_view, per_group_line, whole_graph_line
    from app.services.graph_zoo import run_zoo
    from app.services.graphs import check_source, run
    from app.services.system import activity
    from profilers.figures.graphs import node_time_bars
    from uol_core.graph import GraphError
    from uol_core.hfl import HflError, target_name

    if not source:
        return no_update, empty_figure("open a graph first"), "", no_update
    try:  # names from their closed sets, before the sandbox starts
        kind = check_source(source)
        target_name(target or "host")
    except (GraphError, HflError) as exc:
        return (no_update, empty_figure("run refused"),
                html.Div(f"✗ {exc}", className="result-bad"), no_update)
    with activity("graph run"):
        if kind == "zoo":
            res = run_zoo(source, target or "host", peers=isinstance(peers, list) and "peers" in peers)
        else:
            res = run(source, target or "host")
    if not res.get("ok"):
        return (no_update, empty_figure("run failed"),
                html.Div(f"✗ {res.get('error')}", className="result-bad"), no_update)
    rep = res["report"]
    fig = node_time_bars(rep["rows"])
    fig.update_layout(width=None)
    verdict = "verified" if rep["verified"] else "WRONG RESULT"
    cls = "result-ok" if rep["verified"] else "result-bad"
    summary = html.Div([
        html.Span(f"{verdict} against {rep['against']} (max rel. error "
                  f"{rep['max_rel_error']:.1e})", className=cls, id="graph-verdict"),
        html.P(whole_graph_line(rep), id="graph-headline"),
        html.P(per_group_line(rep), id="graph-groups-baseline", className="muted"),
        html.P(f"hotspots: {', '.join(rep['hotspots'])}"),
        # where a wrong result starts (the first group, replay step or import node that differs)
        *([html.P(rep["mismatch"]["message"], className="result-bad", id="graph-mismatch")]
          if rep.get("mismatch") else []),
        html.P("the nodes left in torch, with their reasons: Opaque nodes, below",
               className="muted")])
    return rep, fig, summary, peers_view(rep.get("peers"))


@callback(Output("graph-nav", "href"), Output("graph-node-info", "children"),
          Input("graph-view", "clickData"), State("graph-source", "data"),
          prevent_initial_call=True)
def open_node(click, source):
    """Open the fused group of the clicked node in the Studio (its kernel's op at its graph
    shapes, a history entry: /run/<id>), naming the group's nodes."""
    from app.services.graphs import open_in_studio

    point = (click or {}).get("points", [{}])[0]
    data = point.get("customdata")
    if not source or not isinstance(data, list) or not data:
        return no_update, no_update
    try:
        rid, found = open_in_studio(source, str(data[0]))
    except (KeyError, ValueError) as exc:  # a torch node: nothing to open, say why
        return no_update, html.Span(str(exc).strip("'\""), className="muted")
    if ctx.triggered_id is None:
        return no_update, no_update
    return f"/run/{rid}", (f"opening fused group {found['group']} (nodes "
                           f"{', '.join(found['nodes'])}; op {found['op']}) in the Studio "
                           f"(run #{rid})")
