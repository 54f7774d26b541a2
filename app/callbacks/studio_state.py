"""The Studio's state as data, and no panel left showing a kernel the inputs no longer describe.

State: the op text, sizes, backend, target and knobs go into the URL and the browser's local
storage on every change (assets/studio_state.js); the page's layout reads them back from the
query (app/pages/studio.py `_initial`), so a reload, a shared link or a return from another page
reopens the same kernel, knobs included.

Stale panels: a compile of another op, sizes, backend or target, or a compile that failed,
empties the Result, the roofline and the history that belonged to the kernel before (in the
browser, assets/studio_state.js `clear`); Apply best is offered only for the inputs its tune
measured. A GPU target asks for a GPU backend.

Deferred imports: a page's services load when it is first used, so the server starts fast.
"""

from __future__ import annotations

from dash import (
    ClientsideFunction,
    Input,
    Output,
    State,
    callback,
    clientside_callback,
    no_update,
)
from dash.exceptions import PreventUpdate

clientside_callback(
    ClientsideFunction(namespace="studio_state", function_name="remember"),
    Output("studio-saved", "data"),
    Input("odl-editor", "value"), Input("studio-state", "data"), Input("sizes-input", "value"),
    Input("backend-select", "value"), Input("target-select", "value"),
    State("op-loaded", "data"), State("studio-init", "data"),
    prevent_initial_call=True,
)

clientside_callback(
    ClientsideFunction(namespace="studio_state", function_name="restore"),
    Output("studio-saved", "data", allow_duplicate=True),
    Input("studio-restore", "data"),
    prevent_initial_call="initial_duplicate",
)


def tuned_for(tuned: dict | None, state: dict | None) -> bool:
    """True when `tuned` (the last tune's best) was measured on the compiled state's inputs."""
    if not tuned or not state or not state.get("ok"):
        return False
    return (tuned.get("op"), tuned.get("backend"), tuned.get("target"), tuned.get("sizes")) == (
        state.get("op"), state.get("backend"), state.get("target"), state.get("sizes"))


clientside_callback(
    ClientsideFunction(namespace="studio_state", function_name="clear"),
    Output("run-result", "children", allow_duplicate=True),
    Output("roofline-graph", "figure", allow_duplicate=True),
    Output("run-history", "children", allow_duplicate=True),
    Output("tune-apply", "disabled", allow_duplicate=True),
    Output("panels-of", "data"),
    Input("studio-state", "data"), State("panels-of", "data"), State("tune-best", "data"),
    State("run-result", "children"), State("roofline-empty", "data"),
    prevent_initial_call=True,
)


def gpu_backend_for(target: str, backend: str) -> tuple[str | None, str]:
    """(the backend to switch to, why) when `backend` cannot build for `target`: a GPU target
    needs a GPU backend (the C backend would build a CPU kernel). (None, "") when it can."""
    from uol_core.backends import gpu_backend_names
    from uol_core.hfl import load_target

    try:
        kind = getattr(load_target(target), "kind", "cpu")
    except Exception:  # an unreadable target: the compile says what is wrong with it
        return None, ""
    if kind != "gpu":
        return None, ""
    usable = gpu_backend_names()
    if backend in usable:
        return None, ""
    if not usable:
        return None, (f"{target} is a GPU target and no GPU backend is installed: the "
                      f"{backend} backend builds CPU kernels only")
    return usable[0], (f"{target} is a GPU target: backend switched from {backend} to "
                       f"{usable[0]} (the {backend} backend builds CPU kernels only)")


@callback(Output("backend-select", "value", allow_duplicate=True),
          Output("studio-note", "children", allow_duplicate=True),
          Input("target-select", "value"), State("backend-select", "value"),
          prevent_initial_call=True)
def gpu_target_needs_gpu_backend(target, backend):
    """A GPU target with a CPU backend switches to the GPU backend and says so."""
    switch, why = gpu_backend_for(target or "host", backend or "c")
    if not why:
        raise PreventUpdate
    return (switch or no_update), why
