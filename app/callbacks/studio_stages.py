"""Studio: Triton's compiler stages of the compiled kernel for the page's GPU target, shown on
request and then following every compile, stage choice, kernel choice and the cubin box.

Deferred imports: a page's services load when it is first used, so the server starts fast.
"""

from __future__ import annotations

from dash import Input, Output, State, callback, clientside_callback, ctx, no_update
from dash.exceptions import PreventUpdate

STAGE_LABELS = {"ttir": "TTIR", "ttgir": "TTGIR", "llir": "LLVM IR", "ptx": "PTX",
                "amdgcn": "AMDGCN"}


@callback(Output("stage-html", "data"), Output("stage-status", "children"),
          Output("stage-kernel", "options"), Output("stage-kernel", "value"),
          Output("stage-select", "options"),
          Input("stage-button", "n_clicks"), Input("studio-state", "data"),
          Input("stage-select", "value"), Input("stage-kernel", "value"),
          Input("stage-binary", "value"), State("stage-select", "options"),
          running=[(Output("stage-button", "disabled"), True, False)],
          prevent_initial_call=True)
def show_stages(clicks, state, stage, kernel, binary, stage_options):
    """The chosen stage of the chosen kernel, each row tied to its Triton and ODL lines."""
    from app.components.triton_stages_view import stage_html
    from app.services.system import activity
    from app.services.triton_stages import stages_view
    from uol_core.runtime.triton_stages import StagesError

    if not clicks:
        raise PreventUpdate  # not asked for yet: a compile alone compiles no stages
    if ctx.triggered_id == "studio-state" and not state:
        raise PreventUpdate
    if not state or not state.get("ok"):
        note = "No stages: the op does not compile (fix the error on the left)."
        return {"note": note}, "", no_update, no_update, no_update
    if ctx.triggered_id == "studio-state":
        kernel = None  # another kernel text: its kernels may have other names
    try:
        with activity(f"triton stages {state['op']}"):
            view = stages_view(state, stage or "ptx", kernel, "cubin" in (binary or []))
    except StagesError as exc:
        return {"note": f"No stages: {exc}"}, "", [], None, no_update
    except Exception as exc:  # shown in the pane, never raised into the page
        return ({"note": f"No stages: {type(exc).__name__}: {exc}"}, "", no_update, no_update,
                no_update)
    options = [{"label": STAGE_LABELS.get(name, label), "value": name}
               for name, label in view.stages]
    same = [o["value"] for o in options] == [o.get("value") for o in stage_options or []]
    return ({"html": stage_html(view.rows)}, view.summary,
            [{"label": k, "value": k} for k in view.kernels], view.kernel,
            no_update if same else options)


clientside_callback(
    """function (data) { return window.dash_clientside.odl.blob(data, "stage-source"); }""",
    Output("stage-paint", "children"), Input("stage-html", "data"))
