"""Studio callbacks: load a library op, compile (on demand or on a knob change), paint the editor."""

from __future__ import annotations

from dash import (
    ALL,
    ClientsideFunction,
    Input,
    Output,
    State,
    callback,
    clientside_callback,
    ctx,
    no_update,
)
from dash.exceptions import PreventUpdate


@callback(Output("odl-editor", "value"), Output("sizes-input", "value"),
          Output("op-loaded", "data"), Input("op-select", "value"), prevent_initial_call=True)
def load_op(name):
    """Put a library operator in the editor with sizes that run at once."""
    from app.services.kernels import default_sizes, format_sizes
    from uol_core.ops import op_text

    try:
        odl = op_text(name)
        sizes = format_sizes(default_sizes(odl))
    except Exception as exc:  # shown, never raised into the page
        return no_update, no_update, {"error": str(exc)}
    return odl, sizes, {"op": name}


def _sizes(text: str | None) -> dict:
    from uol_core.runtime.shapes import parse_shape_spec

    return parse_shape_spec(text or "")


@callback(
    Output("kernel-html", "data"), Output("knob-panel", "children"),
    Output("explanation", "children"), Output("odl-error", "children"),
    Output("compile-status", "children"), Output("studio-state", "data"),
    Output("current-target", "data"),
    Input("compile-button", "n_clicks"), Input("op-loaded", "data"),
    Input("backend-select", "value"), Input("target-select", "value"),
    Input("sizes-input", "value"), Input({"type": "knob", "name": ALL}, "value"),
    State({"type": "knob", "name": ALL}, "id"), State("odl-editor", "value"),
    State("studio-state", "data"), State("studio-init", "data"),
)
def compile_kernel(_clicks, _loaded, backend, target, sizes_text, knob_values, knob_ids, odl,
                   state, init):
    """Compile the editor's ODL; keeps the knobs on Compile, resets them on a new op/backend."""
    from app.components.codeview import code_html
    from app.components.studio_parts import knob_panel
    from app.services.kernels import compile_odl
    from app.services.knobs import DERIVED_KNOBS

    trigger = ctx.triggered_id
    state = state or {}
    knobs = {i["name"]: v for i, v in zip(knob_ids, knob_values)}
    # a derived knob (nc) is left out of a carried-over config: it follows the other knobs
    carried = {k: v for k, v in state.get("config", {}).items() if k not in DERIVED_KNOBS}
    if isinstance(trigger, dict):  # a knob changed (or the panel was just re-rendered)
        config = {**carried, **knobs}
        if config == carried and odl == state.get("odl"):
            raise PreventUpdate  # the panel re-render echoes the values it was built with
    elif trigger == "compile-button" and state.get("backend") == backend:
        config = {**carried, **knobs}
    elif trigger is None:
        config = (init or {}).get("config") or {}
    else:
        config = {}
    try:
        sizes = _sizes(sizes_text)
    except ValueError as exc:
        return no_update, no_update, no_update, f"sizes: {exc}", "✗ bad sizes", no_update, target
    res = compile_odl(odl or "", backend, target, sizes or None, config)
    new_state = {"odl": odl, "backend": backend, "target": target, "sizes": res.sizes,
                 "config": res.config, "ok": res.ok, "op": res.op_name,
                 "error_line": res.error_line, "mapped": sorted(set(res.line_map.values())),
                 "kernel": res.source}
    if not res.ok:
        where = f"line {res.error_line}: " if res.error_line else ""
        pane = {"html": "", "note": "No kernel: fix the error on the left."}
        return (pane, no_update, "", f"✗ {where}{res.error}" if not res.error.startswith("line")
                else f"✗ {res.error}", "✗ error", new_state, target)
    signature = frozenset(i + 1 for i, line in enumerate((odl or "").splitlines())
                          if line.lstrip().startswith("op "))
    pane = {"html": code_html(res.source, res.lang, "k", res.line_map, signature)}
    status = (f"{res.lang}, {len(res.source.splitlines())} lines, "
              f"compiled in {res.seconds * 1e3:.0f} ms")
    return (pane, knob_panel(res.knobs), res.explanation, "", status, new_state, target)


clientside_callback(
    """function (data) { return window.dash_clientside.odl.blob(data, "kernel-source"); }""",
    Output("kernel-paint", "children"), Input("kernel-html", "data"),
)

clientside_callback(
    ClientsideFunction(namespace="odl", function_name="paint"),
    Output("odl-paint", "children"),
    Input("odl-editor", "value"), Input("studio-state", "data"),
)
