"""Debugger callbacks: run the trace in the worker, then fill the pickers, heatmap, masks and findings.

Deferred imports: a page's services load when it is first used, so the server starts fast.
"""

from __future__ import annotations

import base64

from dash import Input, Output, State, callback, ctx, html, no_update

from app.components.source_view import annotated_html, register_painter
from app.figures.studio import empty_figure

register_painter("debug-source")


@callback(Output("debug-op-panel", "style"), Output("debug-file-panel", "style"),
          Input("debug-mode", "value"))
def switch_mode(mode):
    """Show the operator fields or the kernel-file fields."""
    hide = {"display": "none"}
    return (hide, {}) if mode == "file" else ({}, hide)


@callback(Output("debug-kernel-text", "value"), Output("debug-function", "value"),
          Output("debug-grid", "value"), Output("debug-args", "value"),
          Output("debug-status", "children", allow_duplicate=True),
          Input("debug-example", "n_clicks"), Input("debug-upload", "contents"),
          State("debug-upload", "filename"), prevent_initial_call=True)
def load_kernel_text(_example, contents, filename):
    """The example kernel, or an uploaded file's text (UTF-8, size-capped by the Upload)."""
    from app.services.debugging import EXAMPLE_CALL, EXAMPLE_KERNEL, MAX_KERNEL_BYTES

    if ctx.triggered_id == "debug-example":
        c = EXAMPLE_CALL
        return EXAMPLE_KERNEL, c["function"], c["grid"], c["args"], "example loaded"
    try:
        raw = base64.b64decode((contents or ",").split(",", 1)[1])
        if len(raw) > MAX_KERNEL_BYTES:
            raise ValueError("file too large")
        text = raw.decode("utf-8")
    except (ValueError, UnicodeDecodeError) as exc:
        return no_update, no_update, no_update, no_update, f"✗ {filename}: {exc}"
    return text, no_update, no_update, no_update, f"loaded {filename} (not run yet)"


@callback(Output("debug-trace", "data"), Output("debug-status", "children"),
          Input("debug-run", "n_clicks"),
          State("debug-mode", "value"), State("debug-op", "value"), State("debug-sizes", "value"),
          State("debug-kernel-text", "value"), State("debug-function", "value"),
          State("debug-grid", "value"), State("debug-args", "value"),
          running=[(Output("debug-run", "disabled"), True, False)],
          prevent_initial_call=True)
def run_trace(_n, mode, op, sizes, text, function, grid, args):
    """Trace in the worker process; the page shows any error and the server keeps serving."""
    from app.services import debugging
    from app.services.job_queue import client_id
    from app.services.system import activity
    from uol_core.odl.shapes import parse_shape_spec

    try:
        with activity("debug trace"):
            if mode == "file":
                if not (text or "").strip():
                    return no_update, "✗ paste, upload or load a kernel first"
                res = debugging.trace_user_kernel(text, function or "", grid or "1", args or "",
                                                  client=client_id())
            else:
                res = debugging.trace_library_op(op, parse_shape_spec(sizes or ""),
                                                 client=client_id())
    except Exception as exc:  # bad sizes and the like: say it, keep the last trace
        return no_update, f"✗ {exc}"
    if not res.get("ok"):
        return no_update, f"✗ {res.get('error')}"
    s = res["summary"]
    found = len(s["findings"])
    verdict = f"{found} out-of-bounds finding(s)" if found else "no out-of-bounds access"
    return ({"id": res["id"], "summary": s},
            f"✓ {s['events']} loads/stores traced (interpreted, no timing): {verdict}")


@callback(Output("debug-launch", "options"), Output("debug-launch", "value"),
          Output("debug-findings", "children"), Output("debug-masks", "figure"),
          Output("debug-source-html", "data"), Output("debug-notes", "children"),
          Input("debug-trace", "data"), prevent_initial_call=True)
