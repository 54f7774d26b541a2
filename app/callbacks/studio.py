"""Studio callbacks: load a library op, compile (on demand or on a knob change), paint the editor.

Deferred imports: a page's services load when it is first used, so the server starts fast.
"""

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

EDITED = "(edited)"  # the Operator dropdown's value once the editor holds other text


def op_identity(odl: str) -> dict | None:
    """What the Studio's sizes and knobs belong to: the op's name and dimensions (None when the
    text does not parse yet, e.g. half typed)."""
    from app.services.kernels import _parse

    try:
        op = _parse(odl)
    except Exception:  # a half-typed op: keep the current state until it parses
        return None
    return {"op": op.name, "dims": list(op.dims)}


@callback(Output("odl-editor", "value"), Output("sizes-input", "value"),
          Output("op-loaded", "data"), Input("op-select", "value"), prevent_initial_call=True)
def load_op(name):
    """Put a library operator in the editor with sizes that run at once."""
    from app.services.kernels import default_sizes, format_sizes
    from uol_core.ops import op_text

    if name == EDITED:
        raise PreventUpdate  # set by an edit of the text: nothing to load
    try:
        odl = op_text(name)
        sizes = format_sizes(default_sizes(odl))
    except Exception as exc:  # shown, never raised into the page
        return no_update, no_update, {"error": str(exc)}
    return odl, sizes, {**(op_identity(odl) or {"op": name}), "odl": odl}


# The header lines (unindented, not comments) hold the op's name and dimensions: only when
# they change does the server need to look at the text, not on every keystroke in the body.
clientside_callback(
    r"""function (text, loaded, signature, selected) {
        var nu = window.dash_clientside.no_update;
        var head = (text || "").split("\n").filter(function (line) {
            return line.trim() && !/^\s/.test(line) && line.trim()[0] !== "#";
        }).join("\n");
        var edited = loaded && loaded.odl !== undefined && loaded.odl !== text
            && selected !== "EDITED";
        return [head === signature ? nu : head, edited ? "EDITED" : nu];
    }""".replace("EDITED", EDITED),
    Output("odl-signature", "data"), Output("op-select", "value", allow_duplicate=True),
    Input("odl-editor", "value"), State("op-loaded", "data"), State("odl-signature", "data"),
    State("op-select", "value"), prevent_initial_call=True,
)


@callback(Output("sizes-input", "value", allow_duplicate=True),
          Output("op-loaded", "data", allow_duplicate=True),
          Input("odl-signature", "data"), State("odl-editor", "value"),
          State("op-loaded", "data"), prevent_initial_call=True)
def follow_edited_op(_signature, odl, loaded):
    """New ODL text (another op name or other dimensions): sizes reset to its dimensions with
    their defaults, and the compile that follows starts from its own knob space."""
    from app.services.kernels import default_sizes, format_sizes

    ident = op_identity(odl or "")
    loaded = loaded or {}
    if ident is None or (ident["op"] == loaded.get("op") and ident["dims"] == loaded.get("dims")):
        raise PreventUpdate
    return format_sizes(default_sizes(odl)), {**ident, "odl": loaded.get("odl"), "edited": True}


def _sizes(text: str | None) -> dict:
    from uol_core.odl.shapes import parse_shape_spec

    return parse_shape_spec(text or "")


def _sizes_error(sizes: dict) -> str:
    """Why sizes cannot be used, before the compiler is asked (a dimension is at least 1)."""
    bad = [f"{k}={v}" for k, v in sizes.items() if v < 1]
    return f"every size must be at least 1, got {', '.join(bad)}" if bad else ""


def _no_kernel(message: str, status: str, state: dict, target: str) -> tuple:
    """An error compile: no kernel, no knobs, and a header that says so (never 'compiled')."""
    from dash import html

    pane = {"html": "", "note": "No kernel: fix the error on the left."}
    knobs = [html.Div("No knobs until the op compiles.", className="muted")]
    return pane, knobs, "", message, status, state, target


