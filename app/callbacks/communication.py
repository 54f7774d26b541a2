"""Communication callbacks: simulate on a topology, fail clicked elements, overlap timelines, gloo measure.

Deferred imports: a page's services load when it is first used, so the server starts fast.
"""

from __future__ import annotations

import json

from dash import Input, Output, State, callback, html, no_update

from app.background import through_broker
from app.figures.studio import empty_figure


def _err(exc: Exception) -> html.Div:
    return html.Div(f"✗ {exc}", className="result-bad")


def _params(kind, nodes, link, oversub, collective, algorithm, size, codec) -> dict:
    """The page's knobs as values, each number checked against its limit (said by name)."""
    from app.services.comm import MAX_DRAW_GPUS, MAX_OVERSUBSCRIPTION, MIN_GPUS, check_number
    from hcf_sim.errors import check_size, parse_size

    if kind != "custom":
        nodes = check_number("GPUs", nodes, MIN_GPUS, MAX_DRAW_GPUS, integer=True,
                             beyond="use `uol hcf simulate` for larger clusters")
    oversub = check_number("Oversubscription", 1 if oversub in (None, "") else oversub, 1,
                           MAX_OVERSUBSCRIPTION)
    if size in (None, ""):
        raise ValueError("Message size is empty: give bytes or a unit, e.g. 64MiB (up to 1 TiB)")
    return {"kind": kind, "nodes": int(nodes or 0), "link": None if link == "default" else link,
            "oversub": float(oversub), "collective": collective, "algorithm": algorithm,
            "size": check_size(parse_size(size)), "codec": codec, "faults": []}


def _topo(p: dict, custom, faulted: bool = True):
    """The state's topology with every fault applied so far (so each panel sees the same fabric)."""
    from app.services.comm import apply_faults, build

    topo = build(p["kind"], p["nodes"], p["link"], p["oversub"], custom)
    return apply_faults(topo, p.get("faults")) if faulted else topo


def _figures(topo, p: dict, res: dict, curves: dict, failed: list[str] | None = None,
             title: str = ""):
    from profilers.figures.comm import algorithm_curves, topology_figure

    tfig = topology_figure(topo.graph, res["utilisation"], failed=failed or (),
                           title=title or f"{topo.name}: {res['algorithm']} {p['collective']}")
    cfig = algorithm_curves(curves["sizes"], curves["times"], curves["crossovers"],
                            (res["size"], res["time"]),
                            title=f"{p['collective']} on {len(topo.gpus)} ranks "
                                  "(flow-level, the model of the result)")
    for fig in (tfig, cfig):
        fig.update_layout(width=None)
    return tfig, cfig


@callback(Output("algorithm-select", "options"), Output("algorithm-select", "value"),
          Input("collective-select", "value"), State("algorithm-select", "value"))
def algorithms(collective, current):
    """Algorithms of the chosen collective, plus auto (the selector)."""
    from hcf_sim.collectives.analytical import ALGORITHMS
    from hcf_sim.collectives.nccl_model import MODELLED
    from hcf_sim.service import NCCL_ONLY

    # NCCL's in-switch reductions are all-reduce algorithms too (the fabric may refuse them)
    extra = NCCL_ONLY if collective == "allreduce" and collective in MODELLED else ()
    opts = ["auto", *ALGORITHMS.get(collective, ()), *extra]
    return opts, current if current in opts else "auto"


@callback(Output("comm-custom", "data"), Output("comm-upload-status", "children"),
          Output("topology-select", "value"), Input("comm-upload", "contents"),
          State("comm-upload", "filename"), prevent_initial_call=True)
def upload_topology(contents, filename):
    """Parse an uploaded topology JSON (size-capped); the simulation checks its contents."""
    from app.security import decode_upload
    from app.services.comm import MAX_TOPOLOGY_JSON, check_custom

    try:
        text = decode_upload(contents, filename, "topology")
        if len(text.encode()) > MAX_TOPOLOGY_JSON:
            raise ValueError(f"over {MAX_TOPOLOGY_JSON // 1024} KiB")
        data = check_custom(json.loads(text))
    except ValueError as exc:  # UploadError, JSONDecodeError and HcfError are ValueErrors
        said = str(exc)
        return no_update, f"✗ {said if str(filename) in said else f'{filename}: {said}'}", no_update
    return data, f"loaded {filename}: press Simulate", "custom"


@callback(Output("comm-result", "children"), Output("link-heatmap", "figure"),
          Output("comm-curves", "figure"), Output("comm-state", "data"),
          Output("comm-fault", "children"),
          Input("simulate-button", "n_clicks"), Input("fault-clear", "n_clicks"),
          State("topology-select", "value"), State("nodes-input", "value"),
          State("link-select", "value"), State("oversub-input", "value"),
          State("collective-select", "value"), State("algorithm-select", "value"),
          State("size-input", "value"), State("codec-select", "value"),
          State("comm-custom", "data"))
def run_simulation(_n, _clear, kind, nodes, link, oversub, collective, algorithm, size, codec,
                   custom):
    """Simulate the collective; time, busbw, link heat on the topology, curves with crossovers."""
    from app.components.comm_parts import result_card
    from app.services import comm

    try:
        p = _params(kind, nodes, link, oversub, collective, algorithm, size, codec)
        topo = _topo(p, custom)
        res = comm.simulate(topo, p["collective"], p["size"], p["algorithm"], p["codec"])
        curves = comm.sweep_curves(topo, p["collective"])
    except Exception as exc:  # HcfError and bad input: said in the page, the server keeps going
        return _err(exc), empty_figure(str(exc)), empty_figure(""), no_update, ""
    tfig, cfig = _figures(topo, p, res, curves)
    return result_card(res, curves["crossovers"]), tfig, cfig, p, ""