def show_trace(data):
    """Launch list, findings with their lines, masked-lane chart and the marked source."""
    from app.services.debugging import source_of
    from profilers.figures.trace_views import mask_ratio_bars

    s = data["summary"]
    launches = [{"label": f"{i}: {lc['kernel']} grid {tuple(lc['grid'])}", "value": i}
                for i, lc in enumerate(s["launches"])]
    items = [html.Li([html.B(f"{f['kind']} of {f['tensor']} at line {f['line']}"),
                      f" in {f['kernel']}: {f['lanes']} lane(s) in programs "
                      f"{[tuple(p) for p in f['programs']][:4]}, offsets {f['offsets'][:4]} "
                      f"outside [0, {f['numel']})", html.Br(), html.Code(f["source"])],
                     className="finding") for f in s["findings"]]
    findings = html.Ul(items) if items else html.Div("✓ no out-of-bounds access found",
                                                     className="result-ok")
    marks = {f["line"]: f"out-of-bounds {f['kind']} of {f['tensor']}" for f in s["findings"]}
    src = source_of(data["id"])
    blob = ({"html": annotated_html(src, "python", "dbg", marks=marks)} if src
            else {"note": "kernel source not available"})
    fig = mask_ratio_bars(s["mask_ratios"]) if s["mask_ratios"] else empty_figure("no loads")
    notes = "\n".join(s["notes"]) or ""
    return launches, 0 if launches else None, findings, fig, blob, notes


@callback(Output("debug-program", "options"), Output("debug-program", "value"),
          Output("debug-tensor", "options"), Output("debug-tensor", "value"),
          Input("debug-launch", "value"), State("debug-trace", "data"),
          prevent_initial_call=True)
def pick_launch(launch, data):
    """Program ids (grid coordinates) and tensors of the chosen launch."""
    from app.services.debugging import programs

    if launch is None or not data:
        return [], None, [], None
    progs = programs(data["id"], launch)
    options = [{"label": "all programs", "value": "all"}] + [
        {"label": f"({p[0]}, {p[1]}, {p[2]})", "value": ",".join(map(str, p))} for p in progs]
    tensors = list(data["summary"]["launches"][launch]["tensors"])
    findings = [f["tensor"] for f in data["summary"]["findings"]]
    first = next((t for t in tensors if t in findings), tensors[0] if tensors else None)
    return options, "all", tensors, first


@callback(Output("debug-heatmap", "figure"),
          Input("debug-program", "value"), Input("debug-tensor", "value"),
          State("debug-launch", "value"), State("debug-trace", "data"),
          prevent_initial_call=True)
def draw_heatmap(program, tensor, launch, data):
    """Per-element load/store counts of one tensor, one program or all, OOB lanes marked."""
    from app.services.debugging import tensor_view
    from profilers.figures.trace_views import access_heatmap

    if not data or tensor is None or launch is None:
        return empty_figure("Trace a kernel to see its accesses")
    prog = None if program in (None, "all") else [int(x) for x in program.split(",")]
    try:
        v = tensor_view(data["id"], tensor, prog, launch)
    except (KeyError, ValueError, OSError) as exc:
        return empty_figure(f"no view: {exc}")
    who = "all programs" if prog is None else f"program {tuple(prog)}"
    return access_heatmap(v["loads"], v["stores"], tensor, v["shape"], v["oob"],
                          title=f"{tensor} {v['shape']}: accesses per element, {who}")


@callback(Output("debug-sanitizer", "children"),
          Input("debug-sanitize-button", "n_clicks"),
          State("debug-op", "value"), State("debug-sizes", "value"),
          running=[(Output("debug-sanitize-button", "disabled"), True, False)],
          prevent_initial_call=True)
def run_sanitizer(_n, op, sizes):
    """ASan/UBSan on the C kernel (built and run in child processes); findings as a list."""
    from app.services.system import activity
    from profilers.sanitizer import sanitize_op
    from uol_core.odl.shapes import parse_shape_spec
    from uol_core.ops import library_name

    try:
        with activity("C sanitizer"):
            report = sanitize_op(library_name(op), parse_shape_spec(sizes or ""))
    except Exception as exc:  # unsupported op, bad sizes, gcc missing: say it
        return html.P(f"✗ {exc}", className="error")
    if report.clean:
        return html.P(f"✓ {report.op_name}: no finding from AddressSanitizer or UBSan")
    return html.Ul([html.Li(f"{f.kind}: {f.message} — C line {f.kernel_line}, ODL line "
                            f"{f.odl_line}: {f.kernel_text}") for f in report.findings])
