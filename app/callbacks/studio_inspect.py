"""Studio inspection: the assembly of the compiled C kernel, and a side-by-side diff of this kernel
against the same op with other knobs or another backend.

Deferred imports: a page's services load when it is first used, so the server starts fast.
"""

from __future__ import annotations

from dash import Input, Output, State, callback, clientside_callback, ctx
from dash.exceptions import PreventUpdate

MAX_KNOB_TEXT = 400  # characters of the "other config" box


def parse_knobs(text: str | None) -> dict:
    """'ku=1, mr=4, isa=avx2' -> {'ku': 1, 'mr': 4, 'isa': 'avx2'}; ValueError says what is wrong."""
    text = (text or "").strip()
    if len(text) > MAX_KNOB_TEXT:
        raise ValueError(f"the knob list is at most {MAX_KNOB_TEXT} characters, got {len(text)}")
    out: dict = {}
    for part in filter(None, (p.strip() for p in text.replace(";", ",").split(","))):
        name, sep, value = part.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name.isidentifier() or not value:
            raise ValueError(f"write knobs as name=value separated by commas (e.g. ku=1,mr=4); "
                             f"'{part}' is not")
        out[name] = int(value) if value.lstrip("-").isdigit() else value
    return out


def _source(state: dict):
    """The KernelSource of the compiled state (re-emitted: the solved space is cached), queued
    and bounded as a compile."""
    from app.services.kernels import compile_bounds, emit

    with compile_bounds() as check:
        return emit(state["odl"], state["backend"], state["target"], state["sizes"],
                    state["config"], check)[2]


@callback(Output("asm-html", "data"), Output("asm-status", "children"),
          Input("asm-button", "n_clicks"), Input("studio-state", "data"),
          prevent_initial_call=True)
def show_assembly(clicks, state):
    """objdump of the compiled kernel; once asked for, it follows every compile."""
    from app.components.inspect_view import asm_html
    from app.services.assembly import disassemble
    from app.services.kernels import _target
    from app.services.system import activity

    if not clicks:
        raise PreventUpdate  # a compile before the user asked for assembly
    if ctx.triggered_id == "studio-state" and not state:
        raise PreventUpdate
    if not state or not state.get("ok"):
        note = "No assembly: the op does not compile (fix the error on the left)."
        return {"note": note}, ""
    try:
        src = _source(state)
        with activity(f"disassemble {state['op']}"):
            target = _target(state["target"])
            listing = disassemble(src, tuple(target.isa or ()),
                                  tuple(getattr(target, "compiler_flags", None) or ()))
    except Exception as exc:  # shown in the pane, never raised into the page
        return {"note": f"No assembly: {type(exc).__name__}: {exc}"}, ""
    if not listing.ok:
        return {"note": f"No assembly: {listing.error}"}, listing.summary() if listing.flags else ""
    return {"html": asm_html(listing.rows)}, listing.summary()


@callback(Output("diff-html", "data"), Output("diff-status", "children"),
          Input("diff-button", "n_clicks"), State("studio-state", "data"),
          State("diff-backend", "value"), State("diff-config", "value"),
          prevent_initial_call=True)
def diff_kernels(_clicks, state, backend, knob_text):
    """This kernel (A) beside the same op, sizes and target with other knobs or backend (B)."""
    from app.components.inspect_view import diff_html
    from app.services.history import diff_configs
    from app.services.kernels import compile_odl, knob_names

    if not state or not state.get("ok"):
        return {"note": "Compile a kernel first: the diff compares it with another."}, ""
    try:
        knobs = parse_knobs(knob_text)
    except ValueError as exc:
        return {"note": ""}, f"✗ {exc}"
    backend = backend or state["backend"]
    known = knob_names(state["odl"], backend, state["target"], state["sizes"])
    unknown = [k for k in knobs if k not in known]
    if unknown:  # dropped silently, B would look like A and the diff say nothing
        return {"note": ""}, (f"✗ no knob {', '.join(unknown)} for {backend} here; its knobs: "
                              f"{', '.join(known) or 'none'}")
    other = compile_odl(state["odl"], backend, state["target"], state["sizes"], knobs)
    if not other.ok:
        return {"note": ""}, f"✗ B does not compile: {other.error}"
    label = lambda b, cfg: f"{b}: " + (",".join(f"{k}={v}" for k, v in cfg.items()) or "-")  # noqa: E731
    table, stats = diff_html(state["kernel"], other.source,
                             (label(state["backend"], state["config"]),
                              label(backend, other.config)))
    changed = diff_configs(state["config"], other.config) if backend == state["backend"] else []
    knobs_text = ("knobs " + ", ".join(f"{k}: {a} → {b}" for k, a, b in changed)
                  if changed else f"backend {state['backend']} → {backend}"
                  if backend != state["backend"] else "same config")
    lines = (f"{stats['changed']} changed, {stats['added']} added, {stats['removed']} removed, "
             f"{stats['same']} equal lines")
    return {"html": table}, f"A → B: {knobs_text}; {lines}"


for _pane in ("asm", "diff"):
    clientside_callback(
        f"""function (data) {{ return window.dash_clientside.odl.blob(data, "{_pane}-source"); }}""",
        Output(f"{_pane}-paint", "children"), Input(f"{_pane}-html", "data"))