@callback(Output("comm-fault", "children", allow_duplicate=True),
          Output("link-heatmap", "figure", allow_duplicate=True),
          Output("comm-result", "children", allow_duplicate=True),
          Output("comm-curves", "figure", allow_duplicate=True),
          Output("comm-state", "data", allow_duplicate=True),
          Input("link-heatmap", "clickData"), State("comm-state", "data"),
          State("comm-custom", "data"), prevent_initial_call=True)
def fail_element(click, p, custom):
    """Fail the clicked link or node, reroute and re-plan; every panel shows the faulted fabric."""
    from app.components.comm_parts import fault_card, result_card
    from app.services import comm
    from hcf_sim.faults import apply_fault

    point = (click or {}).get("points", [{}])[0]
    element = point.get("customdata")
    if not p or not isinstance(element, list) or len(element) != 2:
        return (no_update,) * 5
    try:
        topo = _topo(p, custom)
        rep = comm.fault(topo, element, p["collective"], p["size"], p["algorithm"], p["codec"])
        faults = [*p.get("faults", []), rep["applied"]]
        broken = apply_fault(topo, *rep["applied"])
        curves = comm.sweep_curves(broken, p["collective"])
    except Exception as exc:  # a cut that disconnects GPUs is an HcfError: show it
        return _err(exc), no_update, no_update, no_update, no_update
    state = {**p, "faults": faults}
    # drawn on the intact fabric so the failed elements stay where the user clicked them
    tfig, cfig = _figures(_topo(p, custom, faulted=False), p, rep["after"], curves,
                          [target for _kind, target in faults],
                          title=f"{topo.name} with {rep['fault']} failed")
    return fault_card(rep), tfig, result_card(rep["after"], curves["crossovers"]), cfig, state


DDP_COMPUTE_NOTE = "backward per layer sized as 0.8x its all-reduce here (not a model's)"
DDP_COMPUTE_WHY = ("Compute in this DDP timeline is not measured from a model: each layer's "
                   "backward is sized as 0.8x its bucket's all-reduce on this topology (8 layers "
                   "of 4 MiB), so that both are of the same order. It scales with the link "
                   "speed: read the hidden share as a what-if, not a prediction for a model.")


@callback(Output("overlap-timeline", "figure"), Output("overlap-summary", "children"),
          Input("overlap-kind", "value"), Input("comm-state", "data"),
          State("comm-custom", "data"))
def draw_overlap(kind, p, custom):
    """Per-rank Gantt of a DDP step or a pipeline schedule on this topology's all-reduce."""
    from app.services import comm
    from profilers.figures.charts import timeline_chart
    from profilers.traces import from_rows

    if not p:
        return empty_figure("Simulate first"), ""
    try:
        topo = _topo(p, custom)
        algo = p["algorithm"] if p["collective"] == "allreduce" else "auto"
        out = comm.overlap(topo, algo, kind)
    except Exception as exc:  # e.g. a schedule that needs divisible micro-batches
        return empty_figure(str(exc)), _err(exc)
    fig = timeline_chart(from_rows(out["rows"], title=out["summary"].split(":")[0]))
    fig.update_layout(width=None)
    if kind != "ddp":
        return fig, out["summary"]
    # the compute here is not a model's: it follows the all-reduce, so a faster link shrinks
    # it too; said on the chart and under it, so the overlap is read as a what-if
    fig.update_layout(title=dict(text=f"{fig.layout.title.text}<br><sub>{DDP_COMPUTE_NOTE}"
                                      "</sub>", x=0, xanchor="left"),
                      margin=dict(t=80))
    return fig, html.Div([html.Span(out["summary"]),
                          html.P(DDP_COMPUTE_WHY, className="muted", id="overlap-compute-note")])


@callback(Output("comm-measure-graph", "figure"), Output("comm-measure-status", "children"),
          Input("comm-measure", "n_clicks"), State("current-target", "data"),
          running=[(Output("comm-measure", "disabled"), True, False)],
          background=through_broker(),  # `uol serve --broker`: in the IDE's job worker
          prevent_initial_call=True)
def measure(_n, target):
    """Real gloo all-reduce (2 processes, 3 sizes) in a worker process, or on a live remote
    worker of the Studio's target (`uol serve --broker`); measured over the fitted model."""
    from app.services.comm import measure_gloo
    from app.services.system import activity
    from profilers.figures.comm import measured_vs_predicted

    with activity("gloo measure"):
        res = measure_gloo([1 << 12, 1 << 16, 1 << 20], ranks=2, target=target or "host")
    if not res.get("ok"):
        return empty_figure(res["error"]), f"✗ {res['error']}"
    held = [r for r in res["rows"] if r["held_out"]]
    err = ", ".join(f"{r['error']:.0%} at {r['size']} B" for r in held) or "none held out"
    fig = measured_vs_predicted(res["rows"], "gloo all-reduce, 2 processes: measured vs predicted")
    fig.update_layout(width=None)
    return fig, (f"✓ measured: alpha {res['alpha'] * 1e6:.1f} µs, "
                 f"{1 / res['beta'] / 1e9:.2f} GB/s; held-out error {err}; on {res['ran_on']}")