def _start_config(trigger, knobs: dict, odl: str, backend: str, state: dict, init: dict,
                  tuned: dict | None) -> dict:
    """The config a compile starts from: what the user changed, else what this op had."""
    from app.services.knobs import DERIVED_KNOBS

    if not state:
        # the page's first compile (nothing compiled yet): a page inserted by the router lists
        # every input as triggered, the op store first, which must not read as "a new op" and
        # drop the config a permalink or a Guide link opened with
        return (init or {}).get("config") or {}
    # a derived knob (nc) is left out of a carried-over config: it follows the other knobs
    carried = {k: v for k, v in state.get("config", {}).items() if k not in DERIVED_KNOBS}
    ident = op_identity(odl) or {}
    same_op = ident.get("op") == state.get("op") and backend == state.get("backend")
    if isinstance(trigger, dict):  # a knob changed, or the panel was re-rendered
        # only a value the user chose counts: the panel echoes the values it was built with,
        # and a dropdown that lost its value (None) must not start another compile
        changed = {k: v for k, v in knobs.items()
                   if v is not None and v != state.get("config", {}).get(k)}
        if not changed or not same_op:
            raise PreventUpdate
        return {**carried, **changed}
    if trigger == "tune-apply":
        # a tuned config is legal only for the op, backend, target and sizes it was tuned on
        if not tuned or (tuned.get("op"), tuned.get("backend"), tuned.get("target"),
                         tuned.get("sizes")) != (ident.get("op"), backend, state.get("target"),
                                                 state.get("sizes")):
            raise PreventUpdate
        return dict(tuned["config"])
    if trigger == "compile-button" and same_op:
        return carried  # new sizes or target: other legal values, so their own defaults
    if trigger is None:
        return (init or {}).get("config") or {}
    return {}  # a new op or backend: its own space's defaults


@callback(
    Output("kernel-html", "data"), Output("knob-panel", "children"),
    Output("explanation", "children"), Output("odl-error", "children"),
    Output("compile-status", "children"), Output("studio-state", "data"),
    Output("current-target", "data"),
    Input("compile-button", "n_clicks"), Input("op-loaded", "data"),
    Input("backend-select", "value"), Input("target-select", "value"),
    Input("sizes-input", "value"), Input({"type": "knob", "name": ALL}, "value"),
    Input("tune-apply", "n_clicks"),
    State({"type": "knob", "name": ALL}, "id"), State("odl-editor", "value"),
    State("studio-state", "data"), State("studio-init", "data"), State("tune-best", "data"),
    # Run and Tune read the compiled state: pressed while a compile is in flight they would
    # run the kernel before it (new sizes typed, Run pressed at once: the old sizes ran)
    running=[(Output("run-button", "disabled"), True, False),
             (Output("tune-button", "disabled"), True, False)],
)
def compile_kernel(_clicks, _loaded, backend, target, sizes_text, knob_values, _apply, knob_ids,
                   odl, state, init, tuned):
    """Compile the editor's ODL; knobs carry over within one op, reset for a new op/backend."""
    from app.components.codeview import code_html
    from app.components.studio_parts import knob_panel
    from app.services.kernels import compile_odl

    trigger = ctx.triggered_id
    state = state or {}
    knobs = {i["name"]: v for i, v in zip(knob_ids, knob_values)}
    config = _start_config(trigger, knobs, odl or "", backend, state, init, tuned)
    base_state = {"odl": odl, "backend": backend, "target": target, "ok": False,
                  "op": (op_identity(odl or "") or {}).get("op", ""), "config": {},
                  "error_line": 0, "mapped": [], "kernel": ""}
    try:
        sizes = _sizes(sizes_text)
        problem = _sizes_error(sizes)
    except ValueError as exc:
        problem = str(exc)
    if problem:
        return _no_kernel(f"sizes: {problem}", "✗ bad sizes", base_state, target)
    res = compile_odl(odl or "", backend, target, sizes or None, config)
    new_state = {**base_state, "sizes": res.sizes, "config": res.config, "ok": res.ok,
                 "op": res.op_name or base_state["op"], "error_line": res.error_line,
                 "mapped": sorted(set(res.line_map.values())), "kernel": res.source}
    if not res.ok:
        where = f"line {res.error_line}: " if res.error_line else ""
        message = f"✗ {res.error}" if res.error.startswith("line") else f"✗ {where}{res.error}"
        return _no_kernel(message, "✗ error", {**new_state, "config": {}}, target)
    signature = frozenset(i + 1 for i, line in enumerate((odl or "").splitlines())
                          if line.lstrip().startswith("op "))
    pane = {"html": code_html(res.source, res.lang, "k", res.line_map, signature)}
    status = (f"{res.lang}, {len(res.source.splitlines())} lines, "
              f"compiled in {res.seconds * 1e3:.0f} ms")
    return (pane, knob_panel(res.knobs, res.hidden_knobs), res.explanation, "", status, new_state, target)


clientside_callback(
    """function (data) { return window.dash_clientside.odl.blob(data, "kernel-source"); }""",
    Output("kernel-paint", "children"), Input("kernel-html", "data"),
)

clientside_callback(
    ClientsideFunction(namespace="odl", function_name="paint"),
    Output("odl-paint", "children"),
    Input("odl-editor", "value"), Input("studio-state", "data"),
)
